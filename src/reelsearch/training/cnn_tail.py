"""Fine-tune the last blocks of a model's EfficientNet-Lite on a CPU, caching the frozen part (`reelsearch tune-cnn`).

The network is cut after its last stride-2 block (:func:`reelsearch.features.extractors.appearance.last_stage_start`;
``tune.from_block`` moves the cut). The frozen trunk runs once per training image and *view* (the centre crop the
index sees, its mirror image and random crops of 70-100 % of the shorter side, half of them mirrored) and its
activations are cached (a FeatureStore under ``<cache>/trunk/``, resumable). Training, a :class:`TailTask` on the
Trainer, then runs only the tail (the blocks after the cut, the head conv, the pool) with the model's own video and
text projections, on the model's own loss: each epoch shows every training image once, in a random view, with one of
its captions at random (drawn from the seed and the epoch). Development images are embedded from their centre crop,
as ``reelsearch index`` will; the epoch with the best RSum (the untuned start included) is kept, early stopping after
``tune.early_stopping`` epochs without a better one, and an interrupted run resumes exactly.

The tuned model is an ordinary model folder: the tuned tail weights lie beside it (``tail-appearance.safetensors``)
and its feature recipe names them, so extraction, evaluation, indexing and search run the whole tuned network.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from tqdm import tqdm

from reelsearch.cache import cache_root
from reelsearch.config import TuneConfig
from reelsearch.config.recipe import file_identity
from reelsearch.config.typed import apply_section
from reelsearch.errors import ConfigError, ReelsearchError
from reelsearch.evaluation.ranking import retrieval_metrics
from reelsearch.features.caches import caption_features, dataset_cache_dir
from reelsearch.features.extract import decode_job
from reelsearch.features.extractors.appearance import (
    LITE_VARIANTS,
    LiteTail,
    LiteTrunk,
    combined_identity,
    last_stage_start,
    load_tail,
    resize_center_crop,
)
from reelsearch.features.jobs import Job
from reelsearch.features.pipeline import FeaturePipeline
from reelsearch.features.store import FeatureStore
from reelsearch.io import atomic_write_json
from reelsearch.losses import train_losses
from reelsearch.media.decode import parse_policy
from reelsearch.models import JointModel, MixtureOfExperts, load_model
from reelsearch.training.run import evaluate as evaluate_checkpoint
from reelsearch.training.run import open_tuning, saved_lines
from reelsearch.training.task import RetrievalTask, Validation, epoch_batches, parameter_groups, retrieval_validation
from reelsearch.training.trainer import Trainer

logger = logging.getLogger(__name__)

TAIL_FILE = "tail-{modality}.safetensors"


def views_of(image: np.ndarray, size: int, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``n`` views of an ``[H, W, 3]`` image, each ``size x size``: the centre crop (what the index sees), its mirror
    image, then random square crops of 70-100 % of the shorter side, half of them mirrored."""
    out = [resize_center_crop(image, size)]
    if n > 1:
        out.append(np.ascontiguousarray(out[0][:, ::-1]))
    h, w = image.shape[:2]
    while len(out) < n:
        side = max(1, int(min(h, w) * rng.uniform(0.7, 1.0)))
        top, left = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
        view = resize_center_crop(image[top:top + side, left:left + side], size)
        out.append(np.ascontiguousarray(view[:, ::-1]) if rng.random() < 0.5 else view)
    return out


class TrunkCache:
    """The frozen trunk's activations of a dataset's images, ``views`` per image, in a FeatureStore (float16) keyed by
    the recipe, the cut and the views: made once, resumable, shared by later runs."""

    def __init__(self, source, recipe, extractor, block: int, views: int, seed: int):
        self.recipe, self.extractor, self.block, self.views, self.seed = recipe, extractor, block, views, seed
        # the trunk runs the base network's blocks unless a tail tuned earlier starts before the cut: then the
        # activations do not depend on the tuned weights, and a re-tune (or a tune of a tuned model) reuses them
        tail_start = getattr(extractor, "tail_start", None)
        weights = recipe.weights if tail_start is not None and tail_start < block else extractor.base_weights_id
        ident = json.dumps([replace(recipe, weights=weights).key, weights, block, views, seed], default=str)
        name = f"{recipe.extractor}-b{block}-v{views}-{hashlib.sha1(ident.encode()).hexdigest()[:10]}"
        self.store = FeatureStore(cache_root() / "trunk" / dataset_cache_dir(source.fmt, source.root).name / name)
        self.trunk = LiteTrunk(extractor.model.net, block).eval()
        size = extractor.input_size
        with torch.inference_mode():
            self.shape = tuple(self.trunk(torch.zeros(1, 3, size, size)).shape[1:])

    def rows(self, items, progress: bool = True, desc: str = "trunk activations") -> tuple[list, np.ndarray]:
        """(the items that have rows, float16 ``[N, views, C, H, W]``), extracting what is missing; an item that
        cannot be decoded, or has several frames, is left out with a note naming its file (the rest go on)."""
        todo = [it for it in items if not self.store.has("trunk", it.key)]
        size, failed = self.extractor.input_size, {}
        if todo:
            with ThreadPoolExecutor(2) as pool, self.store.writer("trunk", int(np.prod(self.shape))) as writer:
                for it, image in tqdm(zip(todo, pool.map(self._image, todo)), total=len(todo), desc=desc,
                                      unit="image", disable=not progress):
                    if isinstance(image, str):
                        failed[it.key] = image
                        continue
                    rng = np.random.default_rng([self.seed, int(hashlib.sha1(it.key.encode()).hexdigest()[:8], 16)])
                    x = self.extractor.preprocess(np.stack(views_of(image, size, self.views, rng)))
                    with torch.inference_mode():
                        writer.add(it.key, self.trunk(x).reshape(self.views, -1).float().numpy())
            self.store.refresh()
        for reason in list(failed.values())[:5]:
            logger.warning(f"left out: {reason}")
        if len(failed) > 5:
            logger.warning(f"... and {len(failed) - 5} more items left out")
        kept = [it for it in items if it.key not in failed]
        if not kept:
            raise ReelsearchError(f"{desc}: no item could be decoded")
        out = np.stack([np.asarray(self.store.get_raw("trunk", it.key)) for it in kept])
        return kept, out.reshape((len(kept), self.views) + self.shape)

    def _image(self, item) -> np.ndarray | str:
        """The item's image, decoded as extraction decodes the recipe's frames, or why it has none."""
        job = Job(item.key, Path(item.path) if item.path is not None else None, item.start, item.end)
        decoded = decode_job(job, True, None, parse_policy(self.recipe.sampling, self.recipe.max_frames),
                             self.recipe.short_side)
        if decoded.frame_error:
            return decoded.frame_error
        if len(decoded.frames.images) != 1:
            return f"{item.path}: {len(decoded.frames.images)} frames (tune-cnn trains on images, one-frame items)"
        return decoded.frames.images[0]


def _check_tunable(name: str, expert) -> str:
    """The expert's one video modality, if it reads EfficientNet-Lite frame features; ReelsearchError otherwise."""
    recipes = expert.recipes
    if len(recipes) != 1 or next(iter(recipes.values())).extractor not in LITE_VARIANTS or expert.is_pairwise \
            or expert.similarity_name != "cosine":
        what = ", ".join(f"{m} ({r.extractor})" for m, r in recipes.items())
        raise ReelsearchError(f"expert {name!r} reads {what} and scores by {expert.similarity_name} similarity: "
                              f"tune-cnn tunes models over one EfficientNet-Lite feature ({', '.join(LITE_VARIANTS)}) "
                              "scored by cosine similarity without frame attention")
    return next(iter(recipes))


class TailTask(RetrievalTask):
    """One expert's tuning, run by the Trainer: its CNN tail and projections, trained on the cached trunk rows of
    ``train_split``, validated on ``val_split``'s centre crops (RSum selects; the untuned start is epoch 0)."""

    validates_start = True

    def __init__(self, name: str, expert, source, cfg: TuneConfig, train_split: str, val_split: str,
                 progress: bool = True):
        self.name, self.cfg = name, cfg
        self.modality = _check_tunable(name, expert)
        self.recipe = expert.recipes[self.modality]
        self.extractor = extractor = FeaturePipeline({self.modality: self.recipe}, device="cpu").extractor(
            self.modality)
        net = extractor.model.net
        self.block = last_stage_start(net) if cfg.from_block is None else int(cfg.from_block)
        if not 1 <= self.block < len(net._blocks):
            raise ConfigError(f"tune.from_block must be 1-{len(net._blocks) - 1} for {self.recipe.extractor}, got "
                              f"{cfg.from_block}")
        train_items = [it for it in source.dataset.items(source.check_split(train_split)) if it.captions]
        val_items = [it for it in source.dataset.items(source.check_split(val_split)) if it.captions]
        if len(train_items) < cfg.batch_size:
            raise ReelsearchError(f"{source.label}: {len(train_items)} training items with captions, fewer than "
                                  f"one batch ({cfg.batch_size})")
        train_items, self.train_rows = TrunkCache(source, self.recipe, extractor, self.block, cfg.views,
                                                  cfg.seed).rows(train_items, progress,
                                                                 f"{name}: trunk ({train_split}, {cfg.views} views)")
        val_items, self.val_rows = TrunkCache(source, self.recipe, extractor, self.block, 1, cfg.seed).rows(
            val_items, progress, f"{name}: trunk ({val_split})")
        self.model = copy.deepcopy(expert).cpu()
        self.net = copy.deepcopy(net)  # an already tuned tail stays in it, frozen where before the cut
        self.tail = LiteTail(self.net, self.block)
        self.module = torch.nn.ModuleDict({"tail": self.tail, "model": self.model})
        for p in self.module.parameters():
            p.requires_grad_(True)
        processor = self.model.text_processor
        self.caption_rows = caption_features([c for it in train_items for c in it.captions], processor, progress)
        self.caption_start = np.cumsum([0] + [len(it.captions) for it in train_items])
        self.val_captions = caption_features([c for it in val_items for c in it.captions], processor, progress)
        if self.caption_rows is None or self.val_captions is None:
            raise ReelsearchError(f"expert {name!r}: tune-cnn needs a model reading MiniLM token features")
        self.cap2vid = np.array([i for i, it in enumerate(val_items) for _ in it.captions])
        self.losses = train_losses(expert.config.train)

    # ---- embeddings
    def videos(self, x: torch.Tensor) -> torch.Tensor:
        pooled = self.tail(x.float())
        if not self.tail.training and self.recipe.dtype == "float16":
            pooled = pooled.half().float()  # as a feature store would hold the pooled features
        lengths = torch.ones(len(x), dtype=torch.long)
        return self.model.video_forward({"feats": {self.modality: pooled[:, None, :]},
                                         "lengths": {self.modality: lengths}})

    def texts(self, rows) -> torch.Tensor:
        return self.model.text_forward(self.model.text_processor.from_features(rows))

    # ---- the task
    def parameter_groups(self) -> list[dict]:
        return parameter_groups(self.module, self.losses.main, {"tail": self.cfg.lr_cnn / self.cfg.lr})

    def batches(self, epoch: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(images, the view of each, a caption of each) of every batch of ``epoch``: each training image once."""
        rng = np.random.default_rng([self.cfg.seed, epoch])
        out = []
        for idx in epoch_batches(len(self.train_rows), self.cfg.batch_size, self.cfg.seed, epoch):
            views = rng.integers(0, self.cfg.views, len(idx))
            captions = np.array([rng.integers(self.caption_start[i], self.caption_start[i + 1]) for i in idx])
            out.append((idx, views, captions))
        return out

    def loss(self, batch, epoch: int) -> torch.Tensor:
        idx, views, captions = batch
        x = torch.from_numpy(np.stack([self.train_rows[i, v] for i, v in zip(idx, views)]))
        sims = self.texts([self.caption_rows[c] for c in captions]) @ self.videos(x).T
        return self.losses.main(sims)

    def validate(self) -> Validation:
        v = torch.cat([self.videos(torch.from_numpy(self.val_rows[i:i + 256, 0]))
                       for i in range(0, len(self.val_rows), 256)])
        t = torch.cat([self.texts(self.val_captions[i:i + 512]) for i in range(0, len(self.val_captions), 512)])
        res = retrieval_metrics((t @ v.T).numpy(), self.cap2vid, progress=False)
        return retrieval_validation(res, res["RSum"])

    def save(self, directory: Path) -> None:
        """The expert with its tuned tail: the tail file beside the model, named by its feature recipe."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / TAIL_FILE.format(modality=self.modality)
        start = min(self.block, self.extractor.tail_start or self.block)  # blocks tuned before stay in the file
        save_file(LiteTail(self.net, start).tuned_state(), str(path), metadata={"format": "reelsearch.cnn-tail"})
        recipe = replace(self.recipe, options={**self.recipe.options, "tail": str(path.resolve())},
                         weights=combined_identity(self.extractor.base_weights_id, file_identity(path)))
        config = copy.deepcopy(self.model.config)
        config.features.video[self.modality] = recipe
        model = JointModel(config, self.model.text_processor)
        model.load_state_dict(self.model.state_dict())
        model.save(directory)

    def load(self, directory: Path) -> None:
        load_tail(self.net, Path(directory) / TAIL_FILE.format(modality=self.modality))
        self.model.load_state_dict(load_model(directory).state_dict())

    def report(self) -> dict:
        return {"expert": self.name, "extractor": self.recipe.extractor, "from_block": self.block,
                "tuned_parameters": sum(p.numel() for p in self.tail.parameters())}


def tune_cnn(checkpoint: str | Path, data: str, out: str | Path, experts: Sequence[str] | None = None,
             overrides: dict | list[str] | None = None, train_split: str = "train", val_split: str | None = None,
             progress: bool = True, evaluate: bool = True, **options) -> dict:
    """Tune the CNN tail of ``checkpoint`` (a model, or the named experts of a mixture: default every expert over
    EfficientNet-Lite features) on ``data`` into the run folder ``out``, as a training run: a model's tuning writes
    ``out/best/`` (the tuned model), ``out/last/``, ``out/log.csv``; a mixture's tunes each expert in
    ``out/experts/<name>/`` and saves the mixture with its tuned experts in ``out/best/``. ``overrides``: ``tune``
    keys (``{"tune.epochs": 5}`` or ``["tune.epochs=5"]``: ``reelsearch.config.TuneConfig``).

    Returns the report (also ``out/summary.json``): each tuning's epochs (seconds, loss, development metrics) and
    best epoch, and, with ``evaluate``, the saved model's metrics on ``val_split`` computed from the media by the full
    tuned network (``reelsearch eval``'s path). Rerun, it resumes where it stopped."""
    cfg = apply_section(TuneConfig(), overrides)
    out = Path(out)
    model, source, val_split = open_tuning(checkpoint, data, val_split, **options)
    mixture = isinstance(model, MixtureOfExperts)
    names = list(model.experts)
    if experts:
        unknown = [e for e in experts if e not in names]
        if unknown:
            raise ReelsearchError(f"{checkpoint}: no expert {unknown[0]!r}; its experts: {', '.join(names)}")
        names = list(experts)
    elif mixture:
        names = tunable_experts(model)
        if not names:
            raise ReelsearchError(f"{checkpoint}: no expert reads EfficientNet-Lite features alone")
    context = {"model": str(checkpoint), "data": source.label, "train_split": train_split, "val_split": val_split}
    if mixture:
        summaries = {}
        for name in names:
            logger.info(f"tuning expert {name!r}")
            task = TailTask(name, model.experts[name], source, cfg, train_split, val_split, progress)
            summaries[name] = Trainer(task, out / "experts" / name, progress).fit()
        tuned = {k: load_model(out / "experts" / k / "best") if k in summaries else e
                 for k, e in model.experts.items()}
        MixtureOfExperts(tuned, model.fusion, name=model.name).save(out / "best")
        report = {**context, "experts": summaries}
    else:
        task = TailTask(names[0], model.experts[names[0]], source, cfg, train_split, val_split, progress)
        report = {**context, **Trainer(task, out, progress).fit()}
    if evaluate:
        report["result"] = evaluate_checkpoint(out, data, split=val_split, progress=progress, **options)
    atomic_write_json(out / "summary.json", report)
    return report


def report_text(report: dict, out: str | Path) -> str:
    """:func:`tune_cnn`'s report in a few lines: each expert's dev RSum before and after, the saved model's metrics."""
    lines = [f"{name}: dev RSum {r['start']['RSum']:.2f} -> {r['best']['RSum']:.2f} (epoch {r['best_epoch']} of "
             f"{r['epochs_run']})" for name, r in (report.get("experts") or {report["expert"]: report}).items()]
    return "\n".join(lines + saved_lines(report, out))


def tunable_experts(model) -> list[str]:
    """The experts of ``model`` (a joint model is its own) that ``tune-cnn`` can tune."""
    out = []
    for name, expert in model.experts.items():
        try:
            _check_tunable(name, expert)
        except ReelsearchError:
            continue
        out.append(name)
    return out

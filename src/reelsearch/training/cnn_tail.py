"""Fine-tune the last blocks of a model's EfficientNet-Lite on a CPU, caching the frozen part (`reelsearch tune-cnn`).

The network is cut after its last stride-2 block (:func:`reelsearch.features.extractors.appearance.last_stage_start`;
``from_block`` moves the cut). The frozen trunk runs once per training image and *view* (the centre crop the index
sees, its mirror image and random crops of 70-100 % of the shorter side, half of them mirrored) and its activations
are cached (a FeatureStore under ``<cache>/trunk/``, resumable). Training then runs only the tail (the blocks after
the cut, the head conv, the pool) with the model's own video and text projections, on the model's own loss: each
epoch shows every training image once, in a random view, with one of its captions at random. Development images are
embedded from their centre crop, as ``reelsearch index`` will; the epoch with the best RSum is kept (early stopping
after ``patience`` epochs without a better one), and every epoch is checkpointed so an interrupted run resumes.

The result is an ordinary model folder: the tuned tail weights lie beside it (``tail-appearance.safetensors``) and its
feature recipe names them, so extraction, evaluation, indexing and search run the whole tuned network.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from reelsearch.errors import ConfigError, ReelsearchError

TAIL_FILE = "tail-{modality}.safetensors"
STATE_FILE = "tune-state.pt"
REPORT_FILE = "tune.json"


@dataclass
class TailTuneConfig:
    """How to tune. ``from_block``: the first tuned block (None: the blocks after the last stride-2 one); ``views``:
    cached views per training image (1 = the centre crop only); ``lr_cnn`` / ``lr``: Adam learning rates of the CNN
    tail and of the projections; ``epochs``: at most this many passes over the training images; ``patience``: stop
    after this many epochs without a better development RSum."""

    from_block: int | None = None
    views: int = 4
    epochs: int = 25
    lr_cnn: float = 1e-4
    lr: float = 1e-4
    batch_size: int = 128
    patience: int = 4
    grad_clip: float = 2.0
    seed: int = 0

    def check(self) -> None:
        if self.views < 1 or self.epochs < 1 or self.batch_size < 2 or self.patience < 1:
            raise ConfigError("views, epochs and patience must be at least 1, batch_size at least 2")
        if self.lr_cnn < 0 or self.lr <= 0:
            raise ConfigError("lr must be positive and lr_cnn not negative")


def views_of(image: np.ndarray, size: int, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``n`` views of an ``[H, W, 3]`` image, each ``size x size``: the centre crop (what the index sees), its mirror
    image, then random square crops of 70-100 % of the shorter side, half of them mirrored."""
    from reelsearch.features.extractors.appearance import resize_center_crop

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
        from reelsearch.cache import cache_root
        from reelsearch.features.caches import dataset_cache_dir
        from reelsearch.features.extractors.appearance import LiteTrunk
        from reelsearch.features.store import FeatureStore

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
        from concurrent.futures import ThreadPoolExecutor

        from tqdm import tqdm

        from reelsearch.features.caches import note

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
            note(f"left out: {reason}")
        if len(failed) > 5:
            note(f"... and {len(failed) - 5} more items left out")
        kept = [it for it in items if it.key not in failed]
        if not kept:
            raise ReelsearchError(f"{desc}: no item could be decoded")
        out = np.stack([np.asarray(self.store.get_raw("trunk", it.key)) for it in kept])
        return kept, out.reshape((len(kept), self.views) + self.shape)

    def _image(self, item) -> np.ndarray | str:
        """The item's image, decoded as extraction decodes the recipe's frames, or why it has none."""
        from reelsearch.features.extract import decode_job
        from reelsearch.features.sources import Job
        from reelsearch.media.decode import parse_policy

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
    from reelsearch.features.extractors.appearance import LITE_VARIANTS

    recipes = expert.recipes
    if len(recipes) != 1 or next(iter(recipes.values())).extractor not in LITE_VARIANTS or expert.is_pairwise \
            or expert.similarity_name != "cosine":
        what = ", ".join(f"{m} ({r.extractor})" for m, r in recipes.items())
        raise ReelsearchError(f"expert {name!r} reads {what} and scores by {expert.similarity_name} similarity: "
                              f"tune-cnn tunes models over one EfficientNet-Lite feature ({', '.join(LITE_VARIANTS)}) "
                              "scored by cosine similarity without frame attention")
    return next(iter(recipes))


class TailTuner:
    """One expert's tuning: its tail, its projections, the cached trunk rows, the optimiser, the epoch loop."""

    def __init__(self, name: str, expert, source, cfg: TailTuneConfig, work: Path, train_split: str,
                 val_split: str, progress: bool):
        from reelsearch.features.caches import caption_features
        from reelsearch.features.extractors.appearance import LiteTail, last_stage_start
        from reelsearch.features.pipeline import FeaturePipeline
        from reelsearch.training.run import loss_of

        self.name, self.cfg, self.work, self.progress = name, cfg, work, progress
        self.modality = _check_tunable(name, expert)
        self.recipe = expert.recipes[self.modality]
        self.extractor = extractor = FeaturePipeline({self.modality: self.recipe}, device="cpu").extractor(
            self.modality)
        net = extractor.model.net
        self.block = last_stage_start(net) if cfg.from_block is None else int(cfg.from_block)
        if not 1 <= self.block < len(net._blocks):
            raise ConfigError(f"from_block must be 1-{len(net._blocks) - 1} for {self.recipe.extractor}, got "
                              f"{cfg.from_block}")
        train_items = [it for it in source.dataset.items(source.check_split(train_split)) if it.captions]
        self.val_items = [it for it in source.dataset.items(source.check_split(val_split)) if it.captions]
        if len(train_items) < cfg.batch_size:
            raise ReelsearchError(f"{source.label}: {len(train_items)} training items with captions, fewer than "
                                  f"one batch ({cfg.batch_size})")
        train_items, self.train_rows = TrunkCache(source, self.recipe, extractor, self.block, cfg.views,
                                                  cfg.seed).rows(train_items, progress,
                                                                 f"{name}: trunk ({train_split}, {cfg.views} views)")
        self.val_items, self.val_rows = TrunkCache(source, self.recipe, extractor, self.block, 1, cfg.seed).rows(
            self.val_items, progress, f"{name}: trunk ({val_split})")
        self.model = copy.deepcopy(expert).cpu()
        self.net = copy.deepcopy(net)  # an already tuned tail stays in it, frozen where before the cut
        self.tail = LiteTail(self.net, self.block)
        for p in list(self.tail.parameters()) + list(self.model.parameters()):
            p.requires_grad_(True)
        processor = self.model.text_processor
        captions = [c for it in train_items for c in it.captions]
        self.caption_rows = caption_features(captions, processor, progress)
        self.caption_start = np.cumsum([0] + [len(it.captions) for it in train_items])
        self.val_captions = caption_features([c for it in self.val_items for c in it.captions], processor, progress)
        if self.caption_rows is None or self.val_captions is None:
            raise ReelsearchError(f"expert {name!r}: tune-cnn needs a model reading MiniLM token features")
        self.cap2vid = np.array([i for i, it in enumerate(self.val_items) for _ in it.captions])
        self.loss = loss_of(expert.config.train)
        self.optimizer = torch.optim.Adam([{"params": list(self.tail.parameters()), "lr": cfg.lr_cnn},
                                           {"params": list(self.model.parameters()), "lr": cfg.lr}])

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

    def evaluate(self) -> dict:
        from reelsearch.evaluation.ranking import retrieval_metrics

        self.tail.eval()
        self.model.eval()
        with torch.inference_mode():
            v = torch.cat([self.videos(torch.from_numpy(self.val_rows[i:i + 256, 0]))
                           for i in range(0, len(self.val_rows), 256)])
            t = torch.cat([self.texts(self.val_captions[i:i + 512]) for i in range(0, len(self.val_captions), 512)])
            return retrieval_metrics((t @ v.T).numpy(), self.cap2vid, progress=False)

    # ---- training
    def epoch(self, rng: np.random.Generator) -> float:
        from tqdm import tqdm

        self.tail.train()
        self.model.train()
        params = list(self.tail.parameters()) + list(self.model.parameters())
        order = rng.permutation(len(self.train_rows))
        batches = [order[i:i + self.cfg.batch_size] for i in range(0, len(order) - self.cfg.batch_size + 1,
                                                                    self.cfg.batch_size)]
        total = 0.0
        for idx in tqdm(batches, desc=f"{self.name}: epoch", unit="batch", disable=not self.progress, leave=False):
            views = rng.integers(0, self.cfg.views, len(idx))
            x = torch.from_numpy(np.stack([self.train_rows[i, v] for i, v in zip(idx, views)]))
            caps = [self.caption_rows[int(rng.integers(self.caption_start[i], self.caption_start[i + 1]))]
                    for i in idx]
            loss = self.loss(self.texts(caps) @ self.videos(x).T)
            self.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, self.cfg.grad_clip)
            self.optimizer.step()
            total += float(loss.detach())
        return total / max(1, len(batches))

    def state(self, optimizer: bool = True) -> dict:
        """A copy of the weights (and the optimiser's state): training goes on changing the tensors in place."""
        out = {"tail": copy.deepcopy(self.tail.state_dict()), "model": copy.deepcopy(self.model.state_dict())}
        if optimizer:
            out["optimizer"] = copy.deepcopy(self.optimizer.state_dict())
        return out

    def load_state(self, state: dict) -> None:
        self.tail.load_state_dict(state["tail"])
        self.model.load_state_dict(state["model"])
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])

    def run(self) -> dict:
        """Tune (resuming from the work folder's state), keep the best epoch; the report of the run."""
        from reelsearch.io import atomic_path

        state_path = self.work / STATE_FILE
        self.work.mkdir(parents=True, exist_ok=True)
        if state_path.is_file():
            saved = torch.load(state_path, map_location="cpu", weights_only=True)
            self.load_state(saved["last"])
            history, best, rng_state = saved["history"], saved["best"], saved["rng"]
            torch.set_rng_state(saved["torch_rng"])
            print(f"reelsearch: {self.name}: resuming after epoch {len(history) - 1}")
        else:
            start = self.evaluate()
            history = [{"epoch": 0, "RSum": start["RSum"], "v2t_R@1": start["v2t"]["R@1"],
                        "t2v_R@1": start["t2v"]["R@1"], "seconds": 0.0, "loss": None}]
            best, rng_state = {"epoch": 0, "RSum": start["RSum"], "state": self.state(optimizer=False)}, None
            torch.manual_seed(self.cfg.seed)
        rng = np.random.default_rng(self.cfg.seed)
        if rng_state is not None:
            rng.bit_generator.state = rng_state
        while len(history) <= self.cfg.epochs and len(history) - 1 - best["epoch"] < self.cfg.patience:
            t0 = time.perf_counter()
            loss = self.epoch(rng)
            seconds = time.perf_counter() - t0
            res = self.evaluate()
            row = {"epoch": len(history), "RSum": res["RSum"], "v2t_R@1": res["v2t"]["R@1"],
                   "t2v_R@1": res["t2v"]["R@1"], "seconds": round(seconds, 1), "loss": round(loss, 4)}
            history.append(row)
            if res["RSum"] > best["RSum"]:
                best = {"epoch": row["epoch"], "RSum": res["RSum"], "state": self.state(optimizer=False)}
            print(f"reelsearch: {self.name}: epoch {row['epoch']}: loss {loss:.4f}, {seconds:.0f} s, i2t/t2i R@1 "
                  f"{row['v2t_R@1']:.1f}/{row['t2v_R@1']:.2f}, RSum {res['RSum']:.2f} (best {best['RSum']:.2f}, "
                  f"epoch {best['epoch']})", flush=True)
            with atomic_path(state_path) as tmp:
                torch.save({"last": self.state(), "best": best, "history": history,
                            "rng": rng.bit_generator.state, "torch_rng": torch.get_rng_state()}, tmp)
        self.load_state(best["state"])
        return {"expert": self.name, "extractor": self.recipe.extractor, "from_block": self.block,
                "tuned_parameters": sum(p.numel() for p in self.tail.parameters()),
                "best_epoch": best["epoch"], "history": history, "config": asdict(self.cfg)}

    def tuned_model(self):
        """The expert with the tuned tail: its recipe names the tail file (in the work folder until saved)."""
        from safetensors.torch import save_file

        from reelsearch.config.recipe import file_identity
        from reelsearch.features.extractors.appearance import LiteTail, combined_identity
        from reelsearch.io import atomic_path
        from reelsearch.models import JointModel

        path = self.work / TAIL_FILE.format(modality=self.modality)
        start = min(self.block, self.extractor.tail_start or self.block)  # blocks tuned before stay in the file
        with atomic_path(path) as tmp:
            save_file(LiteTail(self.net, start).tuned_state(), str(tmp), metadata={"format": "reelsearch.cnn-tail"})
        recipe = replace(self.recipe, options={**self.recipe.options, "tail": str(path.resolve())},
                         weights=combined_identity(self.extractor.base_weights_id, file_identity(path)))
        config = copy.deepcopy(self.model.config)
        config.features.video[self.modality] = recipe
        model = JointModel(config, self.model.text_processor)
        model.load_state_dict(self.model.state_dict())
        return model.eval()


def tune_cnn(checkpoint: str | Path, data: str, out: str | Path, experts: list[str] | None = None,
             cfg: TailTuneConfig | None = None, train_split: str = "train", val_split: str | None = None,
             progress: bool = True, evaluate: bool = True, **options) -> dict:
    """Tune the CNN tail of ``checkpoint`` (a model, or the named experts of a mixture: default every expert over
    EfficientNet-Lite features) on ``data`` and save the tuned model at ``out``; the report (also ``out/tune.json``):
    each expert's epochs with seconds and development metrics, and, with ``evaluate``, the saved model's metrics on
    ``val_split`` computed from the media by the full tuned network (``reelsearch eval``'s path)."""
    from reelsearch.features.caches import DatasetSource
    from reelsearch.io import atomic_write_json
    from reelsearch.models import MixtureOfExperts, load_model

    cfg = cfg or TailTuneConfig()
    cfg.check()
    out = Path(out)
    model = load_model(checkpoint)
    source, _ = DatasetSource.open(data, **options)
    val_split = val_split or source.default_val_split()
    if val_split is None:
        raise ReelsearchError(f"{source.label}: no val or dev split to select the epoch on; pass val_split")
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
    tuned, reports = dict(model.experts), []
    for name in names:
        tuner = TailTuner(name, model.experts[name], source, cfg, out / ".tuning" / name, train_split, val_split,
                           progress)
        reports.append(tuner.run())
        tuned[name] = tuner.tuned_model()
    if mixture:
        result = MixtureOfExperts(tuned, model.fusion, name=model.name)
    else:
        result = tuned[names[0]]
    result.save(out)
    shutil.rmtree(out / ".tuning", ignore_errors=True)  # the tuned files are in the model now
    report = {"model": str(checkpoint), "data": source.label, "train_split": train_split, "val_split": val_split,
              "experts": reports}
    if evaluate:
        from reelsearch.training.run import evaluate as run_eval

        report["result"] = run_eval(str(out), data, split=val_split, progress=progress, **options)
    atomic_write_json(out / REPORT_FILE, report)
    return report


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

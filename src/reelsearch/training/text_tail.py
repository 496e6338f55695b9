"""Tune the top layers of a model's text tower with its projections (`reelsearch tune-text`): `tune-cnn`'s
counterpart on the text side.

The video side is what the model computes: each expert's video features come from the model's own feature pipeline
and caches (tuned CNN tails included); its video projection trains along (``tune_text.video``) or stays. The text
tower (MiniLM) is cut below its top ``tune_text.layers`` layers; the hidden states there are computed once per
caption and cached (``<cache>/text/``), and training, a :class:`TextTask` on the Trainer, runs only the top layers
and each expert's projections, on each expert's own loss, summed over a mixture's experts: they share the one tuned
tower as they share one text pass per query. Each epoch shows every training video once, with one of its captions
at random (drawn from the seed and the epoch); the development captions and videos are embedded whole and the
model's fused RSum selects the epoch (the untuned start included), early stopping after ``tune_text.early_stopping``
epochs without a better one; an interrupted run resumes exactly.

``tune_text.layers=0`` trains the projections only, over the frozen tower; ``tune_text.depth`` cuts the tower after
that many layers (the experts then read its hidden states there: a faster query encoder, with ``teacher`` the
model itself); ``tune_text.tower`` first puts another
tower (all-mpnet-base-v2) in place of the model's, the text side started anew; ``tune_text.teacher`` distils a
model's caption embeddings into the tuned one (a bigger tower as teacher of the tower that fits the query budget),
``tune_text.distill_batch`` on more sentences each step than the ranking batch's captions: the training captions and
the unlabeled ``tune_text.distill_sentences``.

The tuned model is an ordinary model folder: the tuned layers lie beside it (``text-tail.safetensors``; a mixture's
once, beside its experts) and its text recipe names them, so evaluation, indexing and search run the tuned tower
(in ONNX Runtime on a CPU, float32 or int8). A querybank made for the untuned model no longer fits and is dropped:
`reelsearch querybank` makes the tuned model's.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from reelsearch.config import TuneTextConfig
from reelsearch.config.recipe import combined_identity, file_identity, minilm_text
from reelsearch.config.typed import apply_section
from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.evaluation.evaluator import fused_metrics
from reelsearch.features.caches import caption_features
from reelsearch.features.pairs import pad_sequences
from reelsearch.io import atomic_write_json, numbered_lines, read_text
from reelsearch.losses import train_losses
from reelsearch.models import JointModel, MiniLMTextProcessor, MixtureOfExperts, load_model
from reelsearch.models.parts import TEXT_TAIL_FILE
from reelsearch.models.text_processor import pad_features
from reelsearch.text.minilm import MiniLMEncoder
from reelsearch.text.tail import TowerTop, load_tail, save_tail, tail_first_layer
from reelsearch.training.run import evaluate as evaluate_checkpoint
from reelsearch.training.run import open_tuning, saved_lines
from reelsearch.training.task import TrainingTask, Validation, epoch_batches, parameter_groups, retrieval_validation
from reelsearch.training.trainer import Trainer

logger = logging.getLogger(__name__)

EVAL_BATCH = 512


def _shared_tower(model) -> MiniLMTextProcessor:
    """The text processor the experts of ``model`` share (MiniLM's last layer, one encoder and tail), or a
    ReelsearchError saying why the model's text side cannot be tuned."""
    processors = {}
    for name, expert in model.experts.items():
        processor, text = expert.text_processor, expert.config.features.text
        if text.kind != "minilm" or text.layer is not None:
            raise ReelsearchError(f"expert {name!r} reads {text.kind} text features"
                                  f"{'' if text.layer is None else f' after layer {text.layer}'}: tune-text tunes "
                                  "the top layers of the MiniLM whose last layer's token features a model reads")
        if expert.is_pairwise:
            raise ReelsearchError(f"expert {name!r} attends over frames per caption: tune-text tunes models whose "
                                  "videos embed alone")
        processors[name] = processor
    towers = {(p.model_dir, p.tail and file_identity(p.tail)) for p in processors.values()}
    if len(towers) > 1:
        raise ReelsearchError(f"the experts {', '.join(processors)} read different text towers: tune-text tunes the "
                              "one tower a mixture's experts share")
    return next(iter(processors.values()))


def tower_batch(rows, top: TowerTop | None) -> dict:
    """The text batch of a tower's last-layer token features from the hidden states ``rows`` (one [L_i, H] per
    caption) below its ``top`` layers (None: they are the last layer's already)."""
    feats, lengths = pad_features([torch.as_tensor(np.asarray(r, dtype=np.float32)) for r in rows],
                                  int(np.asarray(rows[0]).shape[1]))
    mask = torch.arange(feats.size(1))[None, :] < lengths[:, None]
    return {"feats": top(feats, mask) if top is not None else feats, "lengths": lengths, "mask": mask}


def with_tower(model, tower: str, seed: int = 0):
    """``model`` (a copy) reading the text tower ``tower``: each expert's text encoder and projection started anew
    (from ``seed``) for its features, everything else kept."""
    torch.manual_seed(seed)
    experts = {}
    for name, expert in model.experts.items():
        config = copy.deepcopy(expert.config)
        config.features = replace(config.features, text=minilm_text(tower=tower))
        experts[name] = JointModel(config)
        kept = {k: v for k, v in expert.state_dict().items() if not k.startswith(("text_encoder.", "text_projection."))}
        missing, unexpected = experts[name].load_state_dict(kept, strict=False)
        assert not unexpected and all(k.startswith(("text_encoder.", "text_projection.")) for k in missing)
    if isinstance(model, MixtureOfExperts):
        return MixtureOfExperts(experts, model.fusion, name=model.name)
    return next(iter(experts.values()))


class TextTask(TrainingTask):
    """The top ``cfg.layers`` layers of the text tower ``model``'s experts share, and every expert's projections,
    trained on ``train_split`` and validated on ``val_split`` (the fused RSum selects; the untuned start is epoch
    0); ``cfg.tower``: another tower first; ``cfg.teacher``: distil its caption embeddings."""

    validates_start = True

    def __init__(self, model, source, cfg: TuneTextConfig, train_split: str, val_split: str,
                 progress: bool = True):
        self.cfg = cfg
        if cfg.tower is not None:
            model = with_tower(model, cfg.tower, cfg.seed)
        processor = _shared_tower(model)
        # a private copy of the tower (trained in place; the shared one may serve queries meanwhile)
        self.encoder = MiniLMEncoder(model_dir=processor.model_dir, tail=processor.tail, runtime="torch")
        self.bert = self.encoder.bert
        n = self.encoder.num_layers
        self.end = n if cfg.depth is None else cfg.depth  # the tower cut after this many layers
        if not 0 <= cfg.layers <= self.end <= n:
            raise ReelsearchError(f"tune_text.layers must be 0-{self.end} and depth 1-{n} (the tower has {n} "
                                  f"layers), got {cfg.layers} and {cfg.depth}")
        self.first = self.end - cfg.layers
        # the states below the tuned layers, by this torch copy: an ONNX graph cut at that layer would serve
        # nothing else (its export costs more than it saves on batches of captions)
        states = MiniLMTextProcessor(self.encoder, dim=self.encoder.dim, model_dir=processor.model_dir,
                                     layer=self.first if self.first < n else None, tail=processor.tail)
        self.train_data = source.pairs(model.recipes, source.check_split(train_split), states, progress=progress)
        self.val_data = source.pairs(model.recipes, source.check_split(val_split), states, progress=progress)
        extra = read_sentences(cfg.distill_sentences) if cfg.distill_sentences else []
        self.extra_states = caption_features(extra, states, progress) if extra else []
        if len(self.train_data.video_keys) < cfg.batch_size:
            raise ReelsearchError(f"{source.label}: {len(self.train_data.video_keys)} training videos with captions "
                                  f"and features, fewer than one batch ({cfg.batch_size})")
        cap2vid = self.train_data.cap2vid
        videos = np.arange(len(self.train_data.video_keys))
        self.caption_span = np.stack([np.searchsorted(cap2vid, videos), np.searchsorted(cap2vid, videos, "right")], 1)
        self.model = copy.deepcopy(model).cpu()
        self.model.querybank = None  # embedded by the untuned tower: it does not fit the tuned one
        self.experts: dict[str, JointModel] = dict(self.model.experts)
        names = getattr(self.model, "feature_names", {k: {m: m for m in e.modalities} for k, e in self.experts.items()})
        self.feature_names = names
        for p in self.bert.parameters():
            p.requires_grad_(False)
        self.top = TowerTop(self.bert, self.first, self.end) if cfg.layers else None  # (0: the tower stays frozen)
        for expert in self.experts.values():
            sides = [expert.text_encoder, expert.text_projection]
            if cfg.video:
                sides += [expert.video_encoders, expert.video_projection]
            for p in expert.parameters():
                p.requires_grad_(False)
            for p in (p for side in sides for p in side.parameters()):
                p.requires_grad_(True)
            if cfg.text_dropout is not None and hasattr(expert.text_encoder, "input_dropout"):
                expert.text_encoder.input_dropout = nn.Dropout(cfg.text_dropout) if cfg.text_dropout else None
        trained = nn.ModuleDict({"experts": nn.ModuleDict(self.experts)})
        if self.top is not None:
            trained["top"] = self.top
            for p in self.top.parameters():
                p.requires_grad_(True)
        self.losses = nn.ModuleDict({k: train_losses(e.config.train).main for k, e in self.experts.items()})
        self.module = trained
        self.targets = self._teacher_targets(cfg.teacher, extra, progress) if cfg.teacher else None

    def _teacher_targets(self, teacher_dir: str, extra: list[str], progress: bool) -> dict[str, torch.Tensor]:
        """Each expert's teacher embeddings of the training captions, then of the sentences ``extra``; the teacher
        must have the model's experts with the same video side (its joint space)."""
        teacher = load_model(teacher_dir)
        if sorted(teacher.experts) != sorted(self.experts):
            raise ReelsearchError(f"tune_text.teacher {teacher_dir}: experts {sorted(teacher.experts)}, the model's "
                                  f"{sorted(self.experts)}: distillation matches each expert's caption embeddings")
        for name, expert in self.experts.items():
            mine, theirs = expert.state_dict(), teacher.experts[name].state_dict()
            video = [k for k in mine if k.startswith(("video_encoders.", "video_projection."))]
            if any(k not in theirs or not torch.equal(mine[k], theirs[k]) for k in video):
                raise ReelsearchError(f"tune_text.teacher {teacher_dir}: expert {name!r} has another video side than "
                                      "the model's, so another joint space: start from the teacher itself with "
                                      "tune_text.tower set")
        captions = list(self.train_data.captions) + extra
        logger.info(f"teacher {teacher_dir}: embedding {len(self.train_data.captions)} training captions and "
                    f"{len(extra)} more sentences")
        processor, top = _shared_tower(teacher), None
        if processor.tail:  # its tuned layers on its cached states below them: a fraction of the whole tower's cost
            first = tail_first_layer(processor.tail)
            tower = MiniLMEncoder(model_dir=processor.model_dir, tail=processor.tail, runtime="torch")
            top = TowerTop(tower.bert, first).eval()
            processor = MiniLMTextProcessor(tower, dim=tower.dim, model_dir=processor.model_dir, layer=first,
                                            tail=processor.tail)
        states = caption_features(captions, processor, progress)
        targets = {name: [] for name in self.experts}
        with torch.inference_mode():
            for i in range(0, len(captions), EVAL_BATCH):
                batch = tower_batch(states[i:i + EVAL_BATCH], top)
                for name in targets:
                    targets[name].append(teacher.experts[name].text_forward(batch).float())
        return {name: torch.cat(rows) for name, rows in targets.items()}

    # ---- embeddings
    def tokens(self, rows) -> dict:
        """The text batch of the tuned tower's last-layer token features from the cached states ``rows``."""
        return tower_batch(rows, self.top)

    def videos(self, name: str, data, vids) -> torch.Tensor:
        """Expert ``name``'s embeddings of the videos ``vids`` of ``data`` (a PairData)."""
        feats, lengths = {}, {}
        for modality, feature in self.feature_names[name].items():
            feats[modality], lengths[modality] = pad_sequences([data.video_feats[feature][j] for j in vids])
        return self.experts[name].video_forward({"feats": feats, "lengths": lengths})

    # ---- the task
    def parameter_groups(self) -> list[dict]:
        return parameter_groups(self.module, self.losses,
                                {"top": self.cfg.lr_text / self.cfg.lr} if self.top is not None else {})

    def batches(self, epoch: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """(videos, a caption of each) of every batch of ``epoch``: each training video once."""
        rng = np.random.default_rng([self.cfg.seed, epoch])
        out = []
        for vids in epoch_batches(len(self.caption_span), self.cfg.batch_size, self.cfg.seed, epoch):
            start, end = self.caption_span[vids].T
            out.append((vids, start + (rng.random(len(vids)) * (end - start)).astype(np.int64)))
        if not self.cfg.distill_batch:
            return out
        # the distillation pool's sentences of each step: whole permutations of the pool, drawn from (seed, epoch)
        pool = len(self.train_data.captions) + len(self.extra_states)
        need = len(out) * self.cfg.distill_batch
        draws = np.concatenate([rng.permutation(pool) for _ in range(-(-need // pool))])[:need]
        return [(*b, d) for b, d in zip(out, np.split(draws, len(out)), strict=True)]

    def loss(self, batch, epoch: int) -> torch.Tensor:
        vids, captions = batch[:2]
        text = self.tokens([self.train_data.text_features[c] for c in captions])
        total = 0.0
        for name, expert in self.experts.items():
            t = expert.text_forward(text)
            sims = expert.similarity(t, self.videos(name, self.train_data, vids)).float()
            total = total + self.losses[name](sims)
            if self.targets is not None:  # summed over the batch, as the ranking losses are
                total = total + self.cfg.distill * (1 - (t * self.targets[name][captions]).sum(-1)).sum()
        if len(batch) > 2:  # the distillation pool's sentences of this step: the distillation loss alone
            n = len(self.train_data.captions)
            pool = self.tokens([self.train_data.text_features[i] if i < n else self.extra_states[i - n]
                                for i in batch[2]])
            for name, expert in self.experts.items():
                t = expert.text_forward(pool)
                total = total + self.cfg.distill * (1 - (t * self.targets[name][batch[2]]).sum(-1)).sum()
        return total

    def validate(self) -> Validation:
        data = self.val_data
        texts = {k: [] for k in self.experts}
        for i in range(0, len(data.captions), EVAL_BATCH):
            batch = self.tokens(data.text_features[i:i + EVAL_BATCH])
            for name, expert in self.experts.items():
                texts[name].append(expert.text_forward(batch))
        scores = {}
        for name, expert in self.experts.items():
            v = torch.cat([self.videos(name, data, range(j, min(j + EVAL_BATCH, len(data.video_keys))))
                           for j in range(0, len(data.video_keys), EVAL_BATCH)])
            scores[name] = expert.similarity(torch.cat(texts[name]), v).float().numpy()
        res = fused_metrics(self.model, scores, data.cap2vid)
        if len(scores) > 1:
            res["experts"] = {k: fused_metrics(e, {k: scores[k]}, data.cap2vid)["RSum"]
                              for k, e in self.experts.items()}
        val = retrieval_validation(res, res["RSum"])
        if len(scores) > 1:
            val.row.update({f"RSum_{k}": v for k, v in res["experts"].items()})
        return val

    def save(self, directory: Path) -> None:
        """The model with its tuned tower: the tuned layers beside it (from the first one tuned earlier, when the
        model came with a tail), named by each expert's text recipe."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / TEXT_TAIL_FILE
        n = self.encoder.num_layers
        first = min(self.first, self.encoder.tail_first if self.encoder.tail_first is not None else n)
        text = {"tail": None, "weights": self.encoder.base_weights_id, "layer": None if self.end == n else self.end}
        if first < self.end:  # tuned layers (now, or earlier) of the tower as cut
            save_tail(self.bert, first, path, self.cfg.store, last=self.end)
            text.update(tail=str(path.resolve()),
                        weights=combined_identity(self.encoder.base_weights_id, file_identity(path)))
        experts = {}
        for name, expert in self.experts.items():
            config = copy.deepcopy(expert.config)
            config.features = replace(config.features, text=replace(config.features.text, **text))
            experts[name] = JointModel(config)
            experts[name].load_state_dict(expert.state_dict())
        if isinstance(self.model, MixtureOfExperts):
            MixtureOfExperts(experts, self.model.fusion, name=self.model.name).save(directory)
        else:
            next(iter(experts.values())).save(directory)

    def load(self, directory: Path) -> None:
        saved = load_model(directory)
        for name, expert in self.experts.items():
            expert.load_state_dict(saved.experts[name].state_dict())
        if (Path(directory) / TEXT_TAIL_FILE).is_file():
            load_tail(self.bert, Path(directory) / TEXT_TAIL_FILE)

    def state(self) -> dict[str, torch.Tensor]:
        """The tuned layers in float32 (the saved tail may be float16 or int8) and each loss's own state."""
        top = self.top.state_dict() if self.top is not None else {}
        out = {f"top/{k}": v.detach().cpu() for k, v in top.items()}
        out.update({f"loss/{k}": v.detach().cpu() for k, v in self.losses.state_dict().items()})
        return out

    def load_state(self, tensors: dict[str, torch.Tensor]) -> None:
        if self.top is not None:
            self.top.load_state_dict({k[4:]: v for k, v in tensors.items() if k.startswith("top/")})
        own = {k[5:]: v for k, v in tensors.items() if k.startswith("loss/")}
        if own:
            self.losses.load_state_dict(own)

    def report(self) -> dict:
        return {"experts": list(self.experts), "text_tower": str(self.encoder.folder), "tuned_layers":
                list(range(self.first, self.end)),
                "tuned_parameters": sum(p.numel() for p in self.top.parameters()) if self.top is not None else 0,
                "train_videos": len(self.train_data.video_keys), "train_captions": len(self.train_data.captions),
                "distill_sentences": len(self.extra_states)}


def read_sentences(path: str | Path) -> list[str]:
    """The distinct non-blank lines of the text file ``path`` (``tune_text.distill_sentences``); DataFormatError
    naming it when it cannot be read or holds none."""
    sentences = list(dict.fromkeys(line.strip() for _, line in numbered_lines(read_text(path))))
    if not sentences:
        raise DataFormatError(path, "no sentences (tune_text.distill_sentences: one a line)")
    return sentences


def tune_text(checkpoint: str | Path, data: str, out: str | Path, overrides: dict | list[str] | None = None,
              train_split: str = "train", val_split: str | None = None, progress: bool = True, evaluate: bool = True,
              **options) -> dict:
    """Tune the top layers of the text tower of ``checkpoint`` (a model, or a mixture whose experts share it) with
    its projections on ``data`` into the run folder ``out``: ``out/best/`` (the tuned model), ``out/last/``,
    ``out/log.csv``. ``overrides``: ``tune_text`` keys (``{"tune_text.epochs": 5}`` or ``["tune_text.epochs=5"]``:
    ``reelsearch.config.TuneTextConfig``).

    Returns the report (also ``out/summary.json``): the epochs (seconds, loss, development metrics), the best epoch
    and, with ``evaluate``, the saved model's metrics on ``val_split`` computed as ``reelsearch eval`` does (the whole
    tuned tower on the captions). Rerun, it resumes where it stopped."""
    cfg = apply_section(TuneTextConfig(), overrides)
    out = Path(out)
    model, source, val_split = open_tuning(checkpoint, data, val_split, **options)
    task = TextTask(model, source, cfg, train_split, val_split, progress)
    report = {"model": str(checkpoint), "data": source.label, "train_split": train_split, "val_split": val_split,
              **Trainer(task, out, progress).fit()}
    if model.querybank is not None:
        report["querybank_dropped"] = True
        logger.warning(f"{checkpoint}'s querybank was made with the untuned tower and is not in the tuned model: make "
                       f"its own with `reelsearch querybank {out} --data {data} --out NEW_RUN`")
    if evaluate:
        report["result"] = evaluate_checkpoint(out, data, split=val_split, progress=progress, **options)
    atomic_write_json(out / "summary.json", report)
    return report


def report_text(report: dict, out: str | Path) -> str:
    """:func:`tune_text`'s report in a few lines: the dev RSum before and after, the saved model's metrics."""
    return "\n".join([f"dev RSum {report['start']['RSum']:.2f} -> {report['best']['RSum']:.2f} (epoch "
                      f"{report['best_epoch']} of {report['epochs_run']})", *saved_lines(report, out)])

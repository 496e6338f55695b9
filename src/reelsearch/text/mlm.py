"""SCDE stage 1 (Zhao, Zheng & Zha 2020, §3.2): adapt MiniLM to the training captions with BERT's masked-LM objective.

all-MiniLM-L6-v2 ships no MLM head, so BERT's standard one is built fresh (dense hidden->hidden + GELU +
LayerNorm, decoder tied to the pretrained word-embedding matrix, new bias); 15% of the word pieces (never [CLS],
[SEP], [UNK] or padding) are chosen, 80% of those become [MASK], 10% a random word piece, 10% stay; the whole
encoder + head train with AdamW.
The adapted encoder is saved as a sentence-transformers folder (``MiniLMEncoder(model_dir=...)`` loads it, the MLM
head is dropped) with ``adaptation.json``: parameters, per-epoch train loss, held-out masked-token loss/accuracy
before and after, seconds. The held-out captions (a seeded ``heldout`` fraction) get one fixed masking, so "before"
and "after" score exactly the same predictions. Note that "before" uses the untrained head (near chance).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from reelsearch.errors import DataFormatError, ReelsearchError

REPORT_FILE = "adaptation.json"
FORMAT = "reelsearch.minilm-adaptation"
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


def minilm_features_name(model_dir: str | Path | None = None, layer: int | None = None, int8: bool = False) -> str:
    """Feature-store modality of MiniLM token features: "text-minilm" for the package model, else
    "text-minilm-<first 10 hex of the adapted model.safetensors' sha1>" (features of different encoders never mix);
    the hidden states after an inner ``layer`` add "-l<layer>", features of the int8 encoder "-int8"."""
    suffix = (f"-l{layer}" if layer is not None else "") + ("-int8" if int8 else "")
    if model_dir is None:
        return FEATURES_PREFIX + suffix
    from reelsearch.text.minilm import package_model_dir

    digest = model_sha1(model_dir)
    try:
        package = model_sha1(package_model_dir())
    except ReelsearchError:
        package = None
    return (FEATURES_PREFIX if digest == package else f"{FEATURES_PREFIX}-{digest[:10]}") + suffix


def _files(folder: Path) -> dict[str, Path]:
    return {str(p.relative_to(folder)): p for p in folder.rglob("*") if p.is_file()}


def same_encoder(a: str | Path, b: str | Path) -> bool:
    """Whether two encoder folders hold the same files with the same bytes."""
    import filecmp

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
    from reelsearch.io import replace_dir

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
    import torch

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
    from torch import nn
    from transformers.activations import ACT2FN

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


# ---------------------------------------------------------------- adaptation


def _params_of(report: dict) -> dict:
    return report.get("params", {})


def _existing_report(out_dir: Path) -> dict | None:
    """The finished adaptation's report in ``out_dir``, None when out_dir is absent or empty; error otherwise."""
    if not out_dir.exists():
        return None
    if not out_dir.is_dir():
        raise ReelsearchError(f"{out_dir}: exists and is not a folder")
    path = out_dir / REPORT_FILE
    if not path.is_file():
        if any(out_dir.iterdir()):
            raise ReelsearchError(f"{out_dir}: not empty and holds no {REPORT_FILE}; choose another output folder")
        return None
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataFormatError(path, f"unreadable adaptation report: {exc}") from exc
    if not isinstance(report, dict) or report.get("format") != FORMAT:
        raise DataFormatError(path, f"not a {FORMAT} report")
    return report


def _usual_permissions(folder: Path) -> None:
    """Files 0644 / folders 0755 (under the umask): temp dirs and some writers create owner-only ones."""
    umask = os.umask(0)
    os.umask(umask)
    for p in [folder, *folder.rglob("*")]:
        p.chmod((0o777 if p.is_dir() else 0o666) & ~umask)


def _pad(rows: list[list[int]], pad_id: int):
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        attention[i, : len(r)] = 1
    return ids, attention


def _masked_batch(rows, tok, special_ids, replacement_ids, mask_prob, generator):
    import torch

    ids, attention = _pad(rows, tok.pad_token_id)
    excluded = torch.isin(ids, special_ids) | (attention == 0)
    inputs, labels = mask_tokens(ids, excluded, tok.mask_token_id, replacement_ids, mask_prob, generator)
    return inputs, attention, labels


def _mlm_loss(bert, head, inputs, attention, labels, device):
    """(sum of cross-entropy over the predicted positions, number correct, number predicted)."""
    import torch.nn.functional as F

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


def _evaluate(bert, head, batches, device) -> dict:
    import torch

    was_training = bert.training
    bert.eval()
    head.eval()
    total, correct, count = 0.0, 0, 0
    with torch.inference_mode():
        for inputs, attention, labels in batches:
            loss, right, n = _mlm_loss(bert, head, inputs, attention, labels, device)
            if n:
                total, correct, count = total + float(loss), correct + right, count + n
    bert.train(was_training)
    head.train(was_training)
    return {"loss": total / count if count else None, "accuracy": correct / count if count else None,
            "masked_tokens": count}


def distinct_captions(captions: Sequence[str]) -> list[str]:
    """Non-empty captions, stripped, each once, in first-seen order (what ``adapt_minilm`` trains on)."""
    return list(dict.fromkeys(c.strip() for c in captions if isinstance(c, str) and c.strip()))


def heldout_split(texts: Sequence[str], heldout: float, seed: int) -> tuple[list[str], list[str]]:
    """(train, held-out): a seeded ``heldout`` fraction (at least one caption when > 0, never all) is held out."""
    import numpy as np

    order = np.random.default_rng(seed).permutation(len(texts))
    n_held = min(len(texts) - 1, max(1, round(heldout * len(texts)))) if heldout > 0 else 0
    return [texts[i] for i in order[n_held:]], [texts[i] for i in order[:n_held]]


def adapt_minilm(captions: Sequence[str], out_dir: str | Path, *, epochs: int = 1, mask_prob: float = 0.15,
                 lr: float = 5e-5, batch_size: int = 32, seed: int = 0, heldout: float = 0.05,
                 base_dir: str | Path | None = None, device: str | None = None, progress: bool = True) -> dict:
    """Fine-tune MiniLM (``base_dir``, default the package model) with masked-LM on ``captions``; save the encoder to
    ``out_dir`` (a sentence-transformers folder + adaptation.json, written atomically) and return the report.

    Duplicate captions count once; a seeded ``heldout`` fraction is kept out of training to score the masked-token
    loss and accuracy before and after. A finished ``out_dir`` with the same parameters is returned as is
    (``"reused": True``); other parameters raise an error (remove the folder to redo). Uses torch's current thread
    setting and leaves the caller's random state untouched.
    """
    import torch
    from tqdm import tqdm

    from reelsearch.io import recover_dir, replace_dir
    from reelsearch.text.minilm import MiniLMEncoder, package_model_dir

    started = time.time()
    if epochs < 1 or batch_size < 1 or not 0 < mask_prob < 1 or not 0 <= heldout < 1 or not lr > 0:
        raise ReelsearchError(f"bad parameters: epochs={epochs} (>= 1), batch_size={batch_size} (>= 1), "
                              f"mask_prob={mask_prob} (0..1), heldout={heldout} ([0, 1)), lr={lr} (> 0)")
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
              "captions_sha1": hashlib.sha1("\n".join(texts).encode("utf-8")).hexdigest(), "epochs": int(epochs),
              "mask_prob": float(mask_prob), "lr": float(lr), "batch_size": int(batch_size), "seed": int(seed),
              "heldout": float(heldout)}
    recover_dir(out_dir)
    existing = _existing_report(out_dir)
    if existing is not None:
        if _params_of(existing) == params:
            return {**existing, "reused": True}
        diff = {k: (_params_of(existing).get(k), v) for k, v in params.items() if _params_of(existing).get(k) != v}
        raise ReelsearchError(f"{out_dir} holds an adaptation with other parameters ({diff} as (old, new)); "
                              "remove the folder or choose another output folder")

    train, held = heldout_split(texts, heldout, seed)

    encoder = MiniLMEncoder(device=device, model_dir=base)
    model, dev = encoder.model, encoder.device
    tok, bert = encoder.tokenizer, model[0].auto_model
    encode = functools.partial(tok, truncation=True, max_length=encoder.max_length, add_special_tokens=True)
    train_rows, held_rows = encode(train)["input_ids"], encode(held)["input_ids"] if held else []
    special_ids = torch.tensor(sorted(set(tok.all_special_ids)), dtype=torch.long)
    replacement_ids = torch.tensor([i for i in range(len(tok)) if i not in set(tok.all_special_ids)
                                    and i < bert.config.vocab_size], dtype=torch.long)

    devices = [dev.index or 0] if dev.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):  # dropout and head init draw from a seeded, private state
        torch.manual_seed(seed)
        head = build_mlm_head(bert.config, bert.get_input_embeddings()).to(dev)
        net = torch.nn.ModuleDict({"encoder": bert, "head": head})  # parameters() counts the tied matrix once
        held_gen = torch.Generator().manual_seed(seed + 1)
        held_batches = [_masked_batch(held_rows[i:i + batch_size], tok, special_ids, replacement_ids, mask_prob,
                                      held_gen) for i in range(0, len(held_rows), batch_size)]
        before = _evaluate(bert, head, held_batches, dev) if held_batches else None
        optimizer = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.01)
        gen = torch.Generator().manual_seed(seed)
        net.train()
        epoch_losses = []
        steps_per_epoch = math.ceil(len(train_rows) / batch_size)
        for epoch in range(epochs):
            perm = torch.randperm(len(train_rows), generator=gen).tolist()
            total, count = 0.0, 0
            bar = tqdm(range(steps_per_epoch), desc=f"MLM epoch {epoch + 1}/{epochs}", unit="batch",
                       disable=not progress, file=sys.stderr)
            for step in bar:
                rows = [train_rows[i] for i in perm[step * batch_size:(step + 1) * batch_size]]
                inputs, attention, labels = _masked_batch(rows, tok, special_ids, replacement_ids, mask_prob, gen)
                loss_sum, _, n = _mlm_loss(bert, head, inputs, attention, labels, dev)
                if not n:
                    continue
                optimizer.zero_grad(set_to_none=True)
                (loss_sum / n).backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                optimizer.step()
                total, count = total + float(loss_sum.detach()), count + n
                if step % 20 == 0:
                    bar.set_postfix(loss=f"{total / count:.3f}")
            bar.close()
            epoch_losses.append(total / count if count else None)
        after = _evaluate(bert, head, held_batches, dev) if held_batches else None
    bert.eval()

    report = {"format": FORMAT, "version": 1, "base_model": "sentence-transformers/all-MiniLM-L6-v2",
              "base_dir": str(base.resolve()), "params": params, "train_captions": len(train),
              "heldout_captions": len(held), "steps": steps_per_epoch * epochs, "train_loss": epoch_losses,
              "heldout_before": before, "heldout_after": after, "device": str(dev),
              "torch_threads": torch.get_num_threads()}
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        model.save(str(tmp / "model"))
        report["seconds"] = round(time.time() - started, 1)
        (tmp / "model" / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        _usual_permissions(tmp / "model")
        replace_dir(tmp / "model", out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report

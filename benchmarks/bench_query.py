"""Query encoding: MiniLM in torch vs ONNX Runtime (float32, int8), one core, in the same run (ratios against
torch float32), for one model or several compared (``--model`` repeated: e.g. the bundled default and a model whose
text tower was tuned, ``reelsearch tune-text``).

What is timed is what a search pays per new query: ``model.encode_text`` of the model (MiniLM token features, with
a tuned tail when the model has one, + the model's own text encoder + projection), for
  * one short query at a time (``--queries`` real MSVD captions of 5-12 words, never seen in training): p50 / p95 /
    p99;
  * batches of 32 of them (the most ``reelsearch serve`` encodes together): milliseconds per batch, queries/s.
Variants: ``torch`` (float32 MiniLM in torch: ``REELSEARCH_TEXT_RUNTIME=torch``), ``onnxruntime`` (float32 MiniLM in
ONNX Runtime: the default where it is installed), ``onnxruntime-int8`` (``--text-encoder int8``) and, for a model
with one, ``static`` (its static text encoder, ``--text-encoder static``: no MiniLM) and ``student`` (its text
tower cut short, ``--text-encoder student``). They run interleaved
(alternating order, query by query and batch by batch), so the machine's changing load falls on all alike; the
ratios are per query (torch time / variant time), then their median. Agreement: the cosine of each variant's
query embeddings with torch float32's, and of a query encoded alone with the same query encoded in a batch of 32
(int8 quantises activations per batch, so this is below 1 for int8).

.venv/bin/python benchmarks/bench_query.py --queries 200 --batches 10 [--model default --model runs/x/best]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def short_captions(n: int, seed: int = 3) -> list[str]:
    """n distinct real MSVD captions of 5-12 words."""
    from bench_search import SHARED

    captions = json.loads((SHARED / "msvd" / "captions_msvd.json").read_text())
    flat = sorted({c.strip() for caps in captions.values() for c in caps if 5 <= len(c.split()) <= 12})
    pick = np.random.default_rng(seed).permutation(len(flat))[:n]
    return [flat[i] for i in pick]


def variants(name: str) -> dict:
    """{"torch": model, "onnxruntime": model, "onnxruntime-int8": model[, "static": model][, "student": model]}: the
    model ``name`` three times, each with a MiniLM encoder (and tuned tail) of its own, and once with each of its
    fast text encoders."""
    import reelsearch
    from reelsearch.text.minilm import MiniLMEncoder

    out = {}
    for variant, runtime, int8 in (("torch", "torch", False), ("onnxruntime", "onnxruntime", False),
                                   ("onnxruntime-int8", "onnxruntime", True)):
        model = reelsearch.load(name)
        processors = [e.text_processor for e in model.experts.values()]  # a mixture's experts share one MiniLM
        encoder = MiniLMEncoder(model_dir=processors[0].model_dir, runtime=runtime, int8=int8,
                                tail=processors[0].tail)
        for processor in processors:
            processor._encoder, processor.int8 = encoder, encoder.int8
        model.encode_text(["warm up"])  # loads (exports, quantises) MiniLM
        if (encoder.runtime, encoder.int8) != (runtime, int8):
            print(f"{variant}: unavailable here, skipped", file=sys.stderr)
            continue
        out[variant] = model
    for fast in ("static", "student"):  # the model's fast text encoders, when it has them
        model = reelsearch.load(name)
        if getattr(model, f"{fast}_text") is not None:
            model.use_text_encoder(fast)
            out[fast] = model
    return out


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine (a mixture's rows are its experts' unit rows side by side, so not unit norm themselves)."""
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def fresh(model):
    """``model`` with its MiniLM's memory of recent captions emptied: what follows is encoded, not remembered."""
    next(iter(model.experts.values())).text_processor.encoder.forget()  # (shared by a mixture's experts)
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", help="a model (repeatable; default: the bundled one)")
    ap.add_argument("--queries", type=int, default=200, help="single queries timed per variant")
    ap.add_argument("--batches", type=int, default=10, help="batches of 32 timed per variant")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    texts = short_captions(args.queries + 32 * args.batches)
    singles, batches = texts[:args.queries], texts[args.queries:]
    labels = args.model or ["default"]
    models = {f"{label} {variant}" if len(labels) > 1 else variant: model
              for label in labels for variant, model in variants(label).items()}
    names = list(models)
    for v in models.values():
        for text in singles[:5]:
            v.encode_text([text])
    single = {n: [] for n in names}
    for i, text in enumerate(singles):
        for n in (names if i % 2 else names[::-1]):
            single[n].append(timed(lambda v=fresh(models[n]), t=text: v.encode_text([t])) * 1000)
    batch = {n: [] for n in names}
    for i in range(args.batches):
        chunk = batches[32 * i:32 * (i + 1)]
        for n in (names if i % 2 else names[::-1]):
            batch[n].append(timed(lambda v=models[n], c=chunk: v.encode_text(c)) * 1000)
    probe = singles[:96]
    rows = []
    for n in names:
        torch_name = n.rsplit(" ", 1)[0] + " torch" if len(labels) > 1 else "torch"  # the same model's baseline
        reference = np.concatenate([fresh(models[torch_name]).encode_text([t]) for t in probe])
        s, b = np.array(single[n]), np.array(batch[n])
        alone = np.concatenate([fresh(models[n]).encode_text([t]) for t in probe])
        cos = cosine(alone, reference)
        together = np.concatenate([fresh(models[n]).encode_text(probe[i:i + 32]) for i in range(0, len(probe), 32)])
        stable = cosine(alone, together)  # a query alone vs in a batch of 32
        rows.append({"variant": n, "p50_ms": float(np.percentile(s, 50)), "p95_ms": float(np.percentile(s, 95)),
                     "p99_ms": float(np.percentile(s, 99)),
                     "speedup_single": float(np.median(np.array(single[torch_name]) / s)),
                     "batch32_ms": float(np.median(b)), "batch32_qps": float(32_000 / np.median(b)),
                     "speedup_batch32": float(np.median(np.array(batch[torch_name]) / b)),
                     "cos_mean": float(cos.mean()), "cos_min": float(cos.min()),
                     "alone_vs_batch_cos_min": float(stable.min())})
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n{args.threads} torch thread(s), load average {os.getloadavg()[0]:.2f}")
    print("| text encoder | one query p50 / p95 / p99 ms | speed-up | batch of 32: ms (queries/s) | speed-up | "
          "cosine to torch float32: mean / min | alone vs in a batch: min cosine |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['variant']} | {r['p50_ms']:.2f} / {r['p95_ms']:.2f} / {r['p99_ms']:.2f} | "
              f"{r['speedup_single']:.2f}x | "
              f"{r['batch32_ms']:.0f} ({r['batch32_qps']:.0f}) | {r['speedup_batch32']:.2f}x | "
              f"{r['cos_mean']:.4f} / {r['cos_min']:.4f} | {r['alone_vs_batch_cos_min']:.4f} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

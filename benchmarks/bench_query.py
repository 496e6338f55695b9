"""Query encoding: float32 vs int8 MiniLM, one core, in the same run (ratios against float32).

What is timed is what a search pays per new query: ``model.encode_text`` of the bundled default model (MiniLM
token features + the model's own text Transformer + projection), for
  * one short query at a time (``--queries`` real MSVD captions of 5-12 words, never seen in training): p50 / p95;
  * batches of 32 of them (the most ``reelsearch serve`` encodes together): milliseconds per batch, queries/s.
The variants run interleaved (alternating order, query by query and batch by batch), so the machine's changing
load falls on all alike; the ratios are per query (float32 time / variant time), then their median. Agreement: the
cosine of each variant's query embeddings with float32's, and of a query encoded alone with the same query encoded
in a batch of 32 (int8 quantises activations per batch, so this is below 1 for int8).

``--onnx`` adds ONNX Runtime rows (float32 and int8, per-channel dynamic quantisation) when ``onnx`` and
``onnxruntime`` are installed (the MiniLM BERT is exported to a temporary folder first); reelsearch itself does not
use them (docs/search.md says why).

.venv/bin/python benchmarks/bench_query.py --queries 200 --batches 10
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
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


class OnnxText:
    """The default model's text side with MiniLM run by ONNX Runtime (one thread), as ``encode_text`` is timed."""

    def __init__(self, model, path: Path):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        st = model.text_processor.encoder.model
        self.model, self.preprocess = model, getattr(st, "preprocess", None) or st.tokenize

    def encode_text(self, texts: list[str]) -> np.ndarray:
        f = self.preprocess(texts)
        states = self.session.run(None, {k: f[k].numpy() for k in ("input_ids", "attention_mask", "token_type_ids")})[0]
        rows = [torch.from_numpy(states[i, :n]) for i, n in enumerate(f["attention_mask"].sum(1).tolist())]
        with torch.inference_mode():
            return self.model.text_forward(self.model.text_processor.from_features(rows)).numpy()


def onnx_variants(model, work: Path) -> dict:
    """{"onnx-f32": ..., "onnx-int8": ...} (empty when onnx or onnxruntime is missing)."""
    try:
        import onnx  # noqa: F401  (the exporter and the quantiser need it)
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        print(f"no ONNX rows: {exc}", file=sys.stderr)
        return {}

    class Bert(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    encoder = model.text_processor.encoder
    names = ["input_ids", "attention_mask", "token_type_ids"]
    f = encoder.model.preprocess(["a dog catches a frisbee"])
    f32, i8 = work / "minilm.onnx", work / "minilm-int8.onnx"
    with torch.no_grad():
        torch.onnx.export(Bert(encoder.bert).eval(), tuple(f[k] for k in names), str(f32), input_names=names,
                          output_names=["states"], dynamic_axes={k: {0: "batch", 1: "tokens"} for k in names},
                          opset_version=17, dynamo=False)
    encoder.bert.eval()  # the exporter restores the wrapper's mode (train) on exit
    quantize_dynamic(str(f32), str(i8), weight_type=QuantType.QInt8, per_channel=True)
    return {"onnx-f32": OnnxText(model, f32), "onnx-int8": OnnxText(model, i8)}


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="default")
    ap.add_argument("--queries", type=int, default=200, help="single queries timed per variant")
    ap.add_argument("--batches", type=int, default=10, help="batches of 32 timed per variant")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--onnx", action="store_true", help="add ONNX Runtime rows (needs onnx + onnxruntime)")
    ap.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import reelsearch

    texts = short_captions(args.queries + 32 * args.batches)
    singles, batches = texts[:args.queries], texts[args.queries:]
    variants = {}
    for name, int8 in (("float32", False), ("int8", True)):
        variants[name] = reelsearch.load(args.model, int8_text=int8)
        variants[name].encode_text(["warm up"])  # loads (and quantises) MiniLM
    work = tempfile.TemporaryDirectory()
    if args.onnx:
        variants.update(onnx_variants(variants["float32"], Path(work.name)))
    names = list(variants)
    for v in variants.values():
        for text in singles[:5]:
            v.encode_text([text])
    single = {n: [] for n in names}
    for i, text in enumerate(singles):
        for n in (names if i % 2 else names[::-1]):
            single[n].append(timed(lambda v=variants[n], t=text: v.encode_text([t])) * 1000)
    batch = {n: [] for n in names}
    for i in range(args.batches):
        chunk = batches[32 * i:32 * (i + 1)]
        for n in (names if i % 2 else names[::-1]):
            batch[n].append(timed(lambda v=variants[n], c=chunk: v.encode_text(c)) * 1000)
    probe = singles[:96]
    reference = np.concatenate([variants["float32"].encode_text([t]) for t in probe])
    rows = []
    for n in names:
        s, b = np.array(single[n]), np.array(batch[n])
        alone = np.concatenate([variants[n].encode_text([t]) for t in probe])
        cos = (alone * reference).sum(1)
        together = np.concatenate([variants[n].encode_text(probe[i:i + 32]) for i in range(0, len(probe), 32)])
        stable = (alone * together).sum(1)  # a query alone vs in a batch of 32
        rows.append({"variant": n, "p50_ms": float(np.percentile(s, 50)), "p95_ms": float(np.percentile(s, 95)),
                     "speedup_single": float(np.median(np.array(single["float32"]) / s)),
                     "batch32_ms": float(np.median(b)), "batch32_qps": float(32_000 / np.median(b)),
                     "speedup_batch32": float(np.median(np.array(batch["float32"]) / b)),
                     "cos_mean": float(cos.mean()), "cos_min": float(cos.min()),
                     "alone_vs_batch_cos_min": float(stable.min())})
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n{args.threads} torch thread(s), load average {os.getloadavg()[0]:.2f}")
    print("| text encoder | one query p50 / p95 ms | speed-up | batch of 32: ms (queries/s) | speed-up | "
          "cosine to float32: mean / min | alone vs in a batch: min cosine |\n|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['variant']} | {r['p50_ms']:.2f} / {r['p95_ms']:.2f} | {r['speedup_single']:.2f}x | "
              f"{r['batch32_ms']:.0f} ({r['batch32_qps']:.0f}) | {r['speedup_batch32']:.2f}x | "
              f"{r['cos_mean']:.4f} / {r['cos_min']:.4f} | {r['alone_vs_batch_cos_min']:.4f} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2))
    work.cleanup()


if __name__ == "__main__":
    main()

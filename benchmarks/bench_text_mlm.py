"""How much of SCDE stage 1's held-out masked-token accuracy comes from adapting the encoder itself?

    .venv/bin/python benchmarks/bench_text_mlm.py ADAPTED_DIR [--data flickr8k:../shared/data/flickr8k] [--split train]
        [--head-lr 1e-3] [--max-steps N] [--threads 1] [--json OUT]

``reelsearch adapt-text`` scores its held-out captions before (base MiniLM + an untrained MLM head: near chance) and
after (adapted encoder + trained head). This adds the missing middle: the *frozen* base MiniLM with only the MLM head
trained (dense + LayerNorm + output bias; the tied word-embedding decoder frozen too) on the same training captions,
same masking scheme and batch size, on exactly the same held-out masked positions (re-derived from the parameters in
ADAPTED_DIR/summary.json, ADAPTED_DIR being the adapt-text run folder). The gap between that and "after" is what the
encoder adaptation buys.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("adapted", type=Path)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"))
    ap.add_argument("--format", default="flickr8k")
    ap.add_argument("--split", default="train")
    ap.add_argument("--head-lr", type=float, default=1e-3)
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    import torch
    from tqdm import tqdm

    from reelsearch.datasets import load_dataset
    from reelsearch.text.minilm import MiniLMEncoder
    from reelsearch.text.mlm import (
        build_mlm_head,
        distinct_captions,
        evaluate_mlm,
        heldout_split,
        masked_batch,
        mlm_loss,
    )

    torch.set_num_threads(args.threads)
    report = json.loads((args.adapted / "summary.json").read_text())
    p = report["params"]
    texts = distinct_captions([c for it in load_dataset(args.format, args.data).items(args.split) for c in it.captions])
    if len(texts) != p["captions"]:
        sys.exit(f"{args.format}:{args.data} {args.split} has {len(texts)} distinct captions, the adaptation "
                 f"used {p['captions']}: not the same data")
    train, held = heldout_split(texts, p["heldout"], p["seed"])
    enc = MiniLMEncoder(device="cpu", model_dir=report["base_dir"])
    tok, bert = enc.tokenizer, enc.model[0].auto_model
    encode = dict(truncation=True, max_length=enc.max_length)
    train_rows, held_rows = tok(train, **encode)["input_ids"], tok(held, **encode)["input_ids"]
    special = torch.tensor(sorted(set(tok.all_special_ids)))
    replacement = torch.tensor([i for i in range(len(tok)) if i not in set(tok.all_special_ids)])
    bs, seed = p["batch_size"], p["seed"]
    torch.manual_seed(seed)
    head = build_mlm_head(bert.config, bert.get_input_embeddings())
    held_gen = torch.Generator().manual_seed(seed + 1)
    held_batches = [masked_batch(held_rows[i:i + bs], tok, special, replacement, p["mask_prob"], held_gen)
                    for i in range(0, len(held_rows), bs)]
    before = evaluate_mlm(bert, head, held_batches, "cpu")
    for q in bert.parameters():
        q.requires_grad_(False)
    trainable = [q for q in head.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=args.head_lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed)
    bert.eval()
    head.train()
    steps = math.ceil(len(train_rows) / bs) * p["epochs"]
    if args.max_steps:
        steps = min(steps, args.max_steps)
    started = time.time()
    perm = []
    for _ in tqdm(range(steps), desc="head only", unit="batch", file=sys.stderr):
        if not perm:
            perm = torch.randperm(len(train_rows), generator=gen).tolist()
        rows, perm = [train_rows[i] for i in perm[:bs]], perm[bs:]
        inputs, attention, labels = masked_batch(rows, tok, special, replacement, p["mask_prob"], gen)
        loss, _, n = mlm_loss(bert, head, inputs, attention, labels, "cpu")
        if n:
            opt.zero_grad(set_to_none=True)
            (loss / n).backward()
            opt.step()
    head_only = evaluate_mlm(bert, head, held_batches, "cpu")
    out = {"adapted": str(args.adapted), "heldout_captions": len(held), "masked_tokens": before["masked_tokens"],
           "base_untrained_head": before, "base_frozen_head_trained": head_only,
           "adapted_encoder_and_head": report["heldout_after"], "head_steps": steps, "head_lr": args.head_lr,
           "head_seconds": round(time.time() - started, 1), "adaptation_seconds": report["seconds"]}
    print(json.dumps(out, indent=2))
    if args.json:
        from reelsearch.io import atomic_write_json

        atomic_write_json(args.json, out)


if __name__ == "__main__":
    main()

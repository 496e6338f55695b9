"""Quality on real data: train named models on Flickr8k train (images as one-frame videos), select on dev, and
print the dev table (R@1/5/10, MedR, MeanR, RSum, both directions; seconds per epoch).

    .venv/bin/python benchmarks/bench_quality.py --models torabi-m1 torabi-m2 --out runs/quality \
        [--set train.epochs=10] [--threads 1]

Each model is trained with `reelsearch train NAME --data flickr8k:ROOT --out OUT/NAME [--set ...]` (so the numbers
are what the CLI gives), resuming if OUT/NAME exists; features come from the feature caches (extracted on first
use with each model's recipe). ``mithun-moe-images`` is the mixture of experts on images: two Mithun experts over
the appearance features of EfficientNet-Lite0 and of Lite2, fused by score with equal weights — images have no
motion, audio or place cue, so the paper's object/activity/place experts cannot all exist here.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def moe_images_config(out: Path) -> Path:
    """Mithun's mixture of experts on images: Lite0 and Lite2 appearance experts, score fusion 1 : 1."""
    from reelsearch.config import apply_overrides, config_to_dict
    from reelsearch.config.recipe import frame_recipe
    from reelsearch.config.typed import to_dict
    from reelsearch.models import model_config

    lite0 = apply_overrides(model_config("mithun-expert"), {"name": "mithun-lite0"})
    lite2 = apply_overrides(model_config("mithun-expert"), {
        "name": "mithun-lite2", "features.video": {"appearance": to_dict(frame_recipe("efficientnet-lite2"))}})
    cfg = {"name": "mithun-moe-images", "paper": lite0.paper,
           "experts": {"lite0": config_to_dict(lite0), "lite2": config_to_dict(lite2)},
           "fusion": {"kind": "score", "weights": {"lite0": 1.0, "lite2": 1.0}}}
    path = out / "mithun-moe-images.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def best_row(run: Path) -> dict:
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    if "experts" in summary or (run / "experts").exists():
        res = json.loads((run / "eval.json").read_text())
        secs = []
        for e in sorted((run / "experts").iterdir()):
            secs += [float(r["epoch_seconds"]) for r in _csv(e / "log.csv")]
        return {"result": res, "epoch_seconds": sum(secs) / max(1, len(secs)), "best_epoch": "per expert"}
    rows = _csv(run / "log.csv")
    return {"result": summary["best"], "best_epoch": summary["best_epoch"],
            "epoch_seconds": sum(float(r["epoch_seconds"]) for r in rows) / max(1, len(rows))}


def _csv(path: Path) -> list[dict]:
    import csv

    with open(path) as fh:
        return list(csv.DictReader(fh))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "flickr8k")
    ap.add_argument("--models", nargs="+", default=["torabi-m1", "torabi-m2", "torabi-m3", "mithun-expert",
                                                     "mithun-moe-images", "scde-ablation-baseline",
                                                     "scde-ablation-bert", "scde-ablation-transformer",
                                                     "scde-ablation-msdc", "scde"])
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    help="config override for every model, e.g. train.epochs=10 (as `reelsearch train --set`)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads of each training run")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "quality")
    ap.add_argument("--json", type=Path, help="write the table as JSON here")
    args = ap.parse_args()

    table = {}
    for name in args.models:
        run = args.out / name
        config = name
        if name == "mithun-moe-images":
            config = str(moe_images_config(args.out))
        cmd = [sys.executable, "-m", "reelsearch", "train", config, "--data", f"flickr8k:{args.data}",
               "--out", str(run)]
        for item in args.overrides:
            cmd += ["--set", item]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        print("$", " ".join(cmd), flush=True)
        t0 = time.time()
        subprocess.run(cmd, check=True, cwd=ROOT)
        if name == "mithun-moe-images":
            subprocess.run([sys.executable, "-m", "reelsearch", "eval", str(run), "--data", f"flickr8k:{args.data}",
                            "--split", "dev", "--out", str(run / "eval.json"),
                            "--json"], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        row = best_row(run)
        row["wall_seconds"] = round(time.time() - t0, 1)
        table[name] = row
        print(json.dumps({name: row}), flush=True)

    print("\n| model | i2t R@1 | R@5 | R@10 | MedR | MeanR | t2i R@1 | R@5 | R@10 | MedR | MeanR | RSum | s/epoch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, row in table.items():
        r = row["result"]
        v, t = r["v2t"], r["t2v"]
        print(f"| {name} | {v['R@1']:.1f} | {v['R@5']:.1f} | {v['R@10']:.1f} | {v['MedR']:g} | {v['MeanR']:.1f} | "
              f"{t['R@1']:.1f} | {t['R@5']:.1f} | {t['R@10']:.1f} | {t['MedR']:g} | {t['MeanR']:.1f} | "
              f"{r['RSum']:.1f} | {row['epoch_seconds']:.1f} |")
    if args.json:
        args.json.write_text(json.dumps(table, indent=2))


if __name__ == "__main__":
    main()

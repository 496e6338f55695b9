"""Quality on real data: train named models on Flickr8k train (images as one-frame videos), select on dev, and
print the dev table (R@1/5/10, MedR, MeanR, RSum, both directions; seconds per epoch).

    .venv/bin/python benchmarks/bench_quality.py --data ../shared/data/flickr8k --features STORE \
        --models torabi-m1 torabi-m2 --epochs 10 --out runs/quality [--precision bf16] [--threads 1]

Each model is trained with `reelsearch train NAME --data flickr8k:ROOT --features STORE --out OUT/NAME` (so the
numbers are what the CLI gives), resuming if OUT/NAME exists. ``mithun-moe-images`` is the mixture of experts on
images: two experts over the appearance features of EfficientNet-Lite0 and of Lite2 (modality
``appearance-lite2``, added to the store with ``--lite2-from STORE2``), fused by score with equal weights — images
have no motion, audio or place cue, so the paper's object/activity/place experts cannot all exist here.
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
    from reelsearch.models import model_config
    from reelsearch.models.registry import config_yaml  # noqa: F401  (registry import side effects)

    expert = model_config("mithun-expert")
    lite0 = json.loads(json.dumps(expert))
    lite0["name"] = "mithun-lite0"
    lite2 = json.loads(json.dumps(expert))
    lite2["name"] = "mithun-lite2"
    lite2["model"]["video"]["modalities"] = ["appearance-lite2"]
    lite2["model"]["video"]["input_dims"] = {"appearance-lite2": 1280}
    lite2["features"]["video"] = ["appearance-lite2"]
    cfg = {"name": "mithun-moe-images", "paper": model_config("mithun-moe")["paper"],
           "experts": {"lite0": lite0, "lite2": lite2},
           "fusion": {"kind": "score", "weights": {"lite0": 1.0, "lite2": 1.0}},
           "features": {"video": ["appearance", "appearance-lite2"], "text": "vocab", "sampling": "images"}}
    path = out / "mithun-moe-images.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def copy_modality(src: Path, dest: Path, modality: str, as_name: str) -> None:
    """Copy ``modality`` of store ``src`` into store ``dest`` as ``as_name`` (resumable)."""
    from reelsearch.features.store import FeatureStore

    s, d = FeatureStore(src), FeatureStore(dest)
    with d.writer(as_name, s.dim(modality)) as w:
        for key in s.keys(modality):
            if not w.done(key):
                w.add(key, s.get(modality, key), s.get_meta(modality, key))


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
    ap.add_argument("--features", type=Path, required=True, help="FeatureStore with Lite0 'appearance' features")
    ap.add_argument("--lite2-from", type=Path, help="FeatureStore whose 'appearance' is EfficientNet-Lite2")
    ap.add_argument("--models", nargs="+", default=["torabi-m1", "torabi-m2", "torabi-m3", "mithun-expert",
                                                     "mithun-moe-images", "scde-ablation-baseline",
                                                     "scde-ablation-bert", "scde-ablation-transformer",
                                                     "scde-ablation-msdc", "scde"])
    ap.add_argument("--epochs", type=int, default=None, help="cap on epochs (default: each config's)")
    ap.add_argument("--warmup-epochs", type=int, default=None,
                    help="sum-of-hinges epochs before the configured loss (default: each config's, 1 for mithun-*; "
                         "0 = the papers' schedule; see docs/training.md)")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default=None,
                    help="training forward precision (default: each config's, fp32; docs/training.md)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads of each training run")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "quality")
    ap.add_argument("--json", type=Path, help="write the table as JSON here")
    args = ap.parse_args()

    table = {}
    for name in args.models:
        run = args.out / name
        config = name
        if name == "mithun-moe-images":
            if args.lite2_from is None:
                sys.exit("mithun-moe-images needs --lite2-from STORE (EfficientNet-Lite2 features)")
            copy_modality(args.lite2_from, args.features, "appearance", "appearance-lite2")
            config = str(moe_images_config(args.out))
        cmd = [sys.executable, "-m", "reelsearch", "train", config, "--data", f"flickr8k:{args.data}",
               "--features", str(args.features), "--out", str(run)]
        if args.epochs:
            cmd += ["--epochs", str(args.epochs)]
        if args.warmup_epochs is not None:
            cmd += ["--warmup-epochs", str(args.warmup_epochs)]
        if args.precision:
            cmd += ["--precision", args.precision]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        print("$", " ".join(cmd), flush=True)
        t0 = time.time()
        subprocess.run(cmd, check=True, cwd=ROOT)
        if name == "mithun-moe-images":
            subprocess.run([sys.executable, "-m", "reelsearch", "eval", str(run), "--data", f"flickr8k:{args.data}",
                            "--split", "dev", "--features", str(args.features), "--out", str(run / "eval.json"),
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

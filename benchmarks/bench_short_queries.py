"""Retrieval for the queries people type (issue 33 part 3): text-to-image R@1/5/10 on Flickr8k dev for the short
queries derived from the captions (``reelsearch.evaluation.short_queries``: one word, two or three, four or five)
beside the full captions, the bundled model; with and without the querybank's offsets (``search``: what a search does,
``reelsearch.scoring.calibration.banked``), and with the prompt "a photo of ...".

    PYTHONPATH=src .venv/bin/python benchmarks/bench_short_queries.py [--data flickr8k:../shared/data/flickr8k]

A caption's one right photo is its own; a short query is right for every photo a caption of which holds its words,
and R@k is the share of queries with a right photo in their top k (for a caption: its own photo).
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from reelsearch.evaluation.short_queries import relevance, short_queries
from reelsearch.features.caches import DatasetSource
from reelsearch.models import load_model
from reelsearch.scoring.calibration import LENGTHS, SENTENCE, banked, query_length
from reelsearch.training.calibrate import BATCH
from reelsearch.training.run import model_pairs


def recall(scores: np.ndarray, relevant: np.ndarray, ks=(1, 5, 10)) -> dict:
    """{R@k: share of rows with a right column in their top k} (ties: the lower column first)."""
    order = np.argsort(-scores, axis=1, kind="stable")[:, :max(ks)]
    hit = np.take_along_axis(relevant, order, 1)
    return {f"R@{k}": round(100 * float(hit[:, :k].any(1).mean()), 1) for k in ks}


def dev_short_queries(data: str):
    """(the bundled model, its dev pairs of ``data``, the dev photos' embeddings, their querybank offsets, the short
    queries derived from the dev captions, each one's length, [queries x photos] right) as ``reelsearch calibrate``
    makes them."""
    model = load_model("default")
    source, _ = DatasetSource.open(data, None)
    pairs = model_pairs(model, source, source.check_split("dev"), "cpu", False)
    video = model.encode_video(pairs.video_items(), batch_size=BATCH)
    offsets = model.querybank.video_offsets(video.video)
    queries = list(dict.fromkeys(q for c in pairs.captions for q in short_queries(c)))
    lengths = np.array([query_length(q) for q in queries])
    relevant = relevance(queries, pairs.captions, np.asarray(pairs.cap2vid), len(video.video))
    return model, pairs, video, offsets, queries, lengths, relevant


def dev_from_args(doc: str):
    """:func:`dev_short_queries` of the ``--data`` given on the command line (a benchmark described by ``doc``)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--data", default="flickr8k:../shared/data/flickr8k")
    return dev_short_queries(parser.parse_args().data)


def raw_scores(model, video, texts, cached: bool = True) -> np.ndarray:
    """[texts x videos] the model's fused scores (no querybank offsets)."""
    return np.asarray(model.fuse(model.expert_scores(model.encode_text(texts, BATCH, cached=cached), video), axis=1),
                      np.float64)


def main() -> None:
    model, pairs, video, offsets, queries, lengths, relevant = dev_from_args(__doc__)
    cap2vid = np.asarray(pairs.cap2vid)

    def raw(texts):
        return raw_scores(model, video, texts)

    rows = []
    caption_scores = raw(pairs.captions)
    own = cap2vid[:, None] == np.arange(len(video.video))[None]
    for bank in (False, True):
        rows.append({"queries": "captions", "n": len(cap2vid), "querybank": bank, "prompt": "",
                     "search": bank == banked(SENTENCE), **recall(caption_scores - offsets * bank, own)})
    for prompt in ("", "a photo of "):
        scores = raw([prompt + q for q in queries])
        for n in LENGTHS:
            sel = lengths == n
            if not sel.any():  # (seven words or more: the captions above)
                continue
            for bank in (False, True):
                rows.append({"queries": f"short, {n} words", "n": int(sel.sum()), "querybank": bank,
                             "prompt": prompt, "search": bank == banked(n) and not prompt,
                             **recall(scores[sel] - offsets * bank, relevant[sel])})
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()

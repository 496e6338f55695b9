"""Real ground truth: MSVD test split (670 videos, 21-81 captions each) with a real, heavily tied text similarity.

Each caption is scored against each video by how many of its words occur in the video's *other* captions (a
leave-one-out bag-of-words "oracle"): integer scores, so ties abound, and the number of correct captions per video
varies. The vectorised metrics must match the brute-force reference and be far above chance.
"""

from __future__ import annotations

import json
import re

import numpy as np

from conftest import shared_path
from reelsearch.evaluation import retrieval_metrics
from test_evaluation import reference_metrics


def _msvd_test():
    root = shared_path("msvd")
    captions = json.loads((root / "captions_msvd.json").read_text(encoding="utf-8"))
    videos = [line.strip() for line in (root / "test_list.txt").read_text().splitlines() if line.strip()]
    texts, c2v = [], []
    for v, vid in enumerate(videos):
        texts += captions[vid]
        c2v += [v] * len(captions[vid])
    return videos, texts, np.array(c2v)


def _overlap_scores(texts, c2v, n_videos, vocab_size=600):
    tokens = [set(re.findall(r"[a-z]+", t.lower())) for t in texts]
    counts: dict[str, int] = {}
    for ts in tokens:
        for w in ts:
            counts[w] = counts.get(w, 0) + 1
    vocab = {w: i for i, w in enumerate(sorted(counts, key=lambda w: (-counts[w], w))[:vocab_size])}
    bow = np.zeros((len(texts), len(vocab)), dtype=np.float32)
    for c, ts in enumerate(tokens):
        bow[c, [vocab[w] for w in ts if w in vocab]] = 1.0
    per_video = np.zeros((n_videos, len(vocab)), dtype=np.float32)
    np.add.at(per_video, c2v, bow)
    present = (per_video > 0).astype(np.float32)
    sims = bow @ present.T  # words of caption c seen in video v's captions
    # leave one out: words only caption c itself brings to its own video do not count
    own_only = ((per_video[c2v] - bow) == 0) & (bow > 0)
    sims[np.arange(len(texts)), c2v] -= own_only.sum(1)
    return sims


def test_msvd_test_split_metrics():
    videos, texts, c2v = _msvd_test()
    assert len(videos) == 670 and len(texts) == 27_763
    counts = np.bincount(c2v)
    assert counts.min() == 21 and counts.max() == 81
    sims = _overlap_scores(texts, c2v, len(videos))
    r = retrieval_metrics(sims, c2v, chunk_size=4096, device="cpu")
    # chance: t2v R@1 = 1/670 = 0.15 %; the word-overlap oracle is far better, yet ties keep it honest
    assert r["t2v"]["R@1"] > 5.0 and r["v2t"]["R@1"] > 5.0  # v2t chance: about 41 / 27,763 = 0.15 %
    assert r["t2v"]["MeanR"] < 670 / 2
    print("MSVD test, leave-one-out word overlap:", json.dumps(r))
    # a subset small enough for the brute-force reference: the first 60 videos and their captions
    keep = c2v < 60
    sub, sub_c2v = np.ascontiguousarray(sims[keep][:, :60]), c2v[keep]
    sub_r = retrieval_metrics(sub, sub_c2v, chunk_size=333, device="cpu")
    assert sub_r["t2v"] == reference_metrics(sub, [[v] for v in sub_c2v])
    assert sub_r["v2t"] == reference_metrics(sub.T, [np.flatnonzero(sub_c2v == v).tolist() for v in range(60)])

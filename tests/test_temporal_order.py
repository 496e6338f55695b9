"""The temporal check (issue 4 part 6): temporal encoders learn event ORDER, order-blind pooling cannot.

Held-out pairs of synthetic clips hold the same two shots in opposite orders ("a red square appears, then a blue
circle moves left" / "a blue circle moves left, then a red square appears"); each caption must score its own clip
above the twin. The models are the real ``JointModel``s (registry configs with small dims) trained by the real
``Trainer`` with one text encoder, loss and budget; only the video encoder differs. See docs/temporal-check.md.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reelsearch.config import TrainConfig
from reelsearch.datasets.synthetic import clip_features, order_pairs, swap_accuracy, synthetic_clip_recipe
from reelsearch.features.pairs import PairData
from reelsearch.losses import TrainLosses, create_loss
from reelsearch.models import VocabTextProcessor, create_model
from reelsearch.training.joint_task import JointTask
from reelsearch.training.trainer import Trainer

GRID = 4  # 64x64 frames averaged over 16x16 px blocks: 48-d per-frame features (colour and coarse position)
FEATURE_DIM = GRID * GRID * 3
VIDEO_ENCODERS = {
    "mean": {"sequence": None, "pool": "mean"},  # Torabi M1/M2, Mithun
    "m3": {"sequence": None, "pool": "mean"},  # + sentence-conditioned attention (Torabi M3)
    "bigru": {"sequence": "bigru", "hidden_size": 64, "pool": "mean"},  # SCDE Eq. 1-3
    "smsdc": {"sequence": None, "pool": "mean", "smsdc": {"n": 4, "m": 2}},  # SCDE §3.3 (4, 2) on the frames
}
BUDGET = TrainConfig(epochs=10, batch_size=50, lr=2e-3, grad_clip=2.0, checkpoint_every=0, seed=0)


def build(kind: str, processor: VocabTextProcessor):
    """Mithun's expert layout (vocab GRU text, linear + L2 joint space, cosine), small dims; video encoder varies."""
    torch.manual_seed(0)
    return create_model(
        "mithun-expert", text_processor=processor,
        model={"text": {"encoder": {"embed_dim": 32, "hidden_size": 64}, "projection": {"dim": 64}},
               "video": {"encoder": VIDEO_ENCODERS[kind],
                         "attention": {"dim": 32} if kind == "m3" else None, "projection": {"dim": 64}}},
        features={"video": {"appearance": synthetic_clip_recipe(FEATURE_DIM)}})


def pair_data(clips, feats) -> PairData:
    return PairData([c.caption for c in clips], np.arange(len(clips)), [c.id for c in clips],
                    {"appearance": [f.astype(np.float16) for f in feats]})


@torch.inference_mode()
def similarities(model, data: PairData) -> np.ndarray:
    model.eval()
    idx = np.arange(len(data.captions))
    cpu = torch.device("cpu")
    return model.similarity(model.text_forward(data.text_batch(model.text_processor, idx, cpu)),
                            model.video_forward(data.video_batch(idx, cpu))).numpy()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Small models train fastest on one thread (and the machine is shared)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def world():
    train_pairs = order_pairs(300, seed=0, prefix="train")
    train = [c for p in train_pairs for c in p]
    test = [c for p in order_pairs(100, seed=1, prefix="test", exclude=train) for c in p]
    processor = VocabTextProcessor.build([c.caption for c in train])
    return {"processor": processor,
            "train": pair_data(train, clip_features(train, grid=GRID)),
            "test": pair_data(test, clip_features(test, grid=GRID))}


def test_swap_accuracy_by_hand():
    sims = np.array([[0.9, 0.1, 0.0, 0.0],
                     [0.5, 0.5, 0.0, 0.0],  # a tie: half a point
                     [0.0, 0.0, 0.2, 0.3],  # wrong
                     [0.0, 0.0, 0.3, 0.4]])
    acc, ties = swap_accuracy(sims)
    assert acc == pytest.approx((1 + 0.5 + 0 + 1) / 4) and ties == pytest.approx(0.25)


def test_order_blind_encoders_give_twins_identical_scores(world):
    """Untrained weights already show the structure: a clip and its twin hold the same frames, so mean pooling and a
    weighted average of frames (M3) embed them identically, whatever the caption; the bi-GRU and SMSDC do not."""
    data = world["test"]
    sub = PairData(data.captions[:40], np.arange(40), data.video_keys[:40],
                   {"appearance": data.video_feats["appearance"][:40]})
    for kind in VIDEO_ENCODERS:
        acc, ties = swap_accuracy(similarities(build(kind, world["processor"]), sub))
        if kind in ("mean", "m3"):
            assert ties == 1.0 and acc == 0.5, kind
        else:
            assert ties == 0.0, kind


@pytest.fixture(scope="module")
def trained(world, tmp_path_factory):
    """mean, bi-GRU and SMSDC video encoders, each trained by the Trainer with the same budget (M3 is left out: it
    ties on every twin by construction, see the test above; its own check is test_temporal_attention.py)."""
    results = {}
    for kind in ("mean", "bigru", "smsdc"):
        model = build(kind, world["processor"])
        task = JointTask(model, TrainLosses(create_loss("vse")), world["train"], None, BUDGET)
        Trainer(task, tmp_path_factory.mktemp(kind), progress=False).fit()
        sims = similarities(model, world["test"])
        originals = np.arange(0, len(sims), 2)
        r1 = float(np.mean(sims[originals][:, originals].argmax(1) == np.arange(len(originals))))
        results[kind] = (*swap_accuracy(sims), r1)
    return results


def test_mean_pooling_learns_content_but_not_order(trained):
    acc, ties, r1 = trained["mean"]
    assert ties == 1.0 and acc == 0.5  # exactly chance: every twin scores the same
    assert r1 > 0.08  # but it did learn what is in the clips: R@1 among 100 held-out clips (chance 0.01)


@pytest.mark.parametrize("kind, threshold", [("bigru", 0.8), ("smsdc", 0.85)])
def test_temporal_encoders_learn_order(trained, kind, threshold):
    acc, ties, r1 = trained[kind]
    assert acc >= threshold, (kind, acc)
    assert ties < 0.05 and r1 > 0.08

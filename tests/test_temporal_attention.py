"""What Torabi's M3 attention does provide: picking out one event among many (issue 4 part 6).

M3 attends over frames conditioned on the sentence; with per-frame features that carry no time stamp it cannot see
ORDER (test_temporal_order.py shows it ties on every order-swapped twin). What it can do is find "the frames where
X happens": a caption naming one event of a 4-shot clip must beat 1-shot clips showing a same-coloured shape of
another kind. Mean pooling dilutes the named event with the other three shots (its embedding is their average) and
loses to the short, partly matching clip; attention concentrates on the named shot. The real JointModel (M3 = the
mean-pooling model + ``video.attention``) and the real Trainer, same data, loss and budget for both.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reelsearch.config import TrainConfig
from reelsearch.datasets.synthetic import clip_features, random_clip, synthetic_clip_recipe
from reelsearch.features.pairs import PairData
from reelsearch.losses import TrainLosses, create_loss
from reelsearch.models import VocabTextProcessor, create_model
from reelsearch.training.joint_task import JointTask
from reelsearch.training.trainer import Trainer

GRID, FRAMES_PER_EVENT = 8, 4
MOVES = ("moves left", "moves right", "moves up", "moves down")  # the shape is visible in every frame of its shot
BUDGET = TrainConfig(epochs=10, batch_size=50, lr=5e-3, grad_clip=2.0, checkpoint_every=0, seed=0)


def build(attention: bool, processor: VocabTextProcessor):
    torch.manual_seed(0)
    return create_model(
        "mithun-expert", text_processor=processor,
        model={"text": {"encoder": {"embed_dim": 32, "hidden_size": 64}, "projection": {"dim": 64}},
               "video": {"encoder": {"sequence": None, "pool": "mean"},
                         "attention": {"dim": 32} if attention else None, "projection": {"dim": 64}}},
        features={"video": {"appearance": synthetic_clip_recipe(GRID * GRID * 3)}})


def event_data(clips) -> PairData:
    """One caption per shot: the phrase of that event alone ("a red square moves left")."""
    captions = [e.phrase for c in clips for e in c.events]
    cap2vid = np.array([i for i, c in enumerate(clips) for _ in c.events])
    feats = [f.astype(np.float16) for f in clip_features(clips, grid=GRID)]
    return PairData(captions, cap2vid, [c.id for c in clips], {"appearance": feats})


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rng = np.random.default_rng(0)
        clips = [random_clip(rng, f"c{i}", int(rng.choice([1, 4])), FRAMES_PER_EVENT, actions=MOVES)
                 for i in range(600)]
        train, test = clips[:400], clips[400:]
        processor = VocabTextProcessor.build([e.phrase for c in train for e in c.events])
        train_data, test_data = event_data(train), event_data(test)
        out = {}
        for name, attention in (("mean", False), ("m3", True)):
            model = build(attention, processor)
            task = JointTask(model, TrainLosses(create_loss("vse")), train_data, None, BUDGET)
            Trainer(task, tmp_path_factory.mktemp(name), progress=False).fit()
            out[name] = evaluate(model, test, test_data)
        return out
    finally:
        torch.set_num_threads(before)


@torch.inference_mode()
def evaluate(model, test, data: PairData) -> dict:
    """Win rates of each 4-shot clip's event caption against 1-shot clips of the same colour / of neither attribute,
    and (M3) the attention mass the caption puts on its own shot's frames (uniform: 1/4)."""
    model.eval()
    cpu = torch.device("cpu")
    t = model.text_forward(data.text_batch(model.text_processor, np.arange(len(data.captions)), cpu))
    v = model.video_forward(data.video_batch(np.arange(len(test)), cpu))
    sims = model.similarity(t, v).numpy()
    weights = model.attention_weights(t, v).numpy() if model.is_pairwise else None
    singles = [(j, c.events[0]) for j, c in enumerate(test) if len(c.events) == 1]
    same_colour, unrelated, mass = [], [], []
    shot = 0
    for i, own in enumerate(data.cap2vid):
        clip = test[own]
        shot = shot + 1 if i and data.cap2vid[i - 1] == own else 0
        if len(clip.events) != 4:
            continue
        ev = clip.events[shot]
        for j, other in singles:
            if other.colour == ev.colour and other.shape != ev.shape:
                same_colour.append(sims[i, own] > sims[i, j])
            elif other.colour != ev.colour and other.shape != ev.shape:
                unrelated.append(sims[i, own] > sims[i, j])
        if weights is not None:
            mass.append(weights[i, own, shot * FRAMES_PER_EVENT:(shot + 1) * FRAMES_PER_EVENT].sum())
    return {"same_colour": float(np.mean(same_colour)), "unrelated": float(np.mean(unrelated)),
            "mass": float(np.mean(mass)) if mass else None, "pairs": len(same_colour)}


def test_mean_pooling_is_diluted_by_the_other_events(results):
    r = results["mean"]
    assert r["pairs"] > 100
    assert r["unrelated"] > 0.85  # it knows the content...
    assert r["same_colour"] < 0.45  # ...but a short clip with the right colour beats the diluted 4-shot average


def test_m3_attention_finds_the_named_event(results):
    m3, mean = results["m3"], results["mean"]
    assert m3["mass"] > 0.35  # the named shot gets well over the uniform 1/4 of the attention
    assert m3["same_colour"] > mean["same_colour"] + 0.12
    assert m3["unrelated"] >= mean["unrelated"]

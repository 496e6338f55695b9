"""Training state round-trips without pickle; schedules follow the papers; epoch order depends on (seed, epoch)."""

import json
import random

import numpy as np
import pytest
import torch

from reelsearch.training.schedule import LRSchedule
from reelsearch.training.state import load_training_state, save_training_state
from reelsearch.training.task import epoch_batches


def _train_some(model, opt, steps, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(8, 4, generator=g)).pow(2).sum().backward()
        opt.step()


def test_state_roundtrip_continues_identically(tmp_path):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Dropout(0.5), torch.nn.Linear(6, 2))
    opt = torch.optim.Adam(m.parameters(), lr=1e-2, betas=(0.8, 0.9))
    _train_some(m, opt, 3, 1)
    save_training_state(tmp_path / "st", opt, {"epoch": 3, "history": [{"loss": 0.5}]})
    weights = {k: v.clone() for k, v in m.state_dict().items()}
    _train_some(m, opt, 2, 2)  # uninterrupted continuation (dropout draws from the global RNG)
    expect = {k: v.clone() for k, v in m.state_dict().items()}
    after = (torch.rand(3), np.random.rand(), random.random())

    m2 = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Dropout(0.5), torch.nn.Linear(6, 2))
    m2.load_state_dict(weights)
    opt2 = torch.optim.Adam(m2.parameters(), lr=123.0)
    info, _ = load_training_state(tmp_path / "st", opt2)
    assert info == {"epoch": 3, "history": [{"loss": 0.5}]}
    assert opt2.param_groups[0]["lr"] == 1e-2 and tuple(opt2.param_groups[0]["betas"]) == (0.8, 0.9)
    _train_some(m2, opt2, 2, 2)
    for k in expect:
        assert torch.equal(expect[k], m2.state_dict()[k]), k
    again = (torch.rand(3), np.random.rand(), random.random())
    assert torch.equal(after[0], again[0]) and after[1] == again[1] and after[2] == again[2]
    # no pickle anywhere: JSON + safetensors only
    assert sorted(p.name for p in (tmp_path / "st").iterdir()) == ["state.json", "state.safetensors"]
    json.loads((tmp_path / "st" / "state.json").read_text())


def test_schedules_match_papers():
    import math

    opt = torch.optim.Adam([{"params": [torch.nn.Parameter(torch.zeros(1))]},
                            {"params": [torch.nn.Parameter(torch.zeros(1))], "lr_scale": 0.1}], lr=1.0)
    step = LRSchedule(kind="step", step_epochs=15, gamma=0.1)  # Mithun: 2e-3 for 15 epochs then /10
    assert [step.factor_at(e, 100 * e, 3000) for e in (0, 14, 15, 29)] == [1, 1, 0.1, pytest.approx(0.1)]
    step.set_lr(opt, 2e-3, 15, 1500, 3000)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([2e-4, 2e-5])  # each group's lr_scale applies
    plateau = LRSchedule(kind="plateau", factor=0.5, patience=3)  # SCDE: halve after 3 epochs without gain
    for score in [1.0, 2.0, 1.5, 1.9, 1.2]:
        plateau.after_validation(score)
    assert plateau.factor_at(5, 0, 10) == 0.5
    plateau.after_validation(1.0)
    assert plateau.factor_at(6, 0, 10) == 0.5
    again = LRSchedule(kind="plateau", factor=0.5, patience=3)
    again.load_state(plateau.state())  # resumed: the same factor
    assert again.factor_at(6, 0, 10) == 0.5
    cosine = LRSchedule(kind="cosine", warmup_steps=10)
    assert cosine.factor_at(0, 0, 1000) == pytest.approx(0.1)  # warm-up: (step + 1) / 10 of the cosine
    assert cosine.factor_at(0, 9, 1000) == pytest.approx(0.5 * (1 + math.cos(math.pi * 9 / 1000)))
    assert cosine.factor_at(0, 500, 1000) == pytest.approx(0.5) and cosine.factor_at(2, 1000, 1000) == 0


def test_epoch_batches_depend_only_on_seed_and_epoch():
    a = epoch_batches(1000, 128, seed=3, epoch=2)
    b = epoch_batches(1000, 128, seed=3, epoch=2)
    c = epoch_batches(1000, 128, seed=3, epoch=3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], c[0])
    assert len(a) == 1000 // 128 and all(len(x) == 128 for x in a)
    assert len(set(np.concatenate(a).tolist())) == 7 * 128  # no caption twice in an epoch
    assert len(epoch_batches(50, 128, 0, 0)[0]) == 50

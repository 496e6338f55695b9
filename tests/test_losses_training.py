"""Each loss preset trains a tiny linear joint model to R@1 > 90% on a toy, linearly separable problem.

Videos and captions are two different noisy linear views of one hidden 16-D vector per item, so linear maps
into a joint space can match them. Torabi-style presets (order similarity, margin 0.05) embed |W x| normalised
(Torabi et al. 2016 App. B.2 and Sec. 4); the others L2-normalised W x with cosine (Mithun et al. 2018).
Recall is measured on held-out items, in the direction(s) the loss trains.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from reelsearch.losses import create_loss
from reelsearch.similarity import get_similarity


def _views(n: int, g: torch.Generator, a_video: torch.Tensor, a_text: torch.Tensor, noise: float = 0.05):
    z = torch.randn(n, a_video.shape[0], generator=g)
    video = z @ a_video + noise * torch.randn(n, a_video.shape[1], generator=g)
    text = z @ a_text + noise * torch.randn(n, a_text.shape[1], generator=g)
    return text, video


def _recall_at_1(sims: torch.Tensor) -> tuple[float, float]:
    """(text-to-video, video-to-text) R@1 of a square caption-by-video matrix with pairs on the diagonal."""
    target = torch.arange(sims.shape[0])
    return (sims.argmax(1) == target).float().mean().item(), (sims.argmax(0) == target).float().mean().item()


@pytest.fixture
def one_thread():
    """Tiny matrices: one thread is fastest, and fair to a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("name", ["vse", "torabi-pairwise", "annotation", "vse++", "mithun-weighted", "infonce"])
def test_loss_trains_linear_joint_model(name, one_thread):
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    a_video, a_text = torch.randn(16, 48, generator=g), torch.randn(16, 40, generator=g)
    train_text, train_video = _views(1024, g, a_video, a_text)
    test_text, test_video = _views(200, g, a_video, a_text)
    video_proj, text_proj = torch.nn.Linear(48, 32), torch.nn.Linear(40, 32)
    loss = create_loss(name)
    sim = get_similarity(loss.similarity)

    def embed(text, video):
        c, v = text_proj(text), video_proj(video)
        if loss.similarity == "order":  # Torabi: absolute values of the projections, unit L2 norm
            c, v = c.abs(), v.abs()
        return F.normalize(c, dim=1), F.normalize(v, dim=1)

    def evaluate():
        with torch.no_grad():
            return _recall_at_1(sim(*embed(test_text, test_video)))

    before = evaluate()
    params = [*video_proj.parameters(), *text_proj.parameters(), *loss.parameters()]
    opt = torch.optim.Adam(params, lr=0.01)
    for _ in range(300):
        idx = torch.randint(0, train_text.shape[0], (64,), generator=g)
        value = loss(sim(*embed(train_text[idx], train_video[idx])))
        opt.zero_grad()
        value.backward()
        opt.step()
    t2v, v2t = evaluate()
    assert max(before) < 0.5, before
    if loss.directions == "annotation":  # Torabi eq. 5 only ranks captions for each video
        assert v2t > 0.9, (t2v, v2t)
    else:
        assert t2v > 0.9 and v2t > 0.9, (t2v, v2t)

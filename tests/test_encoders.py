"""Encoders: masking (junk padding never changes outputs), last valid state, SMSDC by hand, M3 attention."""

from __future__ import annotations

import pytest
import torch

from reelsearch.models.encoders import (
    MSDC,
    SMSDC,
    DilatedConv,
    SequenceEncoder,
    SoftFrameAttention,
    last_valid,
    lengths_to_mask,
    masked_max,
    masked_mean,
)

torch.set_num_threads(1)


def _junk_padded(x: torch.Tensor, extra: int, scale: float = 1e3) -> torch.Tensor:
    """x with ``extra`` more steps of large random junk, and its existing padding replaced by junk too."""
    junk = torch.randn(x.size(0), x.size(1) + extra, *x.shape[2:]) * scale
    return junk


def _with_junk(x: torch.Tensor, lengths: torch.Tensor, extra: int = 5) -> torch.Tensor:
    if x.dtype == torch.long:
        out = torch.randint(0, int(x.max()) + 1, (x.size(0), x.size(1) + extra))
    else:
        out = _junk_padded(x, extra)
    for i, n in enumerate(lengths.tolist()):
        out[i, :n] = x[i, :n]
    return out


def test_masked_reductions_match_loops():
    torch.manual_seed(0)
    x = torch.randn(3, 6, 4)
    lengths = torch.tensor([6, 2, 1])
    mask = lengths_to_mask(lengths, 6)
    for i, n in enumerate(lengths.tolist()):
        assert torch.allclose(masked_mean(x, mask)[i], x[i, :n].mean(0))
        assert torch.allclose(masked_max(x, mask)[i], x[i, :n].max(0).values)
        assert torch.equal(last_valid(x, lengths)[i], x[i, n - 1])
    assert mask.tolist()[1] == [True, True, False, False, False, False]


ENCODERS = {
    "word-average": dict(input_dim=8, sequence=None, pool="mean"),
    "lstm-last": dict(input_dim=8, sequence="lstm", hidden_size=6, pool="last"),
    "gru-vocab": dict(input_dim=8, vocab_size=20, embed_dim=8, sequence="gru", hidden_size=6, pool="last"),
    "bigru-mean": dict(input_dim=8, sequence="bigru", hidden_size=6, pool="mean"),
    "transformer": dict(input_dim=8, sequence="transformer", num_layers=2, heads=2, ff_dim=16, pool="mean"),
    "bigru-smsdc": dict(input_dim=8, sequence="bigru", hidden_size=6, pool="mean", smsdc={"n": 4, "m": 2}),
    "transformer-msdc": dict(input_dim=8, sequence="transformer", num_layers=1, heads=2, pool="mean",
                             smsdc={"n": 3, "m": 2, "stacked": False}),
}


@pytest.mark.parametrize("kind", sorted(ENCODERS))
def test_junk_padding_does_not_change_outputs(kind):
    torch.manual_seed(1)
    enc = SequenceEncoder(**ENCODERS[kind]).eval()
    lengths = torch.tensor([7, 3, 1, 5])
    x = torch.randint(2, 20, (4, 7)) if "vocab" in kind else torch.randn(4, 7, 8)
    with torch.no_grad():
        ref = enc(x, lengths)
        junk = enc(_with_junk(x, lengths), lengths)
        alone = torch.stack([enc(x[i : i + 1, :n], lengths[i : i + 1])[0] for i, n in enumerate(lengths.tolist())])
    assert ref.shape == (4, enc.output_dim)
    torch.testing.assert_close(junk, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(alone, ref, rtol=1e-5, atol=1e-5)


def test_lstm_last_state_is_the_last_valid_step_of_an_unpadded_run():
    torch.manual_seed(2)
    enc = SequenceEncoder(input_dim=5, sequence="lstm", hidden_size=4, pool="last").eval()
    x, lengths = torch.randn(3, 6, 5), torch.tensor([6, 4, 2])
    with torch.no_grad():
        got = enc(x, lengths)
        for i, n in enumerate(lengths.tolist()):
            _, (h, _) = enc.rnn(x[i : i + 1, :n])  # plain LSTM over exactly the valid words
            torch.testing.assert_close(got[i], h[-1, 0])


def test_output_sizes_follow_the_papers():
    # SCDE §3.1-3.3: bi-GRU 512 -> 1024 global + (4,2) SMSDC -> 8 * 1024 local; text (3,2) -> 6 * d local.
    video = SequenceEncoder(input_dim=16, sequence="bigru", hidden_size=512, pool="mean", smsdc={"n": 4, "m": 2})
    assert video.output_dim == 1024 + 4 * 2 * 1024
    text = SequenceEncoder(input_dim=384, sequence="transformer", num_layers=1, heads=6, pool="mean",
                           smsdc={"n": 3, "m": 2})
    assert text.output_dim == 384 + 3 * 2 * 384


def test_msdc_kernel_and_dilation_sets_and_receptive_fields():
    msdc = MSDC(dim=3, n=4, m=2)
    got = [(c.dilation, c.kernel_size) for c in msdc.convs]
    assert got == [(r, w) for r in (1, 2) for w in (2, 3, 4, 5)]  # w in {2..n+1}, r in {1..m}
    assert [c.receptive_field for c in msdc.convs] == [2, 3, 4, 5, 3, 5, 7, 9]  # r (w - 1) + 1
    assert SMSDC(dim=3, n=3, m=2).output_dim == 6 * 3


def test_dilated_conv_matches_equation_6_by_hand():
    torch.manual_seed(3)
    conv = DilatedConv(dim=2, kernel_size=3, dilation=2)
    x = torch.randn(1, 7, 2)
    w, b = conv.conv.weight, conv.conv.bias  # [out, in, k]
    expected = torch.zeros(7, 2)
    for t in range(7):
        acc = b.clone()
        for i in range(3):
            s = t + 2 * i
            if s < 7:  # zeros past the end
                acc = acc + w[:, :, i] @ x[0, s]
        expected[t] = acc
    torch.testing.assert_close(conv(x)[0], expected)
    # and the Conv1d it holds (right zero padding), for a bigger case with gradients
    conv = DilatedConv(dim=16, kernel_size=5, dilation=2)
    x = torch.randn(3, 6, 16, requires_grad=True)
    ref = conv.conv(torch.nn.functional.pad(x.transpose(1, 2), (0, 8))).transpose(1, 2)
    torch.testing.assert_close(conv(x), ref, rtol=1e-5, atol=1e-5)
    g_ours = torch.autograd.grad(conv(x).square().sum(), (x, conv.conv.weight))
    g_ref = torch.autograd.grad(ref.square().sum(), (x, conv.conv.weight))
    for a, b in zip(g_ours, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_padded_frames_never_win_the_max_pool():
    # d = 1, every conv the identity on its first tap and bias 0: outputs equal relu(x[t]); a huge value in the
    # padding would win an unmasked max-pool.
    msdc = MSDC(dim=1, n=1, m=1)
    with torch.no_grad():
        for c in msdc.convs:
            c.conv.weight.zero_()
            c.conv.weight[0, 0, 0] = 1.0
            c.conv.bias.zero_()
    x = torch.tensor([[[0.5], [2.0], [1.0], [100.0], [100.0]]])
    mask = lengths_to_mask(torch.tensor([3]), 5)
    assert msdc(x, mask).item() == 2.0
    # and the window of the last valid frame reads zeros, not padding: a tap on x[t+1] gives relu(0) at t = 2
    with torch.no_grad():
        msdc.convs[0].conv.weight[0, 0] = torch.tensor([0.0, 1.0])
    x = torch.tensor([[[2.0], [0.5], [1.0], [100.0], [100.0]]])
    assert msdc(x, mask).item() == 1.0  # max(x[1], x[2], 0) over t = 0, 1, 2; unmasked, t = 2 would read 100


def test_smsdc_second_stage_runs_over_the_nm_local_features():
    torch.manual_seed(4)
    s = SMSDC(dim=4, n=3, m=2)
    x, mask = torch.randn(2, 9, 4), lengths_to_mask(torch.tensor([9, 4]), 9)
    first = s.first(x, mask)
    assert first.shape == (2, 6, 4)
    expected = s.second(first, torch.ones(2, 6, dtype=torch.bool)).flatten(1)
    torch.testing.assert_close(s(x, mask), expected)
    assert s(x, mask).shape == (2, 24)


def test_attention_weights_sum_to_one_over_valid_frames():
    torch.manual_seed(5)
    att = SoftFrameAttention(frame_dim=6, query_dim=4, attention_dim=5)
    frames, lengths = torch.randn(3, 7, 6), torch.tensor([7, 2, 4])
    w = att.weights(torch.randn(5, 4), att.keys(frames), lengths)
    assert w.shape == (5, 3, 7)
    mask = lengths_to_mask(lengths, 7)
    torch.testing.assert_close(w.sum(-1), torch.ones(5, 3))
    assert torch.all(w[:, ~mask] == 0)
    assert torch.all(w[:, mask] > 0)


def test_attention_logits_match_a_loop_over_pairs():
    torch.manual_seed(6)
    att = SoftFrameAttention(frame_dim=3, query_dim=2, attention_dim=4)
    frames, lengths, q = torch.randn(2, 5, 3), torch.tensor([5, 3]), torch.randn(3, 2)
    w = att.weights(q, att.keys(frames), lengths)
    for c in range(3):
        for v in range(2):
            n = int(lengths[v])
            e = torch.stack([att.score(torch.tanh(att.frame_proj(frames[v, t]) + att.query_proj(q[c])))[0]
                             for t in range(n)])
            torch.testing.assert_close(w[c, v, :n], torch.softmax(e, 0))


def test_collate_sequences_pads_and_counts():
    import numpy as np

    from reelsearch.models.batching import collate_sequences, video_batch

    feats, lengths = collate_sequences([np.ones((3, 2), np.float16), np.zeros((0, 2)), 2 * np.ones((1, 2))])
    assert feats.shape == (3, 3, 2) and feats.dtype == torch.float32 and lengths.tolist() == [3, 0, 1]
    assert feats[2, 0].tolist() == [2.0, 2.0] and feats[2, 1:].abs().sum() == 0
    batch = video_batch({"appearance": [np.ones((4, 5))], "audio": [np.ones((2, 3))]})
    assert batch["feats"]["audio"].shape == (1, 2, 3) and batch["lengths"]["appearance"].tolist() == [4]
    with pytest.raises(ValueError, match="feature sizes"):
        collate_sequences([np.ones((1, 2)), np.ones((1, 3))])

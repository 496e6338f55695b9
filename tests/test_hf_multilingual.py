"""A multilingual CLIP-family checkpoint (a tiny random SigLIP whose tokenizer is trained here on eight languages in
five scripts, as ``google/siglip-base-patch16-256-multilingual`` is a SigLIP with a multilingual tokenizer): queries
in German, Chinese, Japanese, Russian, Arabic and Hindi embed as transformers embeds them, reach the text tower
unchanged through `reelsearch search`, and `reelsearch serve --model hf:DIR` answers them over HTTP as the search in
process does."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

pytest.importorskip("transformers")

import hf_checkpoints  # noqa: E402
import reelsearch  # noqa: E402
from reelsearch.cli.main import app  # noqa: E402
from reelsearch.errors import DataFormatError  # noqa: E402
from reelsearch.served import live_advert  # noqa: E402
from reelsearch.towers.clip import Towers  # noqa: E402
from test_search_support import make_media  # noqa: E402

#: One query per language the tokenizer was not only trained on in English (words recombined, not its sentences).
QUERIES = {"de": "ein Kind fährt Fahrrad im Schnee", "zh": "孩子在公园里骑自行车", "ja": "犬が雪の中で遊んでいる",
           "ru": "ребёнок едет на велосипеде", "ar": "طفل يركب دراجة", "hi": "बच्चा पार्क में खेल रहा है",
           "en": "a dog plays in the snow"}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return hf_checkpoints.make_multilingual_siglip(tmp_path_factory.mktemp("hf-ml") / "siglip-multilingual")


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch) -> Path:
    folder = tmp_path_factory.getbasetemp() / "hf-cache"
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(folder))
    return folder


def reference(folder: Path, texts: list[str]) -> np.ndarray:
    """transformers' own unit-norm embeddings of ``texts`` (its tokenizer padded to the maximum length, as SigLIP)."""
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(folder)).eval()
    tokens = AutoTokenizer.from_pretrained(str(folder))(texts, padding="max_length", truncation=True,
                                                              return_tensors="pt")
    with torch.no_grad():
        out = model.get_text_features(**tokens).pooler_output
    return torch.nn.functional.normalize(out, dim=-1).numpy()


def cosine_distance(a: np.ndarray, b: np.ndarray) -> float:
    return float(1 - (a * b).sum(1).min())


def test_the_tokenizer_covers_every_script(checkpoint):
    """No query falls to the unknown token: the non-Latin scripts are the tokenizer's own pieces."""
    towers = Towers(checkpoint, runtime="torch")
    tokens = towers.tokens(list(QUERIES.values()))
    assert towers.tokenizer.unk_token_id not in set(tokens["input_ids"][tokens["attention_mask"] > 0].tolist())
    assert (tokens["attention_mask"].sum(1) < towers.max_length).all()  # none cut
    assert tokens["input_ids"].shape[1] == towers.max_length == 48  # SigLIP: padded to its maximum length


@pytest.mark.parametrize("runtime,tolerance", [("torch", 1e-4), ("onnxruntime", 1e-3)])
def test_queries_in_every_language_equal_transformers(checkpoint, runtime, tolerance):
    if runtime == "onnxruntime":
        pytest.importorskip("onnxruntime")
    texts = list(QUERIES.values())
    got = Towers(checkpoint, runtime=runtime).encode_text(texts)
    assert cosine_distance(got, reference(checkpoint, texts)) < tolerance
    assert cosine_distance(got[:1], got[1:2]) > 1e-3  # different sentences, different embeddings


def _start_serve(index: Path, spec: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "reelsearch", "serve", "--index", str(index), "--model", spec,
                             "--port", "0", "--no-access-log"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 240
    while live_advert(index) is None or live_advert(index)["pid"] != proc.pid:
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.2)
    return proc


def _get(advert: dict, route: str, **params) -> dict:
    url = f"http://{advert['host']}:{advert['port']}{route}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=120) as response:  # noqa: S310 - the test's own local server
        assert response.status == 200
        return json.loads(response.read())


def test_index_search_and_serve_take_every_language_unchanged(checkpoint, tmp_path, monkeypatch):
    """Indexed with the multilingual checkpoint, `reelsearch search` hands each query to the text tower as typed
    (its embedding is transformers' own, above); `reelsearch serve --model hf:DIR` answers the same queries over
    HTTP with the same videos and scores as the search in process."""
    spec = f"hf:{checkpoint}"
    make_media(tmp_path / "media")
    index = tmp_path / "index"
    runner = CliRunner()
    res = runner.invoke(app, ["index", str(tmp_path / "media"), "--index", str(index), "--model", spec, "--quiet",
                              "--no-speech", "--no-ocr"])
    assert res.exit_code == 0, res.output
    seen: list[str] = []
    encode = Towers.encode_text

    def recording(self, texts, *args, **kwargs):
        seen.extend(texts)
        return encode(self, texts, *args, **kwargs)

    monkeypatch.setattr(Towers, "encode_text", recording)
    here = {}
    for lang, query in QUERIES.items():
        res = runner.invoke(app, ["search", query, "--index", str(index), "--json", "-k", "5", "--local"])
        assert res.exit_code == 0, (lang, res.output)
        here[lang] = [(h["id"], h["score"]) for h in json.loads(res.stdout)]
        assert len(here[lang]) == 5 and seen[-1] == query, lang  # the query, as typed, is what the tower encodes
    assert len({tuple(i for i, _ in hits) for hits in here.values()} | {
        tuple(round(s, 3) for _, s in hits) for hits in here.values()}) > 1  # the languages rank differently
    proc = _start_serve(index, spec)
    try:
        advert = live_advert(index)
        assert advert["model"] == spec
        for lang, query in QUERIES.items():
            answer = _get(advert, "/search", q=query, k=5)
            assert answer["query"] == query
            served = [(h["id"], h["score"]) for h in answer["results"]]
            assert [i for i, _ in served] == [i for i, _ in here[lang]], lang
            assert np.allclose([s for _, s in served], [s for _, s in here[lang]], atol=1e-4), lang
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_an_m_clip_style_text_tower_is_refused_in_one_line(tmp_path):
    """M-CLIP's text tower is its own model class (not a CLIPModel / SiglipModel holding both towers): `hf:` refuses
    it naming the file and what runs, rather than failing somewhere inside transformers."""
    folder = tmp_path / "m-clip"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "M-CLIP", "modelBase": "xlm-roberta-large"}))
    with pytest.raises(DataFormatError, match=r"model_type 'M-CLIP'.*clip and siglip") as refused:
        reelsearch.load(f"hf:{folder}")
    assert str(folder / "config.json") in str(refused.value)

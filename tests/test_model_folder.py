"""The model folder (``reelsearch.models.folder``): one manifest names every part; ``load(x).save(y)`` keeps every
part (checked on the bundled default: a mixture of two experts with tuned CNN tails, a querybank and a card, scored
on real Flickr8k photos); earlier versions' folders still load; the manifest comes last, so an interrupted save
leaves no model; newer formats, unknown parts and paths outside the folder are refused naming the manifest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import shared_path

torch = pytest.importorskip("torch")
from safetensors import safe_open  # noqa: E402

from reelsearch.errors import ConfigError, DataFormatError, ReelsearchError  # noqa: E402
from reelsearch.models import JointModel, MixtureOfExperts, load_model  # noqa: E402
from reelsearch.models.checkpoint import default_model_dir, resolve_checkpoint, run_model_dir  # noqa: E402
from reelsearch.models.folder import MANIFEST_FILE, is_model_folder, read_model  # noqa: E402
from reelsearch.models.querybank import BANK_FILE, QueryBank  # noqa: E402
from reelsearch.models.registry import model_config  # noqa: E402
from reelsearch.models.student_text import FOLDER as STUDENT_FOLDER  # noqa: E402
from reelsearch.models.student_text import WEIGHTS_FILE as STUDENT_WEIGHTS  # noqa: E402
from reelsearch.search.embed import MediaEmbedder  # noqa: E402


def _manifest(directory: Path) -> dict:
    return json.loads((directory / MANIFEST_FILE).read_text())


def _named_files(directory: Path) -> set[str]:
    """Every file under ``directory`` that its manifests name (the experts' own manifests followed)."""
    out = {MANIFEST_FILE}
    for entry in _manifest(directory)["parts"]:
        for name in entry["files"]:
            path = directory / name
            if entry["kind"] == "expert":
                out |= {f"{name}/{f}" for f in _named_files(path)}
            elif path.is_dir():
                out |= {str(p.relative_to(directory)) for p in path.rglob("*") if p.is_file()}
            else:
                out.add(name)
    return out


def _files(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()}


def _unit(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _linear(seed: int = 0) -> JointModel:
    torch.manual_seed(seed)
    return JointModel(model_config("reelsearch-linear")).eval()


@pytest.fixture(scope="module")
def photos():
    """Eight real Flickr8k dev photos and two of each one's captions."""
    root = shared_path("flickr8k")
    names = root.joinpath("dev.txt").read_text().split()[:8]
    captions = {}
    for line in root.joinpath("captions.txt").read_text().splitlines():
        key, caption = line.split("\t")
        captions.setdefault(key.split("#")[0], []).append(caption)
    return [str(root / "images" / n) for n in names], [c for n in names for c in captions[n][:2]]


def test_the_bundled_default_is_a_manifest_folder_of_parts_only():
    directory = default_model_dir()
    manifest = _manifest(directory)
    assert manifest["format"] == "reelsearch.model" and manifest["model"] == "mixture-of-experts"
    assert [(e["kind"], e.get("name")) for e in manifest["parts"]] == [
        ("config", None), ("expert", "lite0"), ("expert", "lite2"), ("querybank", None), ("student-text", None),
        ("calibration", None), ("model-card", None)]
    for expert in ("lite0", "lite2"):
        kinds = [(e["kind"], e["files"]) for e in _manifest(directory / "experts" / expert)["parts"]]
        assert kinds == [("config", ["config.json"]), ("weights", ["model.safetensors"]),
                         ("cnn-tail", ["tail-appearance.safetensors"])]
    # no report (tune.json, querybank.json) and nothing else: every file is a part the manifests name
    assert _files(directory) == _named_files(directory)


def test_a_loaded_model_saved_again_keeps_every_part_and_scores_the_same(photos, tmp_path):
    paths, captions = photos
    default = load_model("default")
    assert default.querybank is not None and default.card.startswith("# reelsearch default model")
    default.save(tmp_path / "copy")
    copy = load_model(tmp_path / "copy")
    # the same model: weights and recipes (the fingerprint), bank, card, the search index's model id
    assert copy.fingerprint() == default.fingerprint()
    assert {k: e.fingerprint() for k, e in copy.experts.items()} == {
        k: e.fingerprint() for k, e in default.experts.items()}
    assert copy.querybank.digest() == default.querybank.digest() and copy.card == default.card
    # the student text encoder: as measured, its tuned layers in int8, with its own calibration
    assert copy.student_text.checked == default.student_text.checked and copy.student_text.store == "int8"
    assert copy.student_text.source == default.student_text.source and "run d3, epoch 12" in copy.student_text.source
    assert not Path(default.student_text.source).is_absolute()  # what made it, not a folder on a development VM
    probe = np.linspace(-0.3, 0.3, 61)
    np.testing.assert_array_equal(copy.student_text.calibration(probe, "2-3", "a dog"),
                                  default.student_text.calibration(probe, "2-3", "a dog"))
    assert MediaEmbedder(copy).describe() == MediaEmbedder(default).describe()
    for name in ("lite0", "lite2"):  # the tuned tails are the copy's own files
        tail = Path(copy.experts[name].recipes["appearance"].options["tail"])
        assert tail == (tmp_path / "copy" / "experts" / name / "tail-appearance.safetensors").resolve()
        assert tail.read_bytes() == (default_model_dir() / "experts" / name / tail.name).read_bytes()
    # evaluates identically: the score matrices of real captions and photos, and the bank's offsets of them
    want_t, got_t = default.encode_text(captions), copy.encode_text(captions)
    want_v, got_v = default.encode_video(paths, frames=False), copy.encode_video(paths, frames=False)
    np.testing.assert_allclose(copy.score(got_t, got_v), default.score(want_t, want_v), atol=1e-5)
    np.testing.assert_allclose(copy.querybank.video_offsets(got_v.video), default.querybank.video_offsets(want_v.video),
                               atol=1e-5)
    assert _files(tmp_path / "copy") == _named_files(tmp_path / "copy") == _named_files(default_model_dir())
    # and again: a copy of the copy has the same files, byte for byte but the order of the metadata of the files
    # safetensors writes (the bank's, the student's: the same metadata and tensors)
    copy.save(tmp_path / "again")
    rewritten = {BANK_FILE, f"{STUDENT_FOLDER}/{STUDENT_WEIGHTS}"}
    for name in _files(tmp_path / "copy") - rewritten:
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "copy" / name).read_bytes(), name
    for name in rewritten:
        with safe_open(str(tmp_path / "again" / name), "np") as a, safe_open(str(tmp_path / "copy" / name), "np") as b:
            assert a.metadata() == b.metadata() and sorted(a.keys()) == sorted(b.keys()), name
            assert all(np.array_equal(a.get_tensor(k), b.get_tensor(k)) for k in a.keys()), name


def test_folders_of_earlier_versions_still_load(tmp_path):
    """The bundled default as an earlier version wrote it (moe.json + experts/, config.json + model.safetensors,
    the bank and the card beside them, no manifest): the same model, bank and card."""
    legacy = tmp_path / "legacy"
    shutil.copytree(default_model_dir(), legacy)
    for manifest in legacy.rglob(MANIFEST_FILE):
        manifest.unlink()
    assert is_model_folder(legacy) and resolve_checkpoint(legacy) == legacy
    old, new = load_model(legacy), load_model("default")
    assert isinstance(old, MixtureOfExperts) and list(old.experts) == ["lite0", "lite2"]
    assert old.fingerprint() == new.fingerprint() and old.querybank.digest() == new.querybank.digest()
    assert old.card == new.card
    rng = np.random.default_rng(0)
    items = [{"appearance": rng.random((3, 1280), np.float32), "appearance@lite2": rng.random((3, 1280), np.float32)}]
    text = new.encode_text(["a dog runs on the beach", "two men play football"])
    np.testing.assert_allclose(old.score(text, old.encode_video(items)), new.score(text, new.encode_video(items)),
                               atol=1e-6)
    # an expert alone (a joint model with its tail), and saving the legacy folder gives this version's layout
    assert load_model(legacy / "experts" / "lite0").fingerprint() == new.experts["lite0"].fingerprint()
    old.save(legacy)
    assert _manifest(legacy)["model"] == "mixture-of-experts" and load_model(legacy).fingerprint() == new.fingerprint()


def test_the_querybank_is_a_part_saved_and_loaded_with_the_model(tmp_path):
    model = _linear()
    rng = np.random.default_rng(1)
    model.querybank = QueryBank(_unit(rng, 20, 512), _unit(rng, 4, 512), 15.0, model.fingerprint(), "x")
    model.save(tmp_path / "m")
    assert [e["kind"] for e in _manifest(tmp_path / "m")["parts"]] == ["config", "weights", "querybank"]
    loaded = load_model(tmp_path / "m")
    assert loaded.querybank.beta == 15.0 and loaded.querybank.source == "x"
    assert JointModel.load(tmp_path / "m").querybank.digest() == loaded.querybank.digest()
    # a bank of other weights is refused when saving (it would not load) ...
    other = _linear(seed=1)
    other.querybank = loaded.querybank
    with pytest.raises(ConfigError, match="querybank of another model"):
        other.save(tmp_path / "other")
    assert not is_model_folder(tmp_path / "other")
    # ... and when loading (weights changed behind the manifest's back), naming the bank's file
    other.querybank = None
    other.save(tmp_path / "other")
    shutil.copyfile(tmp_path / "other" / "model.safetensors", tmp_path / "m" / "model.safetensors")
    with pytest.raises(DataFormatError, match=f"{BANK_FILE}: a querybank of another model"):
        load_model(tmp_path / "m")
    # a model saved over the folder without a bank leaves none behind
    other.save(tmp_path / "m")
    assert not (tmp_path / "m" / BANK_FILE).exists() and load_model(tmp_path / "m").querybank is None


def test_a_card_travels_with_the_model(tmp_path):
    model = _linear()
    model.card = "# my model\n\nTrained on nothing.\n"
    model.save(tmp_path / "m")
    assert (tmp_path / "m" / "MODEL_CARD.md").read_text() == model.card
    load_model(tmp_path / "m").save(tmp_path / "n")
    assert load_model(tmp_path / "n").card == model.card
    model.card = None
    model.save(tmp_path / "n")
    assert not (tmp_path / "n" / "MODEL_CARD.md").exists() and load_model(tmp_path / "n").card is None


def test_an_interrupted_save_leaves_no_model(tmp_path, monkeypatch):
    """Over an existing model (its manifest and config go first) and into a new folder (the config and the
    manifest come last): a crash while the parts are written leaves a folder that neither reader takes."""
    model = _linear()
    model.querybank = QueryBank(_unit(np.random.default_rng(2), 8, 512), _unit(np.random.default_rng(3), 2, 512),
                                model=model.fingerprint())
    model.save(tmp_path / "m")

    def crash(self, directory):
        raise OSError("disk full")

    monkeypatch.setattr(QueryBank, "save", crash)
    for folder in (tmp_path / "m", tmp_path / "new"):
        with pytest.raises(OSError, match="disk full"):
            model.save(folder)
        assert not is_model_folder(folder)
        with pytest.raises(ReelsearchError, match="not a reelsearch model directory"):
            load_model(folder)
    assert (tmp_path / "new" / "model.safetensors").is_file()  # parts before the bank were written


def test_bad_manifests_are_refused_naming_the_file(tmp_path):
    _linear().save(tmp_path / "m")
    path = tmp_path / "m" / MANIFEST_FILE
    good = json.loads(path.read_text())
    cases = [({**good, "version": 2}, "format version 2 is newer than this reelsearch reads"),
             ({**good, "model": "transformer-xl"}, "unknown model kind 'transformer-xl'"),
             ({**good, "parts": good["parts"] + [{"kind": "lora", "files": ["x"]}]}, "unknown part kind 'lora'"),
             ({**good, "parts": [{"kind": "config", "files": ["../config.json"]}]}, "paths inside the folder"),
             ({**good, "parts": [{"kind": "config", "files": ["config.json"]}]}, "no 'weights' part"),
             ({**good, "format": "something"}, "not a reelsearch.model manifest")]
    for manifest, message in cases:
        path.write_text(json.dumps(manifest))
        with pytest.raises(DataFormatError, match=message) as err:
            load_model(tmp_path / "m")
        assert str(err.value).startswith(str(path))
    path.write_text(json.dumps(good))
    (tmp_path / "m" / "model.safetensors").unlink()
    with pytest.raises(DataFormatError, match="model.safetensors: missing model weights"):
        load_model(tmp_path / "m")


def test_a_model_loads_as_its_own_class_only(tmp_path):
    _linear().save(tmp_path / "m")
    assert isinstance(read_model(tmp_path / "m"), JointModel)
    with pytest.raises(DataFormatError, match="holds a JointModel, not a MixtureOfExperts"):
        MixtureOfExperts.load(tmp_path / "m")


def test_commands_that_derive_a_model_write_their_report_beside_it(tmp_path):
    _linear().save(tmp_path / "m")
    with pytest.raises(ReelsearchError, match="a model folder; pass a run folder"):
        run_model_dir(tmp_path / "m")
    assert run_model_dir(tmp_path / "run") == tmp_path / "run" / "best"

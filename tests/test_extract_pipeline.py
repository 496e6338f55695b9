"""`reelsearch extract` and reelsearch.features.extract on generated media: keys, bad inputs, resume, shards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, shared_path
from in_process import cli_here
from index_extractor import IndexExtractor, pipeline_of
from reelsearch.errors import ReelsearchError
from reelsearch.features.extract import ExtractConfig, run_extraction
from reelsearch.features.jobs import Job, collect_jobs, shard
from test_media_decode import make_clip, make_huge_png, make_image, make_wav

pytest.importorskip("av")
store_mod = pytest.importorskip("reelsearch.features.store")
FeatureStore = store_mod.FeatureStore
REELSEARCH = [sys.executable, "-m", "reelsearch"]


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("media")
    (d / "videos" / "deep").mkdir(parents=True)
    make_clip(d / "videos" / "deep" / "v1.mp4", n=50, fps=25, w=96, h=64, audio_hz=440.0)
    make_clip(d / "videos" / "v2.mkv", n=30, fps=10, w=64, h=48, codec="libx264")
    (d / "images").mkdir()
    make_image(d / "images" / "im0.jpg", index=10)
    for i in range(1, 4):
        make_image(d / "images" / f"im{i}.png", index=10 + i)
    return d


def test_collect_jobs_keys_and_collisions(media, tmp_path):
    jobs = collect_jobs([media / "videos", media / "images" / "im1.png"]).jobs
    assert [j.key for j in jobs] == ["deep/v1", "im1", "v2"]
    (tmp_path / "a.mp4").write_bytes(b"x")
    (tmp_path / "a.png").write_bytes(b"x")
    (tmp_path / "b.jpg").write_bytes(b"x")
    with open(os.fsencode(tmp_path) + b"/\xff\xfe.jpg", "wb"):
        pass
    got = collect_jobs([tmp_path])
    assert [j.key for j in got.jobs] == ["\\xff\\xfe", "b"]  # undecodable bytes escaped in the key
    assert sorted(p["path"].rsplit("/", 1)[1] for p in got.problems) == ["a.mp4", "a.png"]
    assert all("shared by" in p["error"] for p in got.problems)
    with pytest.raises(ReelsearchError, match="no such file"):
        collect_jobs([tmp_path / "missing"])
    keys = [f"k{i}" for i in range(7)]
    parts = [[j.key for j in shard([Job(k, None) for k in reversed(keys)], r, 3)] for r in range(3)]
    assert parts == [["k0", "k3", "k6"], ["k1", "k4"], ["k2", "k5"]]


def test_frames_reach_the_store_with_timestamps(media, tmp_path):
    jobs = collect_jobs([media]).jobs
    ex = IndexExtractor()
    cfg = ExtractConfig(workers=2, progress=False, call_frames=4)
    summary = run_extraction(jobs, tmp_path / "s", pipeline_of({"appearance": ex}), cfg)
    assert summary.added == {"appearance": 6} and not summary.errors
    store = FeatureStore(tmp_path / "s")
    v1 = store.get("appearance", "videos/deep/v1")
    assert v1[:, 0].tolist() == [0, 12, 25, 37]  # frames displayed at 0, .5, 1, 1.5 s of the 25 fps clip
    meta = store.get_meta("appearance", "videos/deep/v1")
    assert meta["timestamps"] == [0.0, 0.48, 1.0, 1.48] and meta["fps"] == 25.0 and meta["duration"] == 2.0
    assert meta["path"].endswith("v1.mp4") and meta["sampling"] == "interval:0.5"
    assert store.get("appearance", "videos/v2")[:, 0].tolist() == [0, 5, 10, 15, 20, 25]
    for i in range(4):
        assert store.get("appearance", f"images/im{i}")[:, 0].tolist() == [10 + i]
    # a second run finds everything done and calls no extractor
    again = IndexExtractor()
    s2 = run_extraction(jobs, tmp_path / "s", pipeline_of({"appearance": again}), cfg)
    assert again.frames_seen == 0 and s2.already == {"appearance": 6} and s2.added == {"appearance": 0}


@pytest.fixture(scope="module")
def real_extractors():
    from reelsearch.features.extract import make_extractor

    return {m: make_extractor(n, device="cpu") for m, n in
            [("appearance", "efficientnet-lite0"), ("motion", "hof-mbh"), ("audio", "soundnet8")]}


def test_real_extractors_and_bad_inputs_in_one_batch(media, tmp_path, real_extractors):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "zero.mp4").write_bytes(b"")
    (bad / "garbage.mkv").write_bytes(np.random.default_rng(1).integers(0, 256, 4000, dtype=np.uint8).tobytes())
    data = make_clip(tmp_path / "ok.mp4", n=100).read_bytes()
    (bad / "cut.mp4").write_bytes(data[: len(data) // 2])
    make_huge_png(bad / "huge.png")
    with open(os.fsencode(bad) + b"/caf\xe9.png", "wb") as fh:  # a good image with a non-UTF-8 name
        fh.write((media / "images" / "im1.png").read_bytes())
    wav = make_wav(tmp_path / "speech.wav")
    jobs = collect_jobs([media / "videos", bad, wav]).jobs
    summary = run_extraction(jobs, tmp_path / "s", pipeline_of(real_extractors), ExtractConfig(workers=2,
                                                                                                progress=False))
    store = FeatureStore(tmp_path / "s")
    assert sorted(store.keys("appearance")) == ["caf\\xe9", "deep/v1", "v2"]
    assert store.get("appearance", "deep/v1").shape == (4, 1280)
    assert store.get("motion", "deep/v1").shape == (4, 125)  # flow from each sampled frame to the next frame
    assert sorted(store.keys("audio")) == ["deep/v1", "speech"]  # v2 has no audio track: no audio, no error
    assert summary.absent["audio"] >= 2 and summary.absent["motion"] == 1  # v2 and images; the image
    lines = [json.loads(x) for x in (tmp_path / "s" / "errors.jsonl").read_text().splitlines()]
    failed = {(e["id"], e["modality"]) for e in lines}
    assert {("zero", "appearance"), ("garbage", "appearance"), ("cut", "appearance"), ("huge", "appearance"),
            ("speech", "appearance")} <= failed
    assert all(e["path"] and e["error"] for e in lines)
    by_id = {e["id"]: e["error"] for e in lines if e["modality"] == "appearance"}
    assert "empty" in by_id["zero"] and "too large" in by_id["huge"] and "no video stream" in by_id["speech"]
    assert summary.failed_items == 5


def test_cli_exit_status_summary_and_errors(media, tmp_path):
    """`reelsearch extract` (through the entry point, in this process): exit 3 with one failed item, its line in
    errors.jsonl; `features info` counts what was stored; a rerun does nothing again and clears errors.jsonl."""
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("im1.png", "im2.png"):
        (folder / name).write_bytes((media / "images" / name).read_bytes())
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    out = tmp_path / "store"
    run = cli_here("extract", folder, "--out", out, "--no-progress", "--workers", "1")
    assert run.returncode == 3, run.stderr
    assert "3 items" in run.stdout and "1 failed" in run.stdout and "errors.jsonl" in run.stdout
    [err] = [json.loads(x) for x in (out / "errors.jsonl").read_text().splitlines()]
    assert err["id"] == "broken" and err["path"].endswith("broken.jpg") and err["modality"] == "appearance"
    info = cli_here("features", "info", out, "--json")
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["modalities"]["appearance"]["items"] == 2
    (folder / "broken.jpg").unlink()
    rerun = cli_here("extract", folder, "--out", out, "--no-progress")
    assert rerun.returncode == 0 and "done before 2" in rerun.stdout, rerun.stderr
    assert (out / "errors.jsonl").read_text() == ""  # this run had no failure


SLOW_RUN = """
import sys, time
sys.path.insert(0, {tests!r})
from index_extractor import IndexExtractor, pipeline_of
from reelsearch.features.extract import ExtractConfig, run_extraction
from reelsearch.features.jobs import collect_jobs
cfg = ExtractConfig(workers=1, progress=False, commit_every=2, call_frames=1)
run_extraction(collect_jobs([{media!r}]).jobs, {store!r}, pipeline_of({{"appearance": IndexExtractor(0.15)}}), cfg)
"""


def test_killed_run_resumes_without_redoing(tmp_path):
    media = tmp_path / "imgs"
    media.mkdir()
    for i in range(16):
        make_image(media / f"i{i:02d}.png", index=i)
    store = tmp_path / "s"
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(SLOW_RUN.format(tests=str(ROOT / "tests"), media=str(media), store=str(store))))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=ROOT)
    manifest = store / "appearance" / "manifest.json"
    deadline = time.time() + 60
    while time.time() < deadline:
        if manifest.exists() and len(json.loads(manifest.read_text())["segments"]) >= 2:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = FeatureStore(store).keys("appearance")
    assert 4 <= len(done_before) < 16, "the run was not killed mid-way"
    ex = IndexExtractor()
    summary = run_extraction(collect_jobs([media]).jobs, store, pipeline_of({"appearance": ex}),
                             ExtractConfig(workers=1, progress=False))
    assert ex.frames_seen == 16 - len(done_before)  # nothing committed before the kill is extracted again
    assert summary.already["appearance"] == len(done_before)
    s = FeatureStore(store)
    assert sorted(s.keys("appearance")) == [f"i{i:02d}" for i in range(16)]
    assert [s.get("appearance", f"i{i:02d}")[0, 0] for i in range(16)] == list(range(16))


def test_distributed_shards_merge(media, tmp_path, monkeypatch):
    """Two ranks by hand (RANK / WORLD_SIZE, file rendezvous): each writes STORE/rank-r, rank 0 merges. Rank 1 is a
    process, rank 0 this one (the CLI's main: a process less to start; the torchrun test below runs every rank as a
    process)."""
    out = tmp_path / "store"
    args = ["extract", str(media), "--out", str(out), "-m", "motion", "--no-progress"]
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("REELSEARCH_RUN_ID", f"t{os.getpid()}")
    monkeypatch.setenv("RANK", "1")
    other = subprocess.Popen([*REELSEARCH, *args], cwd=ROOT, env=dict(os.environ), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    monkeypatch.setenv("RANK", "0")
    try:
        here = cli_here(*args, "--merge-timeout", "120")
        outs = [(here.stdout, here.stderr), other.communicate(timeout=120)]
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()
    assert [here.returncode, other.returncode] == [0, 0], outs
    assert "merged 2 shards" in outs[0][0]
    merged = FeatureStore(out)
    assert sorted(merged.keys("motion")) == ["videos/deep/v1", "videos/v2"]
    r0, r1 = (FeatureStore(out / f"rank-{r}").keys("motion") for r in range(2))
    assert r0 == ["videos/deep/v1"] and r1 == ["videos/v2"]  # sorted(keys)[rank::2]; images have no motion
    np.testing.assert_array_equal(merged.get("motion", "videos/v2"), FeatureStore(out / "rank-1").get("motion",
                                                                                                     "videos/v2"))


def test_distributed_shards_merge_under_torchrun(media, tmp_path):
    """Two ranks under torchrun (gloo process group): the same shards and merge as the file rendezvous, the merge
    done once every rank is past the barrier."""
    from reelsearch.service.background import free_port

    out = tmp_path / "store"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           "-m", "reelsearch", "extract", str(media), "--out", str(out), "-m", "motion", "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("merged 2 shards") == 1, proc.stdout
    for rank in range(2):  # 6 items, 3 each; only the videos have motion
        assert f"rank {rank}/2: extract: 3 items; motion +1 (done before 0, none 2); 0 failed" in proc.stderr
    merged = FeatureStore(out)
    assert sorted(merged.keys("motion")) == ["videos/deep/v1", "videos/v2"]
    for rank, key in enumerate(["videos/deep/v1", "videos/v2"]):
        np.testing.assert_array_equal(merged.get("motion", key), FeatureStore(out / f"rank-{rank}").get("motion", key))


def test_a_torchrun_rank_leaves_its_group_as_training_does(media, tmp_path, monkeypatch):
    """Every rank past the merge, then out of the gloo group (``process_group.leave_group``: a barrier, then the group
    destroyed), so that the CLI's entry ends it by ``os._exit`` (``process_group.leave``); a rank that failed leaves
    without waiting at a barrier the others may never reach."""
    import reelsearch.features.distributed_extract as de
    import reelsearch.process_group as process_group

    calls = []
    monkeypatch.setattr(process_group, "_group", {"left": False})
    monkeypatch.setattr(de, "_join_process_group", lambda timeout: calls.append("join") or True)
    monkeypatch.setattr(de.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(de.dist, "barrier", lambda: calls.append("barrier"))
    monkeypatch.setattr(de.dist, "destroy_process_group", lambda: calls.append("destroy"))
    collected = collect_jobs([media])
    cfg = ExtractConfig(workers=1, progress=False)
    run = de.extract_distributed(collected, tmp_path / "s", pipeline_of({"appearance": IndexExtractor()}), cfg, 0, 1,
                                 on_shard=lambda shard: calls.append("shard"))
    assert run.merged["added"] == {"appearance": 6}
    assert calls == ["join", "shard", "barrier", "barrier", "destroy"] and process_group._group["left"]

    def broken(*args, **kwargs):
        raise ReelsearchError("merge failed")

    calls.clear()
    monkeypatch.setattr(process_group, "_group", {"left": False})
    monkeypatch.setattr(de, "merge_shards", broken)
    with pytest.raises(ReelsearchError, match="merge failed"):
        de.extract_distributed(collected, tmp_path / "t", pipeline_of({"appearance": IndexExtractor()}), cfg, 0, 1)
    assert calls == ["join", "barrier", "destroy"] and process_group._group["left"]


def test_real_flickr_images_and_msrvtt_clips(tmp_path, real_extractors):
    images = shared_path("flickr8k", "images")
    clips = shared_path("msrvtt", "clips")
    jobs = collect_jobs(sorted(images.glob("*.jpg"))[:3] + [clips]).jobs
    chosen = {m: real_extractors[m] for m in ("appearance", "audio")}
    summary = run_extraction(jobs, tmp_path / "s", pipeline_of(chosen, sampling="interval:2"),
                             ExtractConfig(progress=False))
    assert not summary.errors and summary.added == {"appearance": 5, "audio": 1}
    s = FeatureStore(tmp_path / "s")
    assert s.get("appearance", "video9770").shape == (6, 1280)  # 0, 2, ..., 10 s of the 11 s clip
    assert s.get_meta("appearance", "video9770")["timestamps"] == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    # the stored (float16) features are lite0's features of the decoded image, within float16 rounding
    from reelsearch.media.decode import decode_frames

    first = jobs[0]
    want = real_extractors["appearance"].extract_frames(decode_frames(first.path, short_side=256).images)
    np.testing.assert_allclose(s.get("appearance", first.key), want, rtol=2e-3, atol=2e-3)
    assert s.get("audio", "video9770").shape[1] == 1024 and not s.has("audio", "video9771")

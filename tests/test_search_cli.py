"""`reelsearch index | search | annotate` on real generated media with a saved model directory."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from in_process import cli_here
from reelsearch.cli.main import app
from reelsearch.errors import ReelsearchError
from reelsearch.index.paths import display_path
from reelsearch.search import Searcher
from reelsearch.search.results import FrameScore, Match, SearchResult
from test_search_support import CAPTIONS, make_media, small_model

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    paths = sorted(make_media(root / "media"))
    model_dir = small_model("order").save(root / "model")
    runner = CliRunner()
    res = runner.invoke(app, ["index", str(root / "media"), "--index", str(root / "index"), "--model", str(model_dir),
                              "--quiet", "--no-speech", "--no-ocr"])
    assert res.exit_code == 0, res.output
    assert f"5 added, 0 updated, 0 removed, 0 unchanged, 0 failed; 5 in {root / 'index'}" in res.output
    return root, paths, model_dir, runner


def test_search_json_contract(setup):
    root, paths, model_dir, runner = setup
    res = runner.invoke(app, ["search", CAPTIONS[0], "--index", str(root / "index"), "-k", "3", "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    keys = ["id", "path", "name", "path_b64", "kind", "score", "moment", "frame", "duration", "moments", "taken_at",
            "taken_from"]
    assert len(got) == 3 and all(list(r) == keys for r in got)
    assert all(os.fsdecode(base64.b64decode(r["path_b64"])) == r["path"] for r in got)  # plain names: same path
    with Searcher(root / "index", str(model_dir)) as searcher:  # the model the index remembers (searcher.json)
        want = searcher.search(CAPTIONS[0], 3, frames=False)
    assert [(r["id"], r["path"], r["moment"]) for r in got] == [(r.id, r.path, r.moment) for r in want]
    assert [r["score"] for r in got] == pytest.approx([r.score for r in want])
    # each result's best segments (at most --moments, default 3), best first, the first holding the moment
    assert [[(m["start"], m["end"]) for m in r["moments"]] for r in got] == \
        [[(m.start, m.end) for m in r.moments] for r in want]
    assert [m["score"] for r in got for m in r["moments"]] == pytest.approx([m.score for r in want for m in r.moments])
    assert all(("confidence" in m) == (w.confidence is not None)  # never null in JSON
               for r, x in zip(got, want, strict=True) for m, w in zip(r["moments"], x.moments, strict=True))
    assert all(r["moments"][0]["start"] <= r["moment"] <= r["moments"][0]["end"] for r in got)


def test_search_json_hits_are_the_http_apis(setup):
    """`search --json` gives each hit as the HTTP API does (its fields but the page's frame strip and the server's
    links), and refuses a k the API refuses."""
    from fastapi.testclient import TestClient

    from reelsearch.service import create_app

    root, paths, model_dir, runner = setup
    res = runner.invoke(app, ["search", CAPTIONS[1], "--index", str(root / "index"), "-k", "4", "--json", "--local"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    with Searcher(root / "index", str(model_dir)) as searcher, TestClient(create_app(searcher)) as client:
        api = client.get("/search", params={"q": CAPTIONS[1], "k": 4}).json()["results"]
        assert client.get("/search", params={"q": CAPTIONS[1], "k": 101}).status_code == 422
    assert len(got) == len(api) == 4
    for hit, want in zip(got, api):
        want = {key: value for key, value in want.items() if key not in ("frames", "thumbnail", "media")}
        assert list(hit) == list(want) and {"kind", "duration", "name", "frame"} <= set(hit)
        assert hit["score"] == pytest.approx(want.pop("score")) and hit.pop("score") is not None
        assert [m.pop("score") for m in hit["moments"]] == pytest.approx([m.pop("score") for m in want["moments"]])
        assert hit == want
    res = runner.invoke(app, ["search", CAPTIONS[1], "--index", str(root / "index"), "-k", "101", "--json"])
    assert res.exit_code == 2 and "-k" in res.output


def test_search_human_readable(setup):
    root, paths, _, runner = setup
    res = runner.invoke(app, ["search", "a yellow flower", "--index", str(root / "index"), "-k", "10"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.rstrip("\n").splitlines()
    assert len(lines) == 5 and lines[0].startswith("  1. ")
    assert sorted(line.rsplit("  ", 1)[1] for line in lines) == sorted(map(str, paths))


def test_annotate_json(setup, tmp_path):
    root, paths, model_dir, runner = setup
    captions = tmp_path / "captions.txt"
    captions.write_text("\n".join(CAPTIONS) + "\n\n")
    res = runner.invoke(app, ["annotate", str(paths[0]), "--captions", str(captions), "--index", str(root / "index"),
                              "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    with Searcher(root / "index", str(model_dir)) as searcher:
        want = searcher.annotate(paths[0], CAPTIONS)
    assert [list(r) for r in got] == [["caption", "score"]] * len(CAPTIONS)
    assert [r["caption"] for r in got] == [r["caption"] for r in want]
    text = runner.invoke(app, ["annotate", str(paths[0]), "--captions", str(captions), "--index",
                               str(root / "index")])
    assert text.stdout.splitlines()[0].endswith(want[0]["caption"])


def test_reindex_reports_changes(setup, tmp_path):
    root, paths, model_dir, runner = setup
    (root / "media" / "sea.jpg").unlink()
    res = runner.invoke(app, ["index", str(root / "media"), "--index", str(root / "index"), "--quiet", "--no-speech",
                              "--no-ocr"])
    assert res.exit_code == 0 and "0 added, 0 updated, 1 removed, 4 unchanged, 0 failed; 4 in" in res.output
    bad = root / "media" / "broken.mp4"
    bad.write_bytes(b"not a video")
    res = runner.invoke(app, ["index", str(root / "media"), "--index", str(root / "index"), "--quiet", "--no-speech",
                              "--no-ocr"])
    assert res.exit_code == 3 and f"failed: {bad}" in res.output  # partial failure: 3 (0 ok, 2 bad input)
    bad.unlink()


def test_frames_per_second_is_remembered_and_a_new_rate_re_embeds(setup, tmp_path):
    root, _, model_dir, runner = setup
    media = tmp_path / "media"
    make_media(media)
    index = ["--index", str(tmp_path / "index"), "--quiet", "--no-speech", "--no-ocr"]
    res = runner.invoke(app, ["index", str(media), *index, "--model", str(model_dir), "--frames-per-second", "2"])
    assert res.exit_code == 0 and "5 added" in res.output, res.output
    with Searcher(tmp_path / "index", str(model_dir)) as searcher:  # the rate the index remembers
        assert searcher.frames_per_second == 2.0 and ";frames=2/s;" in searcher.model_id
        clip = searcher.catalog.find(media / "yellow.mp4")
        times = searcher.catalog.stored([clip])[clip].times
        assert list(times) == pytest.approx([0.0, 0.5, 1.0, 1.5], abs=0.06)  # a 2 s clip, every half second
    res = runner.invoke(app, ["index", str(media), *index])
    assert res.exit_code == 0 and "0 added, 0 updated, 0 removed, 5 unchanged" in res.output, res.output
    res = runner.invoke(app, ["index", str(media), *index, "--frames-per-second", "1"])
    assert res.exit_code == 0 and "frames=2/s" in res.output and "re-embedding every file" in res.output, res.output
    assert "0 added, 5 updated, 0 removed, 0 unchanged, 0 failed; 5 in" in res.output
    with Searcher(tmp_path / "index", str(model_dir)) as searcher:
        clip = searcher.catalog.find(media / "yellow.mp4")
        assert list(searcher.catalog.stored([clip])[clip].times) == pytest.approx([0.0, 1.0], abs=0.06)
    res = runner.invoke(app, ["index", str(media), *index, "--frames-per-second", "0"])
    assert res.exit_code == 2 and "--frames-per-second" in res.output


def test_a_failed_cue_is_reported_and_loses_nothing_else(tmp_path, monkeypatch):
    """The speech cue fails on one file: `index` lists it (file, cue, problem), exits 3, and keeps that file's visual
    entry and every other file's cues; the next run retries only that cue."""
    from reelsearch.errors import MediaError
    from reelsearch.features.speech import SpeechRecognizer

    paths = sorted(make_media(tmp_path / "media"))
    calls, broken = [], {"yellow.mp4"}

    def extract(self, path):
        calls.append(path)
        if Path(path).name in broken:
            raise MediaError(path, "audio stream is corrupt")
        return [], {"has_audio": False}

    monkeypatch.setattr(SpeechRecognizer, "extract", extract)
    model_dir = small_model("cosine").save(tmp_path / "model")
    args = ["index", str(tmp_path / "media"), "--index", str(tmp_path / "index"), "--model", str(model_dir), "--quiet",
            "--no-ocr"]
    res = CliRunner().invoke(app, args)
    yellow = next(p for p in paths if p.name == "yellow.mp4")
    assert res.exit_code == 3, res.output
    assert f"failed: {yellow}: speech: audio stream is corrupt" in res.output
    assert "5 added, 0 updated, 0 removed, 0 unchanged, 0 failed; speech/text: 5 extracted, 0 unchanged, 1 cue " \
           "failures; 5 in" in res.output and "note:" not in res.output
    with Searcher(tmp_path / "index", str(model_dir)) as searcher:
        vid = searcher.catalog.find(yellow)
        assert searcher.cues.runs(vid)["speech"].error and len(searcher.cues.video_ids()) == 5
    calls.clear()
    broken.clear()
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0 and calls == [str(yellow)] and "4 unchanged, 0 cue failures" in res.output


def test_a_failure_line_names_the_file_once(tmp_path, monkeypatch):
    """A file whose name is not UTF-8 fails its speech cue with an error that names it (as the media errors show a
    name): its line names it once."""
    from reelsearch.errors import MediaError
    from reelsearch.features.speech import SpeechRecognizer
    from reelsearch.media.decode import escaped_path as error_path

    make_media(tmp_path / "media")
    odd = Path(os.fsdecode(os.fsencode(tmp_path / "media") + b"/odd \xff.mp4"))
    (tmp_path / "media" / "yellow.mp4").rename(odd)

    def extract(self, path):
        if path == str(odd):
            raise MediaError(error_path(path), "file is empty (0 bytes)")
        return [], {"has_audio": False}

    monkeypatch.setattr(SpeechRecognizer, "extract", extract)
    model_dir = small_model("cosine").save(tmp_path / "model")
    res = CliRunner().invoke(app, ["index", str(tmp_path / "media"), "--index", str(tmp_path / "index"), "--model",
                                   str(model_dir), "--quiet", "--no-ocr"])
    assert res.exit_code == 3, res.output
    [line] = [x for x in res.output.splitlines() if x.startswith("failed: ")]
    assert line == f"failed: {display_path(odd)}: speech: file is empty (0 bytes)"


def test_errors_are_one_line_and_exit_2(setup, tmp_path):
    root, paths, model_dir, _ = setup
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, "-m", "reelsearch", "search", "   ", "--index", str(root / "index"), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == "error: the query is empty"
    missing = tmp_path / "none.txt"  # the same handling in this process (the real one is above)
    proc = cli_here("annotate", paths[0], "--captions", missing, "--index", root / "index")
    assert proc.returncode == 2 and str(missing) in proc.stderr and "Traceback" not in proc.stderr


def test_a_mistyped_folder_is_bad_input_and_makes_no_index(setup, tmp_path):
    root, paths, model_dir, _ = setup
    index = tmp_path / "index"
    proc = cli_here("index", root / "media", root / "meida", "--index", index, "--model", model_dir, "--no-speech",
                    "--no-ocr")
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr == f"error: {root / 'meida'}: no such file or folder\n"
    assert not index.exists()


@pytest.mark.parametrize("as_json", [False, True])
def test_a_closed_pipe_ends_search_quietly(setup, as_json):
    """`reelsearch search ... | head -1` where the reader is gone before the results are written: exit 0, nothing
    on stderr about the pipe (no traceback, no BrokenPipeError)."""
    root = setup[0]
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the search writes
    try:
        proc = subprocess.run([sys.executable, "-m", "reelsearch", "search", "a yellow flower", "--index",
                               str(root / "index"), "--local", *(["--json"] if as_json else [])], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr and "Exception" not in proc.stderr


def test_search_like_an_example(setup):
    """`search --like FILE | ID@SECONDS`, alone and with text: the Searcher's results, the example's file left out;
    bad examples are one-line errors with exit status 2."""
    root, paths, model_dir, runner = setup
    index = str(root / "index")
    with Searcher(root / "index", str(model_dir)) as searcher:
        clip_id, stored = searcher.catalog.find(paths[0]), len(searcher.catalog)  # earlier tests change the library
        for text, like in ((None, str(paths[0])), ("a yellow flower", f"{clip_id}@1.5")):
            want = searcher.search(text, 10, frames=False, like=like)
            res = runner.invoke(app, ["search", *([text] if text else []), "--like", like, "--index", index, "--json"])
            assert res.exit_code == 0, res.output
            got = json.loads(res.stdout)
            assert [r["id"] for r in got] == [r.id for r in want] and clip_id not in [r["id"] for r in got]
            assert [r["score"] for r in got] == pytest.approx([r.score for r in want])
            assert len(got) == stored - 1
            assert ("experts" in got[0]) == (text is not None)  # with text: each part's score
    res = runner.invoke(app, ["search", "--like", str(paths[0]), "--index", index])
    assert res.exit_code == 0 and len(res.stdout.splitlines()) == stored - 1
    # each bad example is a ReelsearchError, which `reelsearch` (cli.main.main) prints as "error: ..." with exit
    # status 2: the CLI's main in process checks that (test_errors_are_one_line_and_exit_2 runs the real process),
    # the runner the other examples' messages
    missing = root / "missing.mp4"
    proc = cli_here("search", "--like", missing, "--index", index)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.strip().startswith(f"error: {missing}: no such file"), proc.stderr
    for like, message in (("4242@1", "no indexed video with id 4242"),
                          (f"{clip_id}@60", f"video {clip_id}: 60 s is outside the video (0 to 3 s)")):
        res = runner.invoke(app, ["search", "--like", like, "--index", index])
        assert isinstance(res.exception, ReelsearchError) and res.stdout == "", res.output
        assert str(res.exception).startswith(message), res.exception


def test_default_index_location(setup, tmp_path):
    root, paths, model_dir, runner = setup
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    res = runner.invoke(app, ["index", str(paths[3]), "--model", str(model_dir), "--quiet", "--no-speech", "--no-ocr"],
                        env=env)
    assert res.exit_code == 0, res.output
    assert (tmp_path / "data" / "reelsearch" / "index" / "library.sqlite").is_file()
    res = runner.invoke(app, ["search", "a yellow flower", "--json"], env=env)
    assert [r["path"] for r in json.loads(res.stdout)] == [str(paths[3])]


def test_serve_answers_http(setup):
    import time

    import httpx

    from test_search_support import free_port

    root, paths, model_dir, _ = setup
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "reelsearch", "serve", "--index", str(root / "index"), "--port",
                             str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).json()
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()
                time.sleep(0.2)
        assert health["status"] == "ok" and health["videos"] >= 4 and health["mode"] == "scan"
        res = httpx.get(f"http://127.0.0.1:{port}/search", params={"q": "a yellow flower", "k": 2}, timeout=30)
        assert res.status_code == 200 and len(res.json()["results"]) == 2
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_on_a_busy_port_is_one_line_and_exit_2(setup):
    import socket

    root = setup[0]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "reelsearch", "serve", "--index", str(root / "index"), "--port",
                               str(port)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.splitlines() == [f"error: cannot listen on 127.0.0.1:{port}: Address already in use (choose "
                                        "another --port, or stop what listens there)"]


def test_search_needs_an_existing_index_and_annotate_does_not(setup, tmp_path):
    root, paths, model_dir, runner = setup
    res = runner.invoke(app, ["search", "a car", "--index", str(tmp_path / "nope")])
    assert res.exit_code != 0 and "no index here" in str(res.exception)
    assert not (tmp_path / "nope").exists()
    captions = tmp_path / "captions.txt"
    captions.write_text("a yellow flower\na red car\n")
    res = runner.invoke(app, ["annotate", str(paths[-1]), "--captions", str(captions), "--index",
                              str(tmp_path / "nope"), "--model", str(model_dir), "--json"])
    assert res.exit_code == 0, res.output
    assert sorted(r["caption"] for r in json.loads(res.stdout)) == ["a red car", "a yellow flower"]
    assert not (tmp_path / "nope").exists()


def test_a_result_as_json_is_every_field_with_none_left_out():
    """``SearchResult.to_json`` (built field by field) against ``dataclasses.asdict``: the same keys in the same
    order and the same values, the path in display form, highlights as lists; None parts left out."""
    full = SearchResult("7", "/v/caf\udce9.mp4", -0.25, 1.5, 1, 3.0,
                        [FrameScore(0, 0.0, 0.1), FrameScore(1, 1.5, 0.3)], {"visual": 0.2, "speech": 0.4},
                        Match("speech", 1.0, 2.0, "a dog runs", 0.5, "keyword", 1.2, [(2, 5)]), 0.8, None)
    bare = SearchResult("8", "/v/b.jpg", 0.1, 0.0, 0, None)
    for r in (full, bare):
        want = {k: v for k, v in dataclasses.asdict(r).items()
                if not (v is None and SearchResult.__dataclass_fields__[k].default is None)}
        want["path"] = display_path(r.path)
        if r.match is not None:
            want["match"]["highlights"] = [list(h) for h in r.match.highlights]
        got = r.to_json()
        assert got == want and list(got) == list(want)
        assert json.loads(json.dumps(got)) == got
    assert "unavailable" not in full.to_json() and bare.to_json()["kind"] == "image" and "frames" not in bare.to_json()

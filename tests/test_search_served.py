"""`reelsearch search` asks a running `reelsearch serve` over the same library (its advert, ``reelsearch.served``):
the same output as a search in process, without importing torch; stale adverts are ignored, --local and requests the
server cannot answer search in process, and the advert goes when the server stops."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reelsearch.cli.main import app
from reelsearch.served import ADVERT_NAME, advert_path, library_key, live_advert, refusal, remove_advert, write_advert
from test_search_support import CAPTIONS, cli_indexed

ANSWERED = "answered by the reelsearch serve"


def reelsearch(*args: str, python: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess, float, float]:
    """(the finished ``python PYTHON -m reelsearch ARGS``, its wall seconds, its CPU seconds)."""
    start, cpu = time.perf_counter(), _children_cpu()
    done = subprocess.run([sys.executable, *python, "-m", "reelsearch", *args], capture_output=True, text=True,
                          timeout=300)
    return done, time.perf_counter() - start, _children_cpu() - cpu


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def search(index: Path, *args: str) -> subprocess.CompletedProcess:
    done = reelsearch("-v", "search", *args, "--index", str(index))[0]
    assert done.returncode == 0, done.stderr
    return done


def search_here(index: Path, *args: str, local: bool = True):
    """``reelsearch -v search ARGS --local`` in this process (the CLI's own command, as a real process runs it: the
    same stdout and stderr lines, without paying Python's and torch's start again for every comparison); without
    ``--local`` (``local=False``) the command asks a running server first, as it does in a process whose entry point
    could not ask (a refusal, a stale advert: the same ``served_answer``; real processes ask above and below)."""
    done = CliRunner().invoke(app, ["-v", "search", *args, "--index", str(index), *(["--local"] if local else [])])
    assert done.exit_code == 0, done.output
    return done


def start_serve(index: Path) -> subprocess.Popen:
    """``reelsearch serve`` over ``index`` on a free port, once its advert says it listens."""
    proc = subprocess.Popen([sys.executable, "-m", "reelsearch", "serve", "--index", str(index), "--port", "0",
                             "--no-access-log"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while live_advert(index) is None or live_advert(index)["pid"] != proc.pid:
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.2)
    return proc


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    model_dir = cli_indexed(root, "order")
    proc = start_serve(root / "index")
    yield root, model_dir, proc
    proc.terminate()
    proc.wait(timeout=60)


def test_the_advert_says_what_is_served(served):
    root, model_dir, proc = served
    advert = json.loads((root / "index" / ADVERT_NAME).read_text())
    assert advert["pid"] == proc.pid and advert["host"] == "127.0.0.1" and advert["port"] > 0
    assert advert["library"] == os.path.realpath(root / "index") and advert["model"] == os.path.realpath(model_dir)
    assert advert["model_option"] is None and advert["model_id"].startswith("torabi-m1@")
    assert advert["text_encoder"] == "auto" and advert["weights"] is None and advert["media_roots"] == []


@pytest.mark.parametrize("args", [[CAPTIONS[0], "-k", "3"], ["a red car", "--kind", "video", "--moments", "1"],
                                  ["a car", "--like", "2"], ["kind:image", "--duration", "<1"]])
def test_the_server_answers_as_a_search_in_process_would(served, args):
    root, _, _ = served
    index = root / "index"
    asked, local = search(index, *args), search_here(index, *args)
    assert ANSWERED in asked.stderr and ANSWERED not in local.stderr
    assert asked.stdout == local.stdout and asked.stdout.strip()
    asked_json, local_json = search(index, *args, "--json"), search_here(index, *args, "--json")
    assert ANSWERED in asked_json.stderr
    got, want = json.loads(asked_json.stdout), json.loads(local_json.stdout)
    assert [list(r) for r in got] == [list(r) for r in want] and [r["id"] for r in got] == [r["id"] for r in want]
    assert [r["score"] for r in got] == pytest.approx([r["score"] for r in want])
    assert [r["path_b64"] for r in got] == [r["path_b64"] for r in want]
    assert [[(m["start"], m["end"]) for m in r["moments"]] for r in got] == \
        [[(m["start"], m["end"]) for m in r["moments"]] for r in want]
    notes = [line for line in asked_json.stderr.splitlines() if not line.startswith(ANSWERED)]
    assert notes == [line for line in local_json.stderr.splitlines()]  # "filtered: ..." alike


def test_asking_imports_no_torch_and_is_quick(served):
    root, _, _ = served
    done = reelsearch("search", "a yellow flower", "--index", str(root / "index"), python=("-X", "importtime"))[0]
    assert done.returncode == 0, done.stderr
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time")}
    assert "reelsearch.served" in imported
    assert not {m for m in imported if m.split(".")[0] in ("torch", "numpy", "onnxruntime", "typer", "click")}
    timed = [reelsearch("search", "a yellow flower", "--index", str(root / "index"))[1:] for _ in range(3)]
    # wall about 0.5 s on an idle machine, 1-2 s under a load of 10 on 2 cores (docs/benchmarks.md): generous bounds
    assert min(wall for wall, _ in timed) < 4 and min(cpu for _, cpu in timed) < 1.2, timed


def test_what_the_server_cannot_answer_is_searched_here(served, tmp_path):
    root, model_dir, _ = served
    index = root / "index"
    shutil.copytree(model_dir, tmp_path / "model")
    local = search(index, "a yellow flower", "--local")  # a real process told to search here
    assert ANSWERED not in local.stderr and local.stdout == search(index, "a yellow flower").stdout
    for args, why in [(["--weights", "visual=1"], "--weights are the server's own"),
                      (["--model", str(tmp_path / "model")], "it runs the model"),
                      (["--like", str(root / "media" / "sea.jpg")], "--like names a file")]:
        asked = search_here(index, "a yellow flower", *args, local=False)
        assert why in asked.stderr and ANSWERED not in asked.stderr
        assert asked.stdout == search_here(index, "a yellow flower", *args).stdout
    res = reelsearch("-v", "search", "a car", "-k", "500", "--index", str(index))[0]  # beyond the API's k: refused
    assert res.returncode == 2 and "-k" in res.stderr and ANSWERED not in res.stderr and res.stdout == ""
    res = reelsearch("search", "a car", "--like", "99", "--index", str(index))[0]  # the server's 404: the local error
    assert res.returncode == 2 and "no indexed video with id 99" in res.stderr


def test_stale_adverts_are_ignored(served, tmp_path):
    root, _, proc = served
    copy = tmp_path / "copy"
    shutil.copytree(root / "index", copy)  # the advert came along: another library
    assert live_advert(copy) is None and (copy / ADVERT_NAME).is_file()
    done = search_here(copy, "a yellow flower", local=False)
    assert ANSWERED not in done.stderr and done.stdout == search(root / "index", "a yellow flower").stdout
    advert = json.loads((copy / ADVERT_NAME).read_text())
    advert["library"] = library_key(copy)
    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()
    (copy / ADVERT_NAME).write_text(json.dumps(advert | {"pid": gone.pid}))  # its process is gone: removed
    assert ANSWERED not in search_here(copy, "a yellow flower", local=False).stderr
    assert not (copy / ADVERT_NAME).exists()
    (copy / ADVERT_NAME).write_text(json.dumps(advert | {"pid": os.getpid(), "port": 9}))  # alive, not listening
    start = time.perf_counter()
    done = search_here(copy, "a yellow flower", local=False)
    assert "no answer from 127.0.0.1:9" in done.stderr and (copy / ADVERT_NAME).exists()
    assert time.perf_counter() - start < 120


def test_the_advert_goes_when_the_server_stops(served, tmp_path):
    root, _, _ = served
    index = tmp_path / "index"
    shutil.copytree(root / "index", index, ignore=shutil.ignore_patterns(ADVERT_NAME))
    proc = start_serve(index)
    assert advert_path(index).is_file()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert not advert_path(index).exists()
    done = search_here(index, "a yellow flower", local=False)
    assert ANSWERED not in done.stderr and re.match(r"  1\. ", done.stdout)


def test_a_postgresql_catalogs_advert_is_in_the_cache_folder(monkeypatch, tmp_path):
    """Keyed by a hash of the URL, no password in it; written, found and removed without a server."""
    monkeypatch.setenv("REELSEARCH_CACHE_DIR", str(tmp_path / "cache"))
    url, other = "postgresql://me:s3cret@db.example/videos", "postgresql://me:s3cret@db.example/films"
    path = write_advert(url, "0.0.0.0", 8123, model_option=None, model="default", model_id="m@1", text_encoder="auto",
                        weights=None, media_roots=[], api_key=False)
    assert path == advert_path(url) and path.parent == tmp_path / "cache" / "serve" and advert_path(other) != path
    assert "s3cret" not in path.read_text() and "s3cret" not in path.name
    advert = live_advert(url)
    assert advert["host"] == "127.0.0.1" and advert["port"] == 8123 and advert["library"] == library_key(url)
    assert refusal(advert, model=None, text_encoder="auto", weights=None, media_roots=[]) is None
    assert "model" in refusal(advert, model="other-model", text_encoder="auto", weights=None, media_roots=[])
    assert "--media-root" in refusal(advert, model=None, text_encoder="auto", weights=None, media_roots=["/a=/b"])
    assert "--text-encoder auto" in refusal(advert, model=None, text_encoder="static", weights=None, media_roots=[])
    assert live_advert(other) is None
    remove_advert(url)
    assert not path.exists() and live_advert(url) is None

"""FeatureStore crash safety: a writer killed (kill -9) mid-way loses only uncommitted items; resume completes it."""

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

from reelsearch.features.store import FeatureStore

N_ITEMS = 120
COMMIT_EVERY = 8

# The writer a test runs in a subprocess: deterministic items, so any run can be compared with an uninterrupted one.
WRITER = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    from reelsearch.features.store import FeatureStore

    def item(i):
        rng = np.random.default_rng(i)
        return rng.standard_normal((1 + i % 7, 16)).astype(np.float32)

    root, n, commit_every, delay, crash_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), \\
        int(sys.argv[5])
    if crash_at:  # die abruptly (as kill -9 would) at the crash_at-th atomic rename
        real_replace, calls = os.replace, [0]
        def dying_replace(src, dst):
            calls[0] += 1
            if calls[0] == crash_at:
                os._exit(137)
            real_replace(src, dst)
        os.replace = dying_replace
    store = FeatureStore(root)
    with store.writer("appearance", 16, commit_every=commit_every) as w:
        for i in range(n):
            key = f"video{i}"
            if w.done(key):
                continue
            w.add(key, item(i), {"i": i, "timestamps": [0.5 * t for t in range(1 + i % 7)]})
            time.sleep(delay)
            if len(sys.argv) > 6 and i % 40 == 39:  # compact now and then, as a finished extraction would
                w.commit()
                w.close()
                store.finalize("appearance")
                w = store.writer("appearance", 16, commit_every=commit_every)
        w.close()
    """
)


def item(i: int) -> np.ndarray:
    return np.random.default_rng(i).standard_normal((1 + i % 7, 16)).astype(np.float32)


def run_writer(script: Path, root: Path, delay: float = 0.0, crash_at: int = 0, wait: bool = True, compact=False):
    args = [sys.executable, str(script), str(root), str(N_ITEMS), str(COMMIT_EVERY), str(delay), str(crash_at)]
    args += ["compact"] if compact else []
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if wait:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == (137 if crash_at else 0), err.decode()
    return proc


def assert_complete(root: Path, reference: FeatureStore) -> None:
    store = FeatureStore(root)
    assert store.keys("appearance") == reference.keys("appearance")
    for key in reference.keys("appearance"):
        np.testing.assert_array_equal(store.get_raw("appearance", key), reference.get_raw("appearance", key))
        assert store.get_meta("appearance", key) == reference.get_meta("appearance", key)
    manifest = json.loads((root / "appearance" / "manifest.json").read_text())
    on_disk = {p.name.split(".")[0] for p in (root / "appearance" / "segments").iterdir()}
    assert on_disk == set(manifest["segments"])  # crash leftovers were cleaned up
    assert sorted(p.name for p in (root / "appearance").iterdir()) == [".lock", "manifest.json", "segments"]


def assert_committed_prefix(root: Path) -> int:
    """Every item the store shows is whole and equal to what was written; returns how many there are."""
    store = FeatureStore(root)
    keys = store.keys("appearance") if "appearance" in store.modalities() else []
    assert keys == [f"video{i}" for i in range(len(keys))]
    assert len(keys) % COMMIT_EVERY == 0  # only whole commits survive
    for i, key in enumerate(keys):
        np.testing.assert_array_equal(store.get("appearance", key), item(i).astype(np.float16).astype(np.float32))
        assert store.get_meta("appearance", key)["i"] == i
    return len(keys)


@pytest.fixture(scope="module")
def writer_setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("crash")
    script = base / "writer.py"
    script.write_text(WRITER)
    run_writer(script, base / "reference")
    return script, FeatureStore(base / "reference")


def test_kill_9_mid_way_then_resume(writer_setup, tmp_path):
    script, reference = writer_setup
    assert len(reference.keys("appearance")) == N_ITEMS
    root = tmp_path / "store"
    proc = run_writer(script, root, delay=0.02, wait=False)
    manifest = root / "appearance" / "manifest.json"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait for a few commits, then kill without warning
        if manifest.exists() and json.loads(manifest.read_text())["generation"] >= 3:
            break
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    survived = assert_committed_prefix(root)
    assert 3 * COMMIT_EVERY <= survived < N_ITEMS
    run_writer(script, root)  # resume: skips what is committed, writes the rest
    assert_complete(root, reference)


@pytest.mark.parametrize("crash_at", [1, 2, 3, 6])
def test_crash_at_each_step_of_a_commit(writer_setup, tmp_path, crash_at):
    """Renames per commit: 1 rows .npy, 2 segment .json, 3 manifest (the commit point); 4-6 the second commit."""
    script, reference = writer_setup
    root = tmp_path / "store"
    FeatureStore(root)  # created beforehand so that the writer's renames are all commit steps
    run_writer(script, root, crash_at=crash_at)
    assert assert_committed_prefix(root) == (0 if crash_at <= 3 else COMMIT_EVERY)
    segment_files = {1: 1, 2: 2, 3: 2, 6: 4}[crash_at]  # a temporary .npy; + its .json (tmp); + committed ones
    assert len(list((root / "appearance" / "segments").iterdir())) == segment_files
    run_writer(script, root)
    assert_complete(root, reference)


def test_reading_while_another_process_writes_and_compacts(writer_setup, tmp_path):
    script, reference = writer_setup
    root = tmp_path / "store"
    proc = run_writer(script, root, delay=0.004, wait=False, compact=True)
    reader = FeatureStore(root)
    seen, rounds = 0, 0
    while proc.poll() is None or rounds == 0:
        rounds += 1
        reader.refresh()
        if "appearance" not in reader.modalities():
            continue
        keys = reader.keys("appearance")
        assert keys == [f"video{i}" for i in range(len(keys))]
        for key in keys[-COMMIT_EVERY:] + keys[:2]:  # newest and oldest: both must read back whole
            i = int(key[5:])
            np.testing.assert_array_equal(reader.get("appearance", key), item(i).astype(np.float16).astype(np.float32))
        seen = max(seen, len(keys))
    assert proc.returncode == 0, proc.stderr.read().decode()
    assert rounds > 3 and seen > 0
    assert_complete(root, reference)

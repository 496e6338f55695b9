"""reelsearch.onnx_runtime's cached optimised graphs: the first session of a graph saves it optimised, later sessions
load that (the same outputs), a damaged one is made again, another level has its own, and "off" saves none."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from reelsearch import onnx_runtime  # noqa: E402
from reelsearch.onnx_runtime import optimized_path, optimized_session  # noqa: E402


def _graph(path: Path) -> Path:
    """x [N, 4] -> relu(x @ W + b) @ W2: a MatMul + Add that the optimiser fuses."""
    rng = np.random.default_rng(0)
    w, b, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((4, 8), (8,), (8, 3)))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
                              [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (b, "b"), (w2, "w2"))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


X = np.linspace(-2, 2, 20, dtype=np.float32).reshape(5, 4)


def _run(session) -> np.ndarray:
    return session.run(None, {"x": X})[0]


def test_the_optimised_graph_is_saved_once_and_loaded_with_the_same_outputs(tmp_path, monkeypatch):
    monkeypatch.delenv(onnx_runtime.OPTIMIZATION_ENV, raising=False)
    path = _graph(tmp_path / "g.onnx")
    want = _run(onnx_runtime.session(path, onnx_runtime.session_options(1)))
    first = optimized_session(path, 1)
    cached = optimized_path(path, "all")
    assert cached.is_file() and cached.parent == tmp_path and cached != path
    made = cached.stat().st_mtime_ns
    loads = []
    real = onnx_runtime.session
    monkeypatch.setattr(onnx_runtime, "session", lambda file, options: loads.append(Path(file)) or real(file, options))
    second = optimized_session(path, 1)
    assert loads == [cached] and cached.stat().st_mtime_ns == made  # read, not optimised again
    np.testing.assert_allclose(_run(first), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(_run(second), want, rtol=1e-6, atol=1e-6)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, cached.name])  # no temporary left


def test_levels_and_graphs_have_their_own_cache_and_off_has_none(tmp_path, monkeypatch):
    path = _graph(tmp_path / "g.onnx")
    monkeypatch.setenv(onnx_runtime.OPTIMIZATION_ENV, "off")
    optimized_session(path, 1)
    assert [p.name for p in tmp_path.iterdir()] == ["g.onnx"]
    monkeypatch.setenv(onnx_runtime.OPTIMIZATION_ENV, "basic")
    optimized_session(path, 1)
    basic = optimized_path(path, "basic")
    assert basic.is_file() and basic != optimized_path(path, "all")
    _graph(path)  # the graph made again (a new file): its optimised graph too, the old one removed
    optimized_session(path, 1)
    assert optimized_path(path, "basic").is_file() and not basic.exists()


def test_a_damaged_optimised_graph_is_made_again(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv(onnx_runtime.OPTIMIZATION_ENV, raising=False)
    path = _graph(tmp_path / "g.onnx")
    optimized_session(path, 1)
    cached = optimized_path(path, "all")
    cached.write_bytes(b"not a graph")
    want = _run(onnx_runtime.session(path, onnx_runtime.session_options(1)))
    np.testing.assert_allclose(_run(optimized_session(path, 1)), want, rtol=1e-6, atol=1e-6)
    assert f"{cached}: cannot load" in caplog.text and cached.stat().st_size > 100


def test_a_read_only_folder_still_serves(tmp_path, monkeypatch):
    monkeypatch.delenv(onnx_runtime.OPTIMIZATION_ENV, raising=False)
    path = _graph(tmp_path / "g.onnx")

    def refuse(*args, **kwargs):
        raise PermissionError("read-only")

    monkeypatch.setattr(onnx_runtime, "atomic_path", refuse)
    assert _run(optimized_session(path, 1)).shape == (5, 3)
    assert not optimized_path(path, "all").exists()


class _Slow(torch.nn.Module):
    """A module whose tracing takes a while: two exports from two threads overlap."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(scale))

    def forward(self, x):
        time.sleep(0.3)
        return torch.relu(x * self.scale).sum(dim=1, keepdim=True)


def test_two_threads_export_at_once_and_both_graphs_run(tmp_path):
    """A cold-cache index exports its two CNNs from two threads at once; torch.onnx's exporter keeps global state
    (once: "GLOBALS.in_onnx_export must be True" and one CNN fell back to torch): exports take turns, both run."""
    errors, paths = [], [tmp_path / f"m{i}.onnx" for i in range(3)]

    def export(i: int) -> None:
        try:
            onnx_runtime.export_graph(_Slow(i + 1.0), (torch.ones(1, 4),), paths[i], True, ["x"], ["y"],
                                      {"x": {0: "n"}, "y": {0: "n"}})
        except Exception as exc:  # noqa: BLE001 - collected, asserted below
            errors.append(f"{i}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=export, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    x = np.array([[1.0, -2.0, 3.0, 0.5]], np.float32)
    for i, path in enumerate(paths):
        got = onnx_runtime.session(path, onnx_runtime.session_options(1)).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, [[4.5 * (i + 1)]], rtol=1e-5)

"""The package's import graph: no cycles, and every import goes down the declared layers (docs/architecture.md).

Every import counts, including those inside functions and under ``TYPE_CHECKING`` (a cycle or an upward reach hidden
by a function-local import is still one of responsibilities).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "reelsearch"

#: reelsearch's layers, top to bottom, by top-level package or module ("" is the package root: ``__version__`` and
#: the public names, which it resolves by name on first use, so it imports nothing of reelsearch itself). A module may
#: import its own top-level package and the layers below its own; packages on one row never import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__main__",),  # python -m reelsearch
    ("cli",),  # the command line
    ("service", "api"),  # the HTTP service; the Python API
    ("indexing",),  # fill a library: its location and model, folders, Ray workers, watch (on search's Searcher)
    ("search", "training"),  # the two products' orchestration: search a library; train / tune / fuse
    ("index",),  # the catalog: media, frames, vectors, cues
    ("models", "losses"),  # encoders, joint spaces, mixtures, querybank; ranking losses
    ("features", "mc"),  # extractors, FeatureStore, pipelines, cues; the multiple-choice test
    ("config",),  # typed configs and feature recipes, and the names they may use (config.names)
    ("media", "datasets", "text", "towers", "evaluation"),  # decoding; readers; word and token features; CLIP-family
    # checkpoints' towers (hf:NAME_OR_DIR); metrics
    ("similarity", "scoring"),  # S(c, v); what ranking needs at run time: score matrices, fusion, calibration curve
    ("onnx_runtime", "served"),  # ONNX Runtime sessions and their cached optimised graphs (atomic files: on io); a
    # running serve's advert and asking it (standard library only: the CLI asks before importing anything heavy)
    ("io", "cache", "extras", "location", "display", "process_group", "memory"),  # atomic files, the cache folder,
    # optional packages; where a library is; paths, clocks and search results as text (these two: standard library
    # only); leaving a torch process group; freed memory returned (standard library only)
    ("errors", ""),  # the errors every layer raises; the package root
)


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """{module: reelsearch modules it imports} (``from a.b import c`` counts a.b.c when it is a module, else a.b)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name and t.startswith("reelsearch"):
                    graph[name].add(t)
    return graph


def layer_of(module: str) -> tuple[int, str]:
    """(row in LAYERS, top-level package) of a ``reelsearch...`` module; KeyError for a package no row lists."""
    top = module.split(".")[1] if "." in module else ""
    for row, names in enumerate(LAYERS):
        if top in names:
            return row, top
    raise KeyError(top)


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import that does not go down the layers: to a higher row, or across one row to another package, and
    every module whose top-level package has no row."""
    out = []
    for module, targets in sorted(graph.items()):
        try:
            row, top = layer_of(module)
        except KeyError:
            out.append(f"{module}: its package {module.split('.')[1]!r} is in no layer of LAYERS")
            continue
        for target in sorted(targets):
            t_row, t_top = layer_of(target)
            if t_row < row or (t_row == row and t_top != top):
                out.append(f"{module} (layer {row}) imports {target} (layer {t_row})")
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_graph_reader_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    graph = import_graph()
    # a package's relative import of its module
    assert "reelsearch.models.encoders.sequence" in graph["reelsearch.models.encoders"]
    assert "reelsearch.config.recipe" in graph["reelsearch.features.pipeline"]


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_layer_check_reports_an_upward_or_sideways_import():
    legal = {"reelsearch.models.joint": {"reelsearch.models.parts", "reelsearch.config.schema", "reelsearch.errors"},
             "reelsearch.cli.main": {"reelsearch"}, "reelsearch.similarity": {"reelsearch.errors"}}
    assert layer_violations(legal) == []
    assert layer_violations({"reelsearch.config.recipe": {"reelsearch.features.extractors"}}) == [
        "reelsearch.config.recipe (layer 8) imports reelsearch.features.extractors (layer 7)"]
    assert layer_violations({"reelsearch.losses.base": {"reelsearch.models.joint"}}) == [
        "reelsearch.losses.base (layer 6) imports reelsearch.models.joint (layer 6)"]  # one row, two packages
    assert layer_violations({"reelsearch.plugins.x": {"reelsearch.errors"}}) == [
        "reelsearch.plugins.x: its package 'plugins' is in no layer of LAYERS"]


def test_every_import_goes_down_the_layers():
    graph = import_graph()
    assert {layer_of(m)[1] for m in graph} == {name for row in LAYERS for name in row}  # no row names a ghost
    found = layer_violations(graph)
    assert not found, "imports against the layers (docs/architecture.md):\n" + "\n".join(found)


def test_run_time_code_takes_nothing_from_evaluation():
    """Models, the catalog, search, indexing and the service rank with ``reelsearch.scoring``; the metrics
    (``reelsearch.evaluation``) are for training and ``reelsearch eval``/``metrics`` only."""
    run_time = ("models", "index", "search", "indexing", "service", "api")
    found = [f"{module} imports {target}" for module, targets in sorted(import_graph().items())
             if layer_of(module)[1] in run_time for target in sorted(targets) if layer_of(target)[1] == "evaluation"]
    assert not found, "\n".join(found)

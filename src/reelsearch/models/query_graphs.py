"""A model's text side as ONNX Runtime graphs, run without torch: what a cold search encodes its query with.

For a model whose experts read MiniLM's token features (float32, as trained; a tuned tail and a tower cut short in
its export), a caption's embedding is MiniLM (its cached export, ``reelsearch.text.minilm_onnx``) and, per expert,
the text tower over those features (the text encoder and the projection: for the bundled model a mean, a linear
map, L2 norm). When the torch model is loaded anyway (indexing, a search that loads it), each expert's tower is
exported once to ONNX
(``reelsearch.models.query_export``: ``<cache>/onnx/tower-<key>.onnx``, keyed by a hash of its weights), and a
manifest naming the graphs is written beside them, keyed by the model folder's files (path, size, modification time)
and the torch and onnxruntime versions. :meth:`QueryGraphs.open` reads it and runs the graphs: tokenise with the
folder's ``tokenizer.json`` (``reelsearch.text.minilm_folder``), MiniLM, each tower, the experts' embeddings side by
side, as ``model.encode_text`` gives them (within float rounding). It imports neither torch nor the model classes;
where the manifest or a graph is missing or fails, ``open`` gives None (the caller loads the torch model).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np

from reelsearch import onnx_runtime as _ort
from reelsearch.cache import cache_root
from reelsearch.errors import EMPTY_QUERY, QueryError
from reelsearch.text.minilm_onnx import MiniLMSession, files_digest, torch_version

logger = logging.getLogger(__name__)

FORMAT = "reelsearch.query-graphs"
VERSION = 2  # bump when the graphs or the manifest change, so old ones are not used (2: the student's, "serving")
#: The tower graph's inputs: MiniLM's token features (zero at padding) and the attention mask; its output.
TOWER_INPUTS = ("features", "mask")
TOWER_OUTPUT = "embedding"


def graphs_dir() -> Path:
    """Where the exported graphs and their manifests live (beside MiniLM's exports)."""
    return cache_root() / "onnx"


def manifest_path(folder: str | Path) -> Path:
    """The manifest of the model folder ``folder``'s query graphs: keyed by its files (path, size, modification
    time), the torch and onnxruntime versions and ``VERSION``."""
    import onnxruntime  # noqa: PLC0415 - optional package (text extra)

    digest = hashlib.sha256(f"{FORMAT}|{VERSION}|{torch_version()}|{onnxruntime.__version__}".encode())
    files_digest(digest, sorted(p for p in Path(folder).resolve().rglob("*") if p.is_file()))
    return graphs_dir() / f"query-{digest.hexdigest()[:24]}.json"


class QueryGraphs:
    """The text side of a model folder in ONNX Runtime: ``encode_text(texts)`` -> [N, sum of the experts' D],
    float32, each expert's rows of unit norm; ``experts``: their names in order, ``fingerprint``: the model's
    (``model.fingerprint()``), ``manifest``: what the export wrote."""

    def __init__(self, manifest: dict, threads: int | None = None):
        self.manifest = manifest
        self.fingerprint = str(manifest["fingerprint"])
        self.experts = [str(e["name"]) for e in manifest["experts"]]
        #: {text encoder: (its MiniLM session, its experts' tower sessions)}: float32 MiniLM, and the model's student
        #: text encoder where it has one (``reelsearch.models.student_text``)
        self.encoders = {"float32": _sessions(manifest, threads)}
        self.minilm = self.encoders["float32"][0]
        if "student" in manifest:
            self.encoders["student"] = _sessions(manifest["student"], threads)

    @classmethod
    def open(cls, folder: str | Path, threads: int | None = None) -> QueryGraphs | None:
        """The query graphs of the model folder ``folder`` (None, with a log line, when they were not exported for
        its files as they are now, or cannot be loaded)."""
        path = None
        try:
            path = manifest_path(folder)
            if not path.is_file():  # (not exported yet, or a model they cannot serve: loaded in torch)
                return None
            manifest = json.loads(path.read_text(encoding="utf-8"))
            if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
                return None
            return cls(manifest, threads)
        except Exception as exc:  # noqa: BLE001 (a missing package, a damaged file: the torch model encodes)
            logger.warning("reelsearch: the query graphs of %s cannot run (%s: %s); loading the model in torch (and "
                           "exporting them again)", folder, type(exc).__name__, exc)
            if path is not None:
                path.unlink(missing_ok=True)
            return None

    def encode_text(self, texts, encoder: str = "float32") -> np.ndarray:
        """Caption embeddings [N, D] of ``texts`` by ``encoder`` (one of ``encoders``): the experts' side by side
        (QueryError for a blank text)."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        if not texts or any(not isinstance(t, str) or not t.strip() for t in texts):
            raise QueryError(EMPTY_QUERY)
        minilm, towers = self.encoders[encoder]
        features, mask = minilm.states(texts)
        rows = [tower.run(None, {"features": features, "mask": mask})[0] for tower in towers]
        return np.concatenate(rows, axis=1).astype(np.float32, copy=False)


def _sessions(side: dict, threads: int | None) -> tuple[MiniLMSession, list]:
    """(the MiniLM session, each expert's tower session) of a manifest's text side (``"minilm"``, ``"experts"``)."""
    minilm = side["minilm"]
    return (MiniLMSession.shared(graphs_dir() / minilm["graph"], Path(minilm["folder"]), threads),
            [_ort.optimized_session(graphs_dir() / e["graph"], threads) for e in side["experts"]])

"""A model folder searched without torch: the model interface (``reelsearch.models.interface``) that a search of an
index needs, for a model searched by inner product whose query graphs are cached (``reelsearch.models.query_graphs``).

A cold ``reelsearch search`` (``reelsearch.indexing.open_searcher(..., cold=True)``) opens this instead of the torch
model: the query is encoded by the graphs, the scores are the experts' inner products fused by their weights (what
``JointModel`` and ``MixtureOfExperts`` compute in numpy for such a model), the querybank and the calibrations (the
model's, its student's) are read from the folder, and the fingerprint and feature recipes come from the manifest the
export wrote. What needs the torch model (embedding media: indexing, a query by an unindexed file; a text encoder
other than float32 MiniLM and the model's student, whose graphs the export holds too) loads it: the Searcher
replaces this model by it (``Searcher.full_model``).
"""

from __future__ import annotations

import logging
from importlib.resources import files
from pathlib import Path

import numpy as np

from reelsearch.config.recipe import ModalityRecipe
from reelsearch.config.schema import FusionKind, Normalize
from reelsearch.config.typed import from_dict, to_dict
from reelsearch.errors import ConfigError
from reelsearch.features.pipeline import FeaturePipeline
from reelsearch.scoring.fusion import fuse_experts

from .calibration import Calibration, encoder_calibration, entry_path, read_json_object
from .embeddings import SearchMode, as_rows, split_rows
from .query_graphs import QueryGraphs
from .querybank import QueryBank

logger = logging.getLogger(__name__)

#: Name that resolves to the model bundled with the package (src/reelsearch/assets/default-model/).
DEFAULT_MODEL = "default"


def bundled_model_dir() -> Path:
    """Where the package keeps its bundled model (``reelsearch.models.checkpoint.default_model_dir`` checks it)."""
    return Path(str(files("reelsearch") / "assets" / "default-model"))


def model_folder(path: str | Path) -> Path | None:
    """The model folder ``path`` names when it is one (``"default"``: the bundled model's, unless such a folder
    exists here); None otherwise (a training run, ``hf:...``: the torch model resolves those)."""
    if str(path) == DEFAULT_MODEL and not Path(path).exists():
        return bundled_model_dir()
    folder = Path(path)
    return folder if (folder / "reelsearch.json").is_file() else None


class QueryModel:
    """The search side of the model folder ``folder`` by its query graphs (see the module docstring); ``open``
    gives None where they cannot serve."""

    static_text = None
    card = None
    text_encoder_name = "float32"
    search_mode = SearchMode.ANN
    inner_product = True
    exhaustive = False

    def __init__(self, folder: Path, graphs: QueryGraphs):
        manifest = graphs.manifest
        self.folder, self.graphs = folder, graphs
        self.name = str(manifest["name"])
        self._fingerprint = graphs.fingerprint
        self.experts = {e["name"]: int(e["dim"]) for e in manifest["experts"]}
        self.widths = {e["name"]: (int(e["dim"]), int(e["row_dim"])) for e in manifest["experts"]}
        self.weights = {k: float(w) for k, w in manifest["weights"].items()}
        self.row_dim = sum(w for _, w in self.widths.values())
        self.recipes = {n: from_dict(ModalityRecipe, r, str(folder), n) for n, r in manifest["recipes"].items()}
        parts = {p["kind"]: p for p in read_json_object(folder / "reelsearch.json").get("parts", [])}
        self.querybank = QueryBank.load(folder, parts["querybank"]) if "querybank" in parts else None
        self.calibration = Calibration.load(folder, parts["calibration"]) if "calibration" in parts else None
        student = parts.get("student-text")
        self.student_calibration = encoder_calibration(entry_path(folder, student)) if student else None
        self.serving = str(graphs.manifest.get("serving", "float32"))  # what "auto" runs (serving_text_encoder)

    @classmethod
    def open(cls, path: str | Path) -> QueryModel | None:
        """The model at ``path`` by its cached query graphs (None where they are missing, fail, or serve another
        kind of model: the caller loads the torch model)."""
        folder = model_folder(path)
        graphs = QueryGraphs.open(folder) if folder is not None else None
        if graphs is None or graphs.manifest.get("search_mode") != SearchMode.ANN.value:
            return None
        try:
            return cls(folder, graphs)
        except Exception as exc:  # noqa: BLE001 (the torch model reads the folder again and names what is wrong)
            logger.warning("reelsearch: %s cannot be searched by its query graphs (%s: %s); loading it in torch",
                           folder, type(exc).__name__, exc)
            return None

    # ---- what a search reads of a model
    def eval(self) -> QueryModel:
        return self

    def fingerprint(self) -> str:
        return self._fingerprint

    def weight(self, expert: str) -> float:
        return self.weights[expert]

    def feature_pipeline(self, device: str | None = None) -> FeaturePipeline:
        """The FeaturePipeline of the model's recipe (what an index's model id names; it embeds nothing here)."""
        return FeaturePipeline(self.recipes, device=device)

    def _named(self, text_encoder: str | None) -> str:
        return self.serving if text_encoder == "auto" else text_encoder or "float32"

    def serves(self, text_encoder: str | None) -> bool:
        """Whether the graphs run what ``text_encoder`` (``Searcher``'s) names: float32 MiniLM (None, "float32"), the
        model's student text encoder where they hold it ("student"), or "auto" where the model's serving default
        (as the export recorded it) is one of those."""
        return self._named(text_encoder) in self.graphs.encoders

    def use_text_encoder(self, name: str) -> str:
        """Encode with ``name`` where the graphs run it (``serves``); ConfigError for another (the Searcher loads the
        torch model for those)."""
        if not self.serves(name):
            raise ConfigError(f"the query graphs run {', '.join(self.graphs.encoders)}, not {name!r}")
        self.text_encoder_name = self._named(name)
        return self.text_encoder_name

    def encode_text(self, texts, batch_size: int = 256) -> np.ndarray:
        """Caption embeddings [N, D] (``model.encode_text``), by the query graphs of ``text_encoder_name``."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        return np.concatenate([self.graphs.encode_text(texts[i:i + batch_size], self.text_encoder_name)
                               for i in range(0, len(texts), batch_size)])

    def _split(self, x: np.ndarray, text: bool) -> dict[str, np.ndarray]:
        return split_rows(x, self.widths, text)

    def ann_query(self, text: np.ndarray) -> np.ndarray:
        """The experts' embeddings side by side, each times its weight: their inner product with a stored row is the
        fused score."""
        texts = self._split(np.asarray(text, np.float32), text=True)
        return np.concatenate([self.weights[k] * texts[k] for k in self.experts], axis=1)

    def expert_scores(self, text, video) -> dict[str, np.ndarray]:
        """Each expert's [N, M] inner product (unit rows on both sides: the cosine)."""
        texts = self._split(np.asarray(text, np.float32), text=True)
        rows = self._split(as_rows(video), text=False)
        return {k: texts[k] @ rows[k].T for k in self.experts}

    def score(self, text, video, axis: int = 1) -> np.ndarray:
        """The fused [N, M] score (the weighted sum of the experts')."""
        return fuse_experts(self.expert_scores(text, video), self.weights, FusionKind.SCORE, Normalize.NONE, axis)

    def frame_scores(self, text_row, frames: np.ndarray) -> np.ndarray:
        """[T]: the fused score of each frame alone."""
        return self.score(np.asarray(text_row, np.float32).reshape(1, -1), frames)[0]


def manifest_fields(model) -> dict:
    """What a QueryModel reads of ``model`` beyond its graphs, as the export writes it into the manifest."""
    return {"name": getattr(model, "name", "") or "model", "search_mode": model.search_mode.value,
            "weights": {k: model.weight(k) for k in model.experts},
            "recipes": {n: to_dict(r) for n, r in model.recipes.items()}}

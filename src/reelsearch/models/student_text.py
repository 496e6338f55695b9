"""The student text encoder (``reelsearch distill-text --student``): a text tower cut short, distilled from the
model's own, carried by the model as a part.

``reelsearch tune-text MODEL --set tune_text.depth=N --set tune_text.teacher=MODEL --set tune_text.video=false``
trains the first N layers of the model's text tower (MiniLM) and the experts' text projections to give the model's
caption embeddings (``reelsearch.training.text_tail``): a whole model of its own whose video side is the teacher's.
This part carries what differs, so that the teacher encodes with it when asked (``model.use_text_encoder("student")``,
``--text-encoder student``): the cut tower's tuned layers (the student's text tail, as it stored them), each expert's
text encoder and projection weights and their configs (the text recipe: the tower, the layer it is cut after), the
``depth``, the ``source`` (the student's folder), and ``checked``: the model's dev RSum with float32 MiniLM and with
this encoder in one measurement (``{"float32", "student", "split"}``), which decides whether ``serve`` runs it by
default (:meth:`serves`). The weights, the fingerprint, the querybank and an index's rows stay the model's. Its own
confidence ``calibration`` (``reelsearch calibrate --text-encoder student``): what a search whose query it encoded
reads (``reelsearch.models.calibration.search_calibration``); a part without one leaves such a search the model's,
fitted on float32 MiniLM's scores (a log line says so).

In the model folder: ``student-text/text-tail.safetensors`` (absent for a student that tuned no layer),
``student-text/student-text.safetensors`` (``<expert>/text_encoder.*``, ``<expert>/text_projection.*`` and the
metadata), both stored in ``store`` (``STORES``: float16 unless asked, half of float32's bytes; int8: the tuned
layers' matrices as int8 rows with a scale each, the rest float16, a quarter; read back to float32)
and ``student-text/calibration.json`` (with its ``commonness.npz``, the same bytes as the model's where fitted on the
same training captions) when it has one; tied to the model's fingerprint like the querybank.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from safetensors.torch import save_file

from reelsearch.config import TextRecipe
from reelsearch.config.schema import TextModelConfig
from reelsearch.config.typed import from_dict, to_dict
from reelsearch.errors import ConfigError, DataFormatError
from reelsearch.io import atomic_path, file_identity
from reelsearch.text.tail import store_tail, tail_dtype

from .calibration import CALIBRATION_FILES, Calibration, encoder_calibration
from .querybank import read_tensors
from .static_text import measured_within

FOLDER = "student-text"
WEIGHTS_FILE, TAIL_FILE = "student-text.safetensors", "text-tail.safetensors"
FORMAT = "reelsearch.student-text"
TEXT_SIDE = ("text_encoder.", "text_projection.")  # the weights of an expert's text side after the tower
#: How the part may store its weights (``reelsearch distill-text --student --store``), the default first.
STORES = ("float16", "float32", "int8")


class StudentText:
    """``experts``: {name: {"recipe": TextRecipe (its tail: the file ``tail``), "config": TextModelConfig,
    "weights": {key: tensor} (its text side)}} in the model's order; ``tail``: the tuned layers' file (None: the
    student tuned none); ``depth``: the layers of the tower it runs; ``model``: the fingerprint of the model it
    encodes for; ``source``: the student's folder; ``checked``, ``store`` and ``calibration``: see the module
    docstring."""

    kind: ClassVar[str] = "student-text"
    name: ClassVar[str] = "student"  # the text encoder's name (``model.use_text_encoder``)

    def __init__(self, experts: dict, tail: str | Path | None, depth: int, model: str = "", source: str = "",
                 checked: dict | None = None, store: str = STORES[0], calibration: Calibration | None = None):
        if store not in STORES:
            raise ConfigError(f"a student text encoder is stored as {' or '.join(STORES)}, not {store!r}")
        self.experts, self.depth, self.model, self.source = experts, int(depth), model, source
        self.tail = Path(tail) if tail else None
        self.checked, self.store, self.calibration = dict(checked or {}), store, calibration
        self._towers = None  # {expert: JointModel}: the model's experts with this text side (``towers``)

    def serves(self) -> bool:
        """Whether ``serve`` may run this encoder by default: its measured RSum is within ``SERVING_TOLERANCE`` of
        float32 MiniLM's (``reelsearch.models.static_text.measured_within``)."""
        return measured_within(self.checked, self.name)

    def mismatch(self, model) -> str | None:
        """Why this part does not encode for ``model`` (None when it does): another model's, other experts, or its
        calibration another model's or querybank's."""
        if self.model != model.fingerprint():
            return (f"a student text encoder of another model (fingerprint {self.model}, this model "
                    f"{model.fingerprint()}): attach it again with `reelsearch distill-text --student`")
        if list(self.experts) != list(model.experts):
            return f"a student text encoder of experts {list(self.experts)}; the model's are {list(model.experts)}"
        problem = self.calibration.mismatch(model) if self.calibration is not None else None
        if problem:
            return f"the student text encoder's calibration: {problem} (with --text-encoder student)"
        return None

    def towers(self, model) -> dict:
        """{expert: a JointModel}: each expert of ``model`` with the student's text recipe and text-side weights (its
        video side the expert's), built once: what :meth:`encode` runs."""
        if self._towers is None:
            towers = {}
            for name, expert in model.experts.items():
                part = self.experts[name]
                config = copy.deepcopy(expert.config)
                config.model.text = copy.deepcopy(part["config"])
                config.features = replace(config.features, text=part["recipe"])
                tower = type(expert)(config)  # a JointModel (imported by way of the expert: no import cycle)
                state = {k: v for k, v in expert.state_dict().items() if not k.startswith(TEXT_SIDE)}
                tower.load_state_dict({**state, **part["weights"]})
                towers[name] = tower.to(expert.device).eval()
            self._towers = towers
        return self._towers

    def encode(self, model, texts: list[str], batch_size: int = 256, cached: bool = False) -> np.ndarray:
        """Caption embeddings [N, D] of ``texts`` for ``model`` (the experts' side by side), as the student model
        encodes them."""
        towers, batches = self.towers(model), {}
        return np.concatenate([t._encode_text(texts, batch_size, cached, batches) for t in towers.values()], axis=1)

    def describe(self) -> dict:
        return {"depth": self.depth, "tuned_layers": self.tail is not None, "experts": list(self.experts),
                "source": self.source, "checked": self.checked, "serves": self.serves(), "store": self.store,
                "calibrated": self.calibration is not None}

    # ---- a part of the model folder (reelsearch.models.folder)
    def fields(self) -> dict:
        return {"depth": self.depth}

    def save(self, directory: str | Path) -> list[str]:
        folder = Path(directory) / FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        if self.tail is not None:
            store_tail(self.tail, folder / TAIL_FILE, self.store)
        gone = (() if self.tail is not None else (TAIL_FILE,)) + (() if self.calibration is not None else
                                                                  CALIBRATION_FILES)
        for name in gone:  # (what an earlier part saved in this folder had)
            (folder / name).unlink(missing_ok=True)
        if self.calibration is not None:
            self.calibration.save(folder)
        dtype = torch.float16 if self.store == "int8" else getattr(torch, self.store)  # int8: the tail's matrices
        tensors = {f"{name}/{k}": v.detach().cpu().to(dtype).contiguous() for name, part in self.experts.items()
                   for k, v in part["weights"].items()}
        configs = {name: {"recipe": to_dict(_stored_recipe(part["recipe"], self.tail)),
                          "config": to_dict(part["config"])} for name, part in self.experts.items()}
        with atomic_path(folder / WEIGHTS_FILE) as tmp:
            save_file(tensors, str(tmp), metadata={
                "format": FORMAT, "experts": json.dumps(configs), "depth": str(self.depth), "model": self.model,
                "source": self.source, "checked": json.dumps(self.checked),
                "tail": "" if self.tail is None else file_identity(folder / TAIL_FILE)})
        return [FOLDER]

    @classmethod
    def load(cls, directory: str | Path, entry: dict) -> StudentText:
        folder = Path(directory) / entry["files"][0]
        path = folder / WEIGHTS_FILE
        if not path.is_file():
            raise DataFormatError(path, f"missing: the model's student text encoder ({WEIGHTS_FILE} in {FOLDER}/)")
        try:
            meta, stored = read_tensors(path, FORMAT, "pt")
            configs = json.loads(meta["experts"])
        except Exception as exc:  # noqa: BLE001 (safetensors raises its own error types)
            raise DataFormatError(path, f"unreadable student text encoder: {exc}") from exc
        tail = folder / TAIL_FILE if meta.get("tail") else None
        if tail is not None and (not tail.is_file() or file_identity(tail) != meta["tail"]):
            raise DataFormatError(tail, f"missing or changed since the student text encoder was saved (its digest "
                                        f"then: {meta['tail']})")
        experts = {}
        for name, stored_config in configs.items():
            recipe = from_dict(TextRecipe, stored_config["recipe"], str(path), f"{name}.recipe")
            if recipe.tail:
                recipe = _with_tail(recipe, tail.resolve())
            prefix = f"{name}/"
            experts[name] = {"recipe": recipe, "weights": {k[len(prefix):]: v.float() for k, v in stored.items()
                                                           if k.startswith(prefix)},
                             "config": from_dict(TextModelConfig, stored_config["config"], str(path), name)}
        store = (tail_dtype(tail) if tail is not None else
                 "float16" if any(v.dtype == torch.float16 for v in stored.values()) else "float32")
        return cls(experts, tail.resolve() if tail is not None else None, int(meta.get("depth", 0)),
                   meta.get("model", ""), meta.get("source", ""), json.loads(meta.get("checked") or "{}"), store,
                   encoder_calibration(folder))


def _with_tail(recipe: TextRecipe, tail: Path) -> TextRecipe:
    return replace(recipe, tail=str(tail))


def _stored_recipe(recipe: TextRecipe, tail: Path | None) -> TextRecipe:
    """The recipe as the part stores it: its tail named by the part's file (relative)."""
    return _with_tail(recipe, Path(TAIL_FILE)) if tail is not None else recipe


def student_of(model, student, source: str, teacher: str, store: str = STORES[0]) -> StudentText:
    """The part holding what ``student`` (a model distilled from ``model`` by ``tune-text``; its folder ``source``)
    computes differently: its text recipe, its tuned tower layers and its experts' text sides (saved in ``store``:
    ``STORES``); ConfigError naming
    both folders (``model``'s: ``teacher``) unless it was distilled from this model (the same experts, fusion
    weights, video recipes and every weight but the text side's alike)."""
    where = f"the student {source} and the model {teacher}"
    if list(student.experts) != list(model.experts):
        raise ConfigError(f"{where}: experts {list(student.experts)} and {list(model.experts)}; a student is "
                          "distilled from its teacher with the same experts (`reelsearch tune-text MODEL --set "
                          "tune_text.teacher=MODEL --set tune_text.video=false`)")
    tails, experts = set(), {}
    for name, expert in model.experts.items():
        mine, theirs = expert.state_dict(), student.experts[name].state_dict()
        other = sorted(k for k in set(mine) | set(theirs) if not k.startswith(TEXT_SIDE)
                       and (k not in mine or k not in theirs or not torch.equal(mine[k], theirs[k])))
        keys = [{m: r.key for m, r in e.recipes.items()} for e in (expert, student.experts[name])]
        if other or model.weight(name) != student.weight(name) or keys[0] != keys[1]:
            what = ", ".join(other[:3]) or "its fusion weight or video recipes"
            raise ConfigError(f"{where}: expert {name!r} has another video side ({what}), so another joint space: "
                              "it was not distilled from this model with tune_text.video=false")
        recipe = student.experts[name].config.features.text
        if recipe.kind != "minilm" or recipe.adapted:
            raise ConfigError(f"{where}: expert {name!r} reads {recipe.kind} text features of "
                              f"{recipe.encoder!r}: a student is a named MiniLM-family tower cut short")
        tails.add(recipe.tail)
        experts[name] = {"recipe": recipe, "config": copy.deepcopy(student.experts[name].config.model.text),
                         "weights": {k: v.detach().cpu().clone() for k, v in theirs.items() if k.startswith(TEXT_SIDE)}}
    if len(tails) != 1:
        raise ConfigError(f"{where}: the experts read different text towers; a student's experts share one")
    processor = next(iter(student.experts.values())).text_processor
    depth = processor.layer if processor.layer is not None else processor.encoder.num_layers
    return StudentText(experts, tails.pop(), depth, model.fingerprint(), source, store=store)

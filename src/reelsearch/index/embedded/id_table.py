"""IdTable: the vector index's labels <-> ids in numpy arrays (no Python object per id: a dict each way held about
200 bytes a row; these hold the ids' UTF-8 bytes twice and 8 bytes a label: docs/index.md, "Memory")."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _keys(ids: Sequence[str] | np.ndarray) -> np.ndarray:
    """``ids`` as an array of their UTF-8 bytes (numpy's fixed-width ``bytes_``: 1 byte an ASCII character, against 4
    in a ``str_`` array; UTF-8 keeps the strings' order, so sorted keys are the ids sorted)."""
    if isinstance(ids, np.ndarray) and ids.dtype.kind == "S":
        return ids
    if not len(ids):
        return np.empty(0, np.bytes_)
    try:
        return np.asarray(ids, dtype=np.str_).astype(np.bytes_)  # ASCII, encoded by numpy at once
    except UnicodeEncodeError:  # "surrogatepass": an id may hold a file name's undecodable bytes (os.fsdecode)
        return np.array([str(i).encode("utf-8", "surrogatepass") for i in ids], dtype=np.bytes_)


def _strings(keys: np.ndarray) -> list[str]:
    return [key.decode("utf-8", "surrogatepass") for key in keys.tolist()]


class IdTable:
    """Ids (strings, held as UTF-8 bytes) by label (int64 from 0): the id of each label, in an array by label, and the
    live ids sorted with their labels for look-ups by id (binary search). Removed labels stay dead; an id is on one
    label at most."""

    def __init__(self, labels: np.ndarray | None = None, ids: Sequence[str] | np.ndarray = ()):
        self._by_label = np.empty(0, np.bytes_)
        self._live = np.zeros(0, bool)
        self._sorted = np.empty(0, np.bytes_)
        self._sorted_labels = np.empty(0, np.int64)
        if labels is not None and len(labels):
            self.add(ids, np.asarray(labels, np.int64))

    def __len__(self) -> int:
        return len(self._sorted)

    def _find(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions in the sorted ids, whether each of ``ids`` is there)."""
        pos = np.searchsorted(self._sorted, ids)
        if not len(self._sorted):
            return pos, np.zeros(len(ids), bool)
        inside = np.minimum(pos, len(self._sorted) - 1)
        return pos, (pos < len(self._sorted)) & (self._sorted[inside] == ids)

    def __contains__(self, id_: str) -> bool:
        return bool(self._find(_keys([str(id_)]))[1][0])

    def present(self, ids: Sequence[str]) -> np.ndarray:
        """Whether each of ``ids`` is stored (bool [len(ids)])."""
        return self._find(_keys(ids))[1]

    def labels_of(self, ids: Sequence[str]) -> np.ndarray:
        """The labels [len(ids)] of ``ids`` (KeyError for the first one not stored)."""
        pos, found = self._find(_keys(ids))
        if not found.all():
            raise KeyError(ids[int(np.argmin(found))])
        return self._sorted_labels[pos]

    def live(self, labels: np.ndarray) -> np.ndarray:
        """Whether each label (>= 0, or -1: none) holds an id."""
        labels = np.asarray(labels, np.int64)
        ok = (labels >= 0) & (labels < len(self._live))
        out = np.zeros(labels.shape, bool)
        out[ok] = self._live[labels[ok]]
        return out

    def ids_of(self, labels: np.ndarray) -> list[str]:
        """The ids of ``labels`` (all live)."""
        return _strings(self._by_label[np.asarray(labels, np.int64)])

    def labels(self) -> np.ndarray:
        """Every live label, in label (insertion) order."""
        return np.flatnonzero(self._live).astype(np.int64)

    def ids(self) -> list[str]:
        """Every stored id, in label (insertion) order."""
        return _strings(self._by_label[self._live])

    def add(self, ids: Sequence[str] | np.ndarray, labels: np.ndarray) -> None:
        """Record ``ids`` (none stored yet, no repeats) on new ``labels``."""
        new = _keys(ids)
        if not len(new):
            return
        top = int(labels.max()) + 1
        if top > len(self._by_label) or new.itemsize > self._by_label.itemsize:
            size = max(top, 2 * len(self._by_label)) if top > len(self._by_label) else len(self._by_label)
            grown = np.zeros(size, np.promote_types(self._by_label.dtype, new.dtype))
            grown[: len(self._by_label)] = self._by_label
            live = np.zeros(size, bool)
            live[: len(self._live)] = self._live
            self._by_label, self._live = grown, live
        self._by_label[labels] = new
        self._live[labels] = True
        order = np.argsort(new, kind="stable")
        new, labels = new[order], labels[order]
        pos = np.searchsorted(self._sorted, new)
        self._sorted = np.insert(self._sorted.astype(np.promote_types(self._sorted.dtype, new.dtype)), pos, new)
        self._sorted_labels = np.insert(self._sorted_labels, pos, labels)

    def remove(self, ids: Sequence[str]) -> np.ndarray:
        """Forget those of ``ids`` stored; their labels."""
        pos, found = self._find(_keys(ids))
        pos = np.unique(pos[found])
        labels = self._sorted_labels[pos]
        self._live[labels] = False
        self._by_label[labels] = b""
        self._sorted = np.delete(self._sorted, pos)
        self._sorted_labels = np.delete(self._sorted_labels, pos)
        return labels

"""Retrieval metrics over a full similarity matrix, vectorised and chunked over queries.

Tie convention (pessimistic; see docs/evaluation.md): a query's gallery is ordered by score, highest first, and
among equal scores every wrong item comes before every correct one. The rank of a correct item is its 1-based
position in that order: ``1 + #wrong items scoring >= it + #correct items ahead of it``. A query's rank is the rank
of its best correct item, ``1 + #wrong items scoring >= its best correct score``. AP averages ``i / rank_i`` over
its correct items, ``i`` = 1, 2, ... in that order.
"""

from __future__ import annotations

import numpy as np
from tqdm import tqdm

from reelsearch.errors import EvaluationInputError
from reelsearch.evaluation.counting import count_ge
from reelsearch.evaluation.positives import Positives
from reelsearch.scoring.matrices import ScoreSource, to_work_array

RECALL_AT = (1, 5, 10, 50)
METRIC_KEYS = ("R@1", "R@5", "R@10", "R@50", "MedR", "MeanR", "mAP")
DEFAULT_MEMORY_BUDGET_MB = 512


def summarize(ranks: np.ndarray, ap: np.ndarray) -> dict[str, float]:
    """Metrics from per-query ranks (1 = first) and APs: R@K in percent, MedR, MeanR, mAP in 0..1."""
    n = len(ranks)
    if n == 0:
        raise EvaluationInputError("there are no queries", subject="positives")
    out = {f"R@{k}": 100.0 * int(np.count_nonzero(ranks <= k)) / n for k in RECALL_AT}
    out["MedR"] = float(np.median(ranks))
    out["MeanR"] = int(ranks.sum(dtype=np.int64)) / n
    out["mAP"] = float(np.cumsum(ap)[-1] / n)  # summed in query order: deterministic, chunking-independent
    return out


def rank_metrics(
    sims,
    positives,
    chunk_size: int | None = None,
    memory_budget_mb: float = DEFAULT_MEMORY_BUDGET_MB,
    *,
    transpose: bool = False,
    device: str | None = None,
    progress: bool | None = None,
) -> dict[str, float]:
    """R@1/5/10/50 (percent), MedR, MeanR (1 = first) and mAP (0-1) of one retrieval direction.

    ``sims`` is [queries x gallery]: an ndarray, an ``np.memmap``, a torch tensor or a callable
    ``chunk(rows: slice) -> [rows, gallery]`` (its ``.shape`` is used when present, else the query count comes from
    ``positives``). ``positives`` lists each query's correct gallery indices (list of lists, dict str/int -> list,
    or a 1-D int array of one index per query). ``transpose=True`` takes the columns of ``sims`` as the queries
    without copying it. Rows are processed ``chunk_size`` at a time, by default as many as fit
    ``memory_budget_mb``. ``device``: None = a GPU when present, "cpu" = numpy, or a torch device name.
    """
    ranks, ap = query_ranks(
        sims, positives, chunk_size, memory_budget_mb, transpose=transpose, device=device, progress=progress
    )
    return summarize(ranks, ap)


def query_ranks(
    sims,
    positives,
    chunk_size: int | None = None,
    memory_budget_mb: float = DEFAULT_MEMORY_BUDGET_MB,
    *,
    transpose: bool = False,
    device: str | None = None,
    progress: bool | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-query rank of the best correct item (int64, 1 = first) and AP (float64); arguments as ``rank_metrics``."""
    if transpose:
        source = ScoreSource(sims, n_rows=_gallery_rows_hint(sims))
        pos = Positives.from_any(positives, source.shape[1], source.shape[0])
        task = _ColumnQueries(pos)
        _run(source, [], [task], chunk_size, memory_budget_mb, device, progress)
        return task.finish()
    source = ScoreSource(sims, n_rows=_count_queries(positives))
    pos = Positives.from_any(positives, source.shape[0], source.shape[1])
    task = _RowQueries(pos)
    _run(source, [task], [], chunk_size, memory_budget_mb, device, progress)
    return task.ranks, task.ap


def retrieval_metrics(
    sims,
    caption_to_video,
    chunk_size: int | None = None,
    memory_budget_mb: float = DEFAULT_MEMORY_BUDGET_MB,
    *,
    device: str | None = None,
    progress: bool | None = None,
) -> dict:
    """Both directions of caption/video retrieval from one [n_captions x n_videos] similarity matrix.

    ``t2v``: each caption ranks the videos, its one correct video is ``caption_to_video[caption]``. ``v2t``: each
    video ranks all captions and its rank is that of its best-ranked own caption (the columns are read in place,
    the transpose is never built). ``RSum`` = R@1 + R@5 + R@10 of both directions. ``sims`` may be any source
    ``rank_metrics`` accepts; a callable is evaluated twice (one pass per direction's needs).
    """
    c2v = np.asarray(caption_to_video)
    if c2v.ndim != 1 or not (np.issubdtype(c2v.dtype, np.integer) or c2v.size == 0):
        raise EvaluationInputError(
            f"caption_to_video must be a 1-D int array, got shape {c2v.shape} dtype {c2v.dtype}", subject="positives"
        )
    source = ScoreSource(sims, n_rows=len(c2v))
    n_captions, n_videos = source.shape
    if len(c2v) != n_captions:
        raise EvaluationInputError(
            f"caption_to_video has {len(c2v)} entries, the score matrix has {n_captions} caption rows",
            subject="positives",
        )
    if c2v.size and (c2v.min() < 0 or c2v.max() >= n_videos):
        c = int(np.flatnonzero((c2v < 0) | (c2v >= n_videos))[0])
        raise EvaluationInputError(
            f"caption {c}: video index {int(c2v[c])} is out of range (there are {n_videos} videos)", subject="positives"
        )
    no_caption = np.flatnonzero(np.bincount(c2v, minlength=n_videos) == 0)
    if len(no_caption):
        more = f" (and {len(no_caption) - 1} more)" if len(no_caption) > 1 else ""
        raise EvaluationInputError(f"video {int(no_caption[0])} has no caption{more}", subject="positives")
    captions = np.arange(n_captions)
    t2v = _RowQueries(Positives.from_pairs(captions, c2v, n_captions, n_videos))
    by_video = Positives.from_pairs(c2v, captions, n_videos, n_captions)
    v2t = _ColumnQueries(by_video)
    _run(source, [t2v], [v2t], chunk_size, memory_budget_mb, device, progress)
    out = {"t2v": summarize(t2v.ranks, t2v.ap), "v2t": summarize(*v2t.finish())}
    out["RSum"] = sum(out[d][f"R@{k}"] for d in ("t2v", "v2t") for k in (1, 5, 10))
    return out


def _count_queries(positives) -> int | None:
    """The number of queries ``positives`` describes (used when a score function has no ``.shape``)."""
    if isinstance(positives, Positives):
        return positives.n_queries
    if isinstance(positives, dict):
        try:
            return max(int(k) for k in positives) + 1 if positives else 0
        except (ValueError, TypeError):
            return None  # Positives.from_any reports the bad key
    return len(positives)


def _gallery_rows_hint(sims):
    shape = getattr(sims, "shape", None)
    return int(shape[0]) if shape is not None else None


# --- the engine: one or two passes over row chunks, feeding per-direction tasks ---------------------------------


def _resolve_device(source: ScoreSource, device: str | None):
    """None -> numpy on the CPU; else a torch device. ``device=None`` picks the source's GPU, or any GPU."""
    if device == "cpu":
        return None
    if device is not None:
        return device
    if source.on_torch_device is not None and source.on_torch_device.type != "cpu":
        return source.on_torch_device
    try:
        import torch  # noqa: PLC0415 - torch inputs only: numpy metrics stay torch-free

        return "cuda" if torch.cuda.is_available() else None
    except ImportError:  # pragma: no cover
        return None


def _run(source, row_tasks, col_tasks, chunk_size, memory_budget_mb, device, progress) -> None:
    n_rows, n_cols = source.shape
    dev = _resolve_device(source, device)
    if chunk_size is None:
        per_elem = 2 * source.work_dtype.itemsize + 1
        chunk_size = max(1, int(memory_budget_mb * 2**20) // max(1, n_cols * per_elem))
    chunk_size = max(1, min(int(chunk_size), max(n_rows, 1)))
    starts = range(0, n_rows, chunk_size)
    need_gather = [t for t in col_tasks if not source.can_gather]
    for t in col_tasks:
        if source.can_gather:
            t.set_values(source.gather(t.pair_rows, t.pair_cols), source)
    passes = [(row_tasks, need_gather, [t for t in col_tasks if t not in need_gather])]
    if need_gather:
        passes.append(([], [], need_gather))
    disable = None if progress is None else not progress  # None: shown on a terminal only
    bar = tqdm(total=len(starts) * len(passes), desc="metrics", unit="chunk", disable=disable, leave=False)
    try:
        for rows, gathers, counts in passes:
            for r0 in starts:
                r1 = min(n_rows, r0 + chunk_size)
                X = to_work_array(source.rows(r0, r1), source.work_dtype, dev)
                _check_finite_rows(X, r0, transposed=bool(col_tasks) and not row_tasks)
                for t in rows:
                    t.consume(r0, r1, X)
                for t in gathers:
                    t.gather(r0, r1, X)
                for t in counts:
                    t.consume(r0, r1, X)
                bar.update(1)
            for t in gathers:
                t.set_values(t.gathered, source)
    finally:
        bar.close()


def _check_finite_rows(X, r0: int, transposed: bool) -> None:
    """Raise naming the first query row (or column) holding a NaN score."""
    if isinstance(X, np.ndarray):
        if X.size == 0 or not np.isnan(X.min()):
            return
        bad = np.argwhere(np.isnan(X))[0]
    else:
        import torch  # noqa: PLC0415 - torch inputs only: numpy metrics stay torch-free

        if X.numel() == 0 or not torch.isnan(X.min()):
            return
        bad = torch.nonzero(torch.isnan(X))[0].tolist()
    row, col = int(bad[0]) + r0, int(bad[1])
    where = f"query {col} (column {col}, row {row})" if transposed else f"query {row} (row {row}, column {col})"
    raise EvaluationInputError(f"score matrix has a NaN at {where}", subject="scores")


def _take(X, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    if isinstance(X, np.ndarray):
        return X[rows, cols]
    import torch  # noqa: PLC0415 - torch inputs only: numpy metrics stay torch-free

    idx = (torch.as_tensor(rows, device=X.device), torch.as_tensor(cols, device=X.device))
    return X[idx].cpu().numpy()


def sorted_thresholds(query: np.ndarray, values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """[Q, K] matrix of each query's correct-item scores in ascending order, padded with +inf.

    ``query`` (ascending) and ``values`` list the pairs; ``counts[q]`` = number of pairs of query ``q``.
    """
    n_q = len(counts)
    k_max = int(counts.max()) if n_q else 0
    order = np.lexsort((values, query))
    q_sorted = query[order]
    starts = np.zeros(n_q, dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    pos = np.arange(len(order)) - starts[q_sorted]
    T = np.full((n_q, k_max), np.inf, dtype=values.dtype)
    T[q_sorted, pos] = values[order]
    return T


def _positives_at_or_above(T: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``out[q, j]`` = number of query q's correct scores >= ``T[q, j]`` (T sorted ascending, k valid entries)."""
    n_q, k_max = T.shape
    idx = np.broadcast_to(np.arange(k_max), (n_q, k_max))
    same_as_prev = np.zeros((n_q, k_max), dtype=bool)
    same_as_prev[:, 1:] = T[:, 1:] == T[:, :-1]
    first_equal = np.maximum.accumulate(np.where(same_as_prev, 0, idx), axis=1)
    return k[:, None] - first_equal


def ranks_from_counts(k: np.ndarray, wrong_ge: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Best-correct rank and AP per query from ``wrong_ge[q, j]`` = #wrong items >= its j-th lowest correct score."""
    n_q, k_max = wrong_ge.shape
    i = np.arange(1, k_max + 1)[None, :]  # position among the correct items, best first
    j = k[:, None] - i  # ascending index of the i-th best correct score
    valid = j >= 0
    r = i + np.take_along_axis(wrong_ge, np.clip(j, 0, None), axis=1)
    terms = np.where(valid, i / r, 0.0)
    ap = np.cumsum(terms, axis=1)[:, -1] / k
    return r[:, 0].astype(np.int64), ap


class _RowQueries:
    """Queries are rows of the source: each chunk of rows is complete on its own."""

    def __init__(self, positives: Positives):
        self.pos = positives
        self.ranks = np.zeros(positives.n_queries, dtype=np.int64)
        self.ap = np.zeros(positives.n_queries, dtype=np.float64)

    def consume(self, r0: int, r1: int, X) -> None:
        p = self.pos
        k = p.counts[r0:r1]
        local = np.repeat(np.arange(r1 - r0), k)
        vals = _take(X, local, p.indices[p.indptr[r0] : p.indptr[r1]])
        T = sorted_thresholds(local, vals, k)
        wrong_ge = count_ge(X, T, axis=1, valid_k=k) - _positives_at_or_above(T, k)
        self.ranks[r0:r1], self.ap[r0:r1] = ranks_from_counts(k, wrong_ge)


class _ColumnQueries:
    """Queries are columns of the source: counts accumulate over row chunks once thresholds are known."""

    def __init__(self, positives: Positives):
        self.pos = positives  # queries = columns, "gallery" indices = rows of the source
        cols, rows = positives.pairs()
        order = np.argsort(rows, kind="stable")
        self.pair_rows, self.pair_cols = rows[order], cols[order]
        self.gathered = None
        self.T = None

    def _in_chunk(self, r0: int, r1: int) -> slice:
        return slice(*np.searchsorted(self.pair_rows, [r0, r1]))

    def gather(self, r0: int, r1: int, X) -> None:
        if self.gathered is None:
            self.gathered = np.empty(len(self.pair_rows), dtype=np.dtype(str(X.dtype).removeprefix("torch.")))
        s = self._in_chunk(r0, r1)
        self.gathered[s] = _take(X, self.pair_rows[s] - r0, self.pair_cols[s])

    def set_values(self, values: np.ndarray, source: ScoreSource) -> None:
        if np.isnan(values).any():
            i = int(np.flatnonzero(np.isnan(values))[0])
            raise EvaluationInputError(
                f"score matrix has a NaN at query {self.pair_cols[i]} (column {self.pair_cols[i]}, "
                f"row {self.pair_rows[i]})",
                subject="scores",
            )
        order = np.argsort(self.pair_cols, kind="stable")
        self.T = sorted_thresholds(self.pair_cols[order], values[order], self.pos.counts)
        self.ge = np.zeros(self.T.shape, dtype=np.int64)
        self.pos_ge = np.zeros(self.T.shape, dtype=np.int64)

    def consume(self, r0: int, r1: int, X) -> None:
        self.ge += count_ge(X, self.T, axis=0, valid_k=self.pos.counts)
        s = self._in_chunk(r0, r1)
        cols = self.pair_cols[s]
        vals = _take(X, self.pair_rows[s] - r0, cols)  # as scored in this pass: subtract exactly what was counted
        np.add.at(self.pos_ge, cols, (vals[:, None] >= self.T[cols]).astype(np.int64))

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        return ranks_from_counts(self.pos.counts, self.ge - self.pos_ge)

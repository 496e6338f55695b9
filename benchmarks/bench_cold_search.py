"""A cold `reelsearch search`: each run a fresh process, the configurations alternating; median wall and CPU seconds.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_cold_search.py --index IDX [--base-src DIR] [--runs 5]

Configurations: ``base`` (the package under ``--base-src``, e.g. ``git archive BASE src | tar -x -C DIR``, given as
``DIR/src``), ``base asked`` (that package asking the server), ``local`` (this checkout, ``--local``: in process)
and ``asked`` (this checkout, asking a ``reelsearch serve`` over IDX that the script starts first and stops at the
end). ``base`` and ``local`` search copies of IDX of their own (the server's advert left out). Every configuration
must print the same results (checked).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reelsearch.served import ADVERT_NAME, live_advert

SRC = Path(__file__).resolve().parents[1] / "src"


def run(src: Path, args: list[str]) -> tuple[str, float, float]:
    """(stdout, wall seconds, CPU seconds) of ``python -m reelsearch ARGS`` importing reelsearch from ``src``."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "reelsearch", *args], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(src)})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return done.stdout, wall, after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, required=True, help="An index built with the model to time.")
    parser.add_argument("--base-src", type=Path, help="The src/ folder of the version to compare with.")
    parser.add_argument("--base-index", type=Path, help="An index the base version built (default: --index; where the "
                        "index's format changed since, the base cannot read the new one).")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--query", default="a dog runs on the grass")
    parser.add_argument("-k", default="3")
    opts = parser.parse_args()
    query = ["search", opts.query, "-k", opts.k]
    with tempfile.TemporaryDirectory() as tmp:
        configs = {}
        if opts.base_src:
            configs["base"] = (opts.base_src, _copy(opts.base_index or opts.index, Path(tmp) / "base"), [])
            configs["base asked"] = (opts.base_src, opts.index, [])
        configs["local"] = (SRC, _copy(opts.index, Path(tmp) / "local"), ["--local"])
        configs["asked"] = (SRC, opts.index, [])
        server = subprocess.Popen([sys.executable, "-m", "reelsearch", "serve", "--index", str(opts.index), "--port",
                                   "0", "--no-access-log"], env={**os.environ, "PYTHONPATH": str(SRC)},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while (advert := live_advert(opts.index)) is None or advert["pid"] != server.pid:
                if server.poll() is not None:
                    raise SystemExit("reelsearch serve stopped")
                time.sleep(0.2)
            times = {name: [] for name in configs}
            outputs = {}
            for _ in range(opts.runs):
                for name, (src, index, extra) in configs.items():
                    out, wall, cpu = run(src, [*query, "--index", str(index), *extra])
                    times[name].append((wall, cpu))
                    outputs.setdefault(name, out)
        finally:
            server.terminate()
            server.wait()
    if len(set(outputs.values())) != 1:
        raise SystemExit(f"the configurations printed different results: {outputs}")
    print(f"load average {os.getloadavg()[0]:.1f}; {opts.runs} runs each, alternating; results:\n{outputs['asked']}")
    print("| | median wall (s) | median CPU (s) | runs, wall (s) |\n|---|---|---|---|")
    for name, runs in times.items():
        walls = [w for w, _ in runs]
        print(f"| {name} | {statistics.median(walls):.2f} | {statistics.median(c for _, c in runs):.2f} | "
              f"{', '.join(f'{w:.2f}' for w in walls)} |")


def _copy(index: Path, dest: Path) -> Path:
    shutil.copytree(index, dest, ignore=shutil.ignore_patterns(ADVERT_NAME))
    return dest


if __name__ == "__main__":
    main()

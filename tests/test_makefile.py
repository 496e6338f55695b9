"""The Makefile's targets as `make -n` prints them (nothing is run): what `test-other-cpu` sets up and runs."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _dry_run(folder: Path, target: str, *args: str) -> list[str]:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    res = subprocess.run([make, "-n", target, *args], cwd=folder, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout.replace("\\\n", " ").splitlines()  # a recipe line continued with a backslash: one line


@pytest.mark.parametrize("installed", [True, False])
def test_the_other_cpu_stand_in_runs_this_checkouts_code_and_sets_up_only_a_missing_venv(tmp_path, installed):
    """`make test-other-cpu` runs pytest under the stand-in's settings on the checkout's own src/ (PYTHONPATH); a venv
    set up before is used as it is, even when pyproject.toml is newer than it (a git worktree sharing another
    checkout's venv: reinstalling would point that venv's editable install at the worktree); without one, the venv
    is set up first."""
    for name in ("Makefile", "pyproject.toml", "requirements.lock"):
        shutil.copy(ROOT / name, tmp_path)
    if installed:
        (tmp_path / ".venv").mkdir()
        (tmp_path / ".venv" / ".reelsearch-installed").touch()
        os.utime(tmp_path / ".venv" / ".reelsearch-installed", (1e9, 1e9))  # older than pyproject.toml
    lines = _dry_run(tmp_path, "test-other-cpu", "TESTS=tests/test_fusion.py")
    run = next(i for i, line in enumerate(lines) if "-m pytest" in line)
    command = lines[run]
    for setting in ("ATEN_CPU_CAPABILITY=default", "REELSEARCH_ORT_OPTIMIZATION=off", 'REELSEARCH_CACHE_DIR="$cache"',
                    "PYTHONPATH=src", "tests/test_fusion.py"):
        assert setting in command, (setting, lines)
    setup = [line for line in lines[:run] if "pip install" in line]
    assert (setup == []) == installed, lines
    if not installed:
        assert any("--no-deps -e ." in line for line in setup), lines

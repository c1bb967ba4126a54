# Two entry points for a fresh machine with Python 3.11: `make run` and `make test`.
PY ?= python3.11
VENV ?= .venv
# torch for the measured-profiler tests; 2.13.0 is the CPU wheel this project is tested with
# (override, e.g. TORCH=torch==2.14.1, for another platform)
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
CORE := $(VENV)/.core-installed
TESTS := $(VENV)/.test-installed

.PHONY: setup setup-test run test bench clean check-pythons light-skip

$(CORE): pyproject.toml
	@command -v $(PY) >/dev/null 2>&1 || { echo "need $(PY) on PATH (or make PY=/path/to/python3.11)"; exit 2; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $(CORE)

$(TESTS): $(CORE)
	$(BIN)/pip install -q -e '.[test-real]' '$(TORCH)'
	touch $(TESTS)

setup: $(CORE)

setup-test: $(TESTS)

run: $(CORE)
	$(BIN)/python -m experiments.run configs/experiments/quickstart.yaml

# The suite in two phases: the bulk on $(WORKERS) pytest-xdist workers (a test file stays on one
# worker, so module fixtures are built once), then the `serial` tests one at a time (servers, Ray,
# wall-clock signals: tests/conftest.py). Either phase collecting nothing exits 5 and fails.
WORKERS ?= 2
test: $(TESTS)
	$(BIN)/python -m pytest -q -m "not slow and not gpu and not serial" -n $(WORKERS) --dist loadfile
	$(BIN)/python -m pytest -q -m "not slow and not gpu and serial"

bench: $(CORE)
	$(BIN)/python -m experiments.run bench_selectors

# Tests the light `test` extra cannot run (they need torch, transformers, ray or PostgreSQL)
LIGHT_SKIP := --ignore=tests/real --ignore=tests/profiler/test_device_ops.py \
	--ignore=tests/profiler/test_measured.py --ignore=tests/profiler/test_torch_model.py
light-skip:
	@echo $(LIGHT_SKIP)

# Python 3.12 and 3.13 (pyproject's range): a fresh venv each, flowmaker with its light `test`
# extra from the index (the newest releases the ranges admit), then the light tests
PYS ?= python3.12 python3.13
check-pythons:
	@for py in $(PYS); do \
	  v=$$($$py -c 'import sys; print("%d.%d" % sys.version_info[:2])') || exit 2; \
	  env=$${TMPDIR:-/tmp}/flowmaker-py$$v; rm -rf $$env; \
	  echo "== Python $$v in $$env"; \
	  $$py -m venv $$env && $$env/bin/pip install -q -e '.[test]' && \
	  $$env/bin/python -m pytest -q -p no:cacheprovider -m "not slow and not gpu" $(LIGHT_SKIP) || exit 1; \
	done

clean:
	rm -rf $(VENV)

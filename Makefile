# Two entry points for a fresh machine with Python 3.11: `make run` and `make test`.
PY ?= python3.11
VENV ?= .venv
# torch for the measured-profiler tests; 2.13.0 is the CPU wheel this project is tested with
# (override, e.g. TORCH=torch==2.14.1, for another platform)
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
CORE := $(VENV)/.core-installed
TESTS := $(VENV)/.test-installed

.PHONY: setup setup-test run test bench clean

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

test: $(TESTS)
	$(BIN)/python -m pytest -q -m "not slow and not gpu"

bench: $(CORE)
	$(BIN)/python -m experiments.bench_selectors

clean:
	rm -rf $(VENV)

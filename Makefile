# Two entry points for a fresh machine with Python 3.11: `make run` and `make test`.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test bench clean

$(STAMP): pyproject.toml
	@command -v $(PY) >/dev/null 2>&1 || { echo "need $(PY) on PATH (or make PY=/path/to/python3.11)"; exit 2; }
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/python -m experiments.run configs/experiments/quickstart.yaml

test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not gpu"

bench: $(STAMP)
	$(BIN)/python -m experiments.bench_selectors

clean:
	rm -rf $(VENV)

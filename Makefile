# Fresh machine: `make run` sets up .venv and runs the main job; `make test` sets up and runs the tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export OMP_NUM_THREADS ?= 2

.PHONY: setup run test conformance bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch==2.13.0 first: a bare `torch` requirement with no torch installed pulls a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[test]"
	touch $@

setup: $(VENV)/.installed

run: setup
	$(BIN)/python scripts/evaluate.py --policy tetris sjf packer random --load 0.7 --jobsets 100 --seed 1

test: setup
	$(BIN)/python -m pytest -q -m "not gpu" tests

conformance: setup
	$(BIN)/python ../shared/conformance/check_env.py --cases 200

bench: setup
	$(BIN)/python scripts/bench_env.py

clean:
	rm -rf $(VENV) .pytest_cache

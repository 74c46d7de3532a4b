# Fresh machine: `make run` sets up .venv and runs the main job; `make test` sets up and runs the tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export OMP_NUM_THREADS ?= 2

.PHONY: setup run smoke test lint conformance bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch==2.13.0 first: a bare `torch` requirement with no torch installed pulls a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[test]"
	touch $@

setup: $(VENV)/.installed

# the main job: DeepRM's training on its paper settings (embedded defaults), CPU, W&B offline
run: setup
	$(BIN)/python scripts/fit.py fit

smoke: setup
	$(BIN)/python scripts/fit.py fit --config configs/smoke.yaml

# two pytest workers of one thread each: one per core of the 2-core CI machine
test: setup
	$(BIN)/ruff check .
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -m "not gpu" -n 2 tests

lint: setup
	$(BIN)/ruff check .

conformance: setup
	$(BIN)/python ../shared/conformance/check_env.py --cases 200

bench: setup
	$(BIN)/python scripts/bench_env.py
	$(BIN)/python scripts/bench_train.py
	$(BIN)/python scripts/bench_maml.py

clean:
	rm -rf $(VENV) .pytest_cache

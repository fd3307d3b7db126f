# The two commands of the README: `make run` (set up + the main job) and `make test` (set up + tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test setup bench lint clean

setup: $(STAMP)

# torch==2.13.0 first: it is the CPU wheel on local disk; any other torch spec may pull a CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/mlxe train configs/cartpole_a3c.yaml

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check mlxe tests

bench: $(STAMP)
	$(BIN)/mlxe bench architectures --seeds 5

clean:
	rm -rf $(VENV) runs .pytest_cache

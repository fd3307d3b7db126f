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
	# PufferLib's compiled Ocean games (mlxe/envs/ocean.py): its wheel pins old NumPy and Gymnasium,
	# which MLxE does not use from it; a CPython 3.11 Linux x86-64 wheel only
	$(BIN)/pip install --quiet --no-deps --only-binary=:all: pufferlib==2.0.2 || echo "PufferLib's Ocean games not installed: their tests skip"
	# MinAtar's games need only NumPy and Gymnasium; its declared dependencies (pandas, seaborn, ...) render
	$(BIN)/pip install --quiet --no-deps minatar==1.0.15
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/mlxe train configs/cartpole_a3c.yaml

# Four pytest-xdist workers: two run the tests that start a local Ray instance, which mostly wait,
# beside two that compute (tests/conftest.py groups and orders them).
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 4 --dist loadgroup

lint: $(STAMP)
	$(BIN)/ruff check mlxe tests

bench: $(STAMP)
	$(BIN)/mlxe bench architectures --seeds 5

clean:
	rm -rf $(VENV) runs .pytest_cache

# Every target builds its own virtualenv: `make train` and `make test` work on a fresh machine.
# `make train` installs what the main job needs (the `train` extra); `make test` adds the test tools and
# verl (`dev`, `verl`: ray, verl's own dependencies), which the main job never imports.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
TRAIN_STAMP := $(VENV)/.grae-train
TEST_STAMP := $(VENV)/.grae-test
# Where torch 2.13.0 comes from. Empty = pip's configured indexes (on this project's machines a local
# CPU wheel). On a stock CPU-only machine PyPI's Linux wheel is the CUDA build (several GB of nvidia-*
# packages): `make train TORCH_INDEX=https://download.pytorch.org/whl/cpu` takes the CPU build instead.
TORCH_INDEX ?=
TORCH_PIP_ARGS := $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX),)

# The newest transformers the `train` extra admits (its bound in pyproject.toml; grae.eval.decode.VERIFIED_TRANSFORMERS).
# `make test` runs on the oldest: the `verl` extra holds its venv at verl 0.9.1's transformers < 5.11 (5.10.x);
# `make test-newest` builds a second venv without verl on this one and runs the modules whose results depend on
# transformers' generate and GRPOTrainer: grae's sampling loop against generate, the nucleus against the top-p
# warper, grouped-query decoding, GraeTrainer's rollouts and whole runs against stock TRL.
NEWEST_TRANSFORMERS ?= 5.23.0
NEWEST_VENV ?= .venv-newest
NEWEST_STAMP := $(NEWEST_VENV)/.grae-transformers-$(NEWEST_TRANSFORMERS)
PARITY_TESTS := tests/test_decode.py tests/test_nucleus.py tests/test_gqa.py tests/test_trl_rollouts.py \
	tests/test_trl_parity.py

.PHONY: venv test test-newest lint train bench clean

$(TRAIN_STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	# torch first (TORCH_INDEX above), so nothing later can pull another build.
	$(PIP) install -q $(TORCH_PIP_ARGS) torch==2.13.0
	$(PIP) install -q -e ".[train]"
	touch $(TRAIN_STAMP)

$(TEST_STAMP): $(TRAIN_STAMP)
	$(PIP) install -q -e ".[train,dev,verl]"
	touch $(TEST_STAMP)

venv: $(TEST_STAMP)

## The main job: `grae train` with no arguments (embedded default, report in runs/default).
train: $(TRAIN_STAMP)
	$(VENV)/bin/grae train

## The test suite (what CI runs). TEST_THREADS: torch threads per test process (1 by default; the suite
## must pass at 1 and at 2).
TEST_THREADS ?= 1
test: $(TEST_STAMP)
	GRAE_TEST_THREADS=$(TEST_THREADS) $(PY) -m pytest -q -n 2 --dist loadgroup --durations=15

## The parity-critical modules on the newest admitted transformers (CI runs it after `make test`).
test-newest: $(NEWEST_STAMP)
	$(NEWEST_VENV)/bin/python -c "import transformers; assert transformers.__version__ == '$(NEWEST_TRANSFORMERS)', transformers.__version__"
	GRAE_TEST_THREADS=$(TEST_THREADS) $(NEWEST_VENV)/bin/python -m pytest -q -n 2 --dist loadgroup $(PARITY_TESTS)

$(NEWEST_STAMP): pyproject.toml
	test -x $(NEWEST_VENV)/bin/python || python3 -m venv $(NEWEST_VENV)
	# torch first (TORCH_INDEX above), as for .venv
	$(NEWEST_VENV)/bin/pip install -q $(TORCH_PIP_ARGS) torch==2.13.0
	$(NEWEST_VENV)/bin/pip install -q -e ".[train,dev]" transformers==$(NEWEST_TRANSFORMERS)
	touch $(NEWEST_STAMP)

## Lint (ruff, config in pyproject.toml) and type-check the core (mypy: advantage, loss, metrics, groups).
lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/mypy

bench: $(TRAIN_STAMP)
	$(PY) bench/bench_advantage.py

clean:
	rm -rf $(VENV) $(NEWEST_VENV) build *.egg-info src/*.egg-info

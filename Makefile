# The two commands a fresh machine needs: `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test test-fast envs lint clean

$(BIN)/dlbench: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev]'
	touch $@

envs: $(BIN)/dlbench
	$(BIN)/dlbench env create --all

# The quick suite's stand-ins come from installed packages (a second make run prepares nothing again). The
# suite's pairs are certified first (`dlbench certify --suite quick`: a pair certified already on this machine
# is not probed again), so that the report's every comparison stands on a certificate; a pair that fails is
# shown failed in the report, and make fails with certify's status once the run is done. `dlbench run` writes
# the report itself (rewritten after each cell, drawn whole at the end), also when a cell failed (exit status
# 1; make still fails then, with the run's status). Where the run stopped otherwise (an error, a signal:
# status above 1), `dlbench report` writes it from what the store holds.
run: envs
	$(BIN)/dlbench data fetch --suite quick
	certified=0; $(BIN)/dlbench certify --suite quick || certified=$$?; \
	status=0; $(BIN)/dlbench run quick || status=$$?; \
	if [ $$status -gt 1 ]; then printf 'report: '; $(BIN)/dlbench report || true; fi; \
	if [ $$status -ne 0 ]; then exit $$status; fi; exit $$certified

lint: $(BIN)/dlbench
	$(BIN)/ruff check src tests

# Two pytest workers: most tests wait on a single-threaded framework process, so two fit two cores.
# --dist loadfile keeps a file on one worker, so a module fixture (an adapter check, the quick run)
# is computed once; the two longest files, test_adapters and test_certify, come first and run side
# by side. --durations: the CI log names the slowest tests.
PYTEST_WORKERS ?= 2
test: envs lint
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=20

# ruff and the tests that need no framework environment and take under two seconds, those without the markers
# `framework` and `slow` (pyproject.toml): no environment is built. Every test without `framework` runs with a
# DLBENCH_HOME of its own that holds nothing, here and in make test (tests/conftest.py, no_environments), so one
# that needs an environment and lacks the marker fails in both.
test-fast: lint
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile -m "not framework and not slow" --durations=10

clean:
	rm -rf $(VENV) dlbench-results

# gpuplan — set-up and checks. Every target creates .venv and installs what it needs, so each
# works on a fresh Debian 12 machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip

.PHONY: demo test test-load bench lint clean

$(BIN)/python:
	@$(PYTHON) -m venv $(VENV) 2>/dev/null || { \
	  echo "python3 -m venv failed; installing python3-venv"; \
	  apt-get update -qq && apt-get install -y -qq python3-venv python3-pip >/dev/null && \
	  $(PYTHON) -m venv $(VENV); }
	@$(PIP) install -q --upgrade pip

# The core install: what `make demo` (gpuplan compare, a table) needs.
$(VENV)/.core: $(BIN)/python pyproject.toml
	$(PIP) install -q -e .
	@touch $@

# The suite covers every extra (Slurm, SSH, sweep, ML, plots): [all] plus the test tools.
# The report test opens report.html in headless Chromium (Debian's package, root on CI).
$(VENV)/.test: $(VENV)/.core
	$(PIP) install -q -e '.[all,test]'
	@test -x /usr/bin/chromium || { echo "installing chromium"; \
	  apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }
	@touch $@

# COLUMNS=80: the table README.md shows, on any terminal (tests/cli/test_readme_demo.py compares).
demo: $(VENV)/.core
	COLUMNS=80 $(BIN)/gpuplan compare --scenario philly-default --policies fifo,fifo-backfill,srtf,srsf

test: $(VENV)/.test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q

# The whole suite exactly as `make test` runs it, while both cores are kept busy by spinning
# processes (tests/load.py): a suite that passes here does not depend on a quiet machine.
test-load: $(VENV)/.test
	$(BIN)/python -m tests.load --workers 2 -- $(MAKE) --no-print-directory test

bench: $(VENV)/.test
	$(BIN)/python -m tests.bench $(BENCH_ARGS)

lint: $(VENV)/.test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info

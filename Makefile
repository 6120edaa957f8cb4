# rota — every target creates .venv on first use and reuses it afterwards.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
ROTA   := $(VENV)/bin/rota
OUT    ?= out

.PHONY: demo test lint bench clean

# Planner only (no torch): numpy, pandas, pyomo, highspy, typer, test tools.
$(VENV)/.planner: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

# Profiler extra: torch + torchvision (large; only needed by profiler/ and models/).
# The tests also run the Ray exports on a local Ray cluster, so they install the ray extra, and
# compare the compiled round loop with the Python one, so they install the fast extra (numba).
$(VENV)/.profiler: $(VENV)/.planner
	$(PY) -m pip install -q -e '.[profiler,test,ray,fast]'
	touch $@

demo: $(VENV)/.planner
	mkdir -p $(OUT)
	$(ROTA) plan --table data/throughputs.csv --jobs data/jobs.csv \
	    --cluster data/cluster.yaml --policy max_min_fairness_perf \
	    --out $(OUT)/schedule.json --csv $(OUT)/schedule.csv

test: $(VENV)/.profiler
	$(PY) -m pytest -q tests

# Lint and type gate (CI runs it before the tests): ruff lint + format check, mypy.
$(VENV)/.lint: $(VENV)/.profiler
	$(PY) -m pip install -q -e '.[profiler,test,ray,fast,lint]'
	touch $@

lint: $(VENV)/.lint
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: $(VENV)/.profiler
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache .hypothesis

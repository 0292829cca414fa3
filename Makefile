# squad_memory: `make demo` runs the demo, `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install install-demo demo test test-quick test-sqlite test-postgres test-django6 bench bench-quick lint docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

## What the demo needs only (requirements.txt).
$(VENV)/.installed-demo: requirements.txt pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -r requirements.txt
	touch $@

## The documentation site: Sphinx, MyST and what autodoc imports (requirements-docs.txt).
$(VENV)/.installed-docs: requirements.txt requirements-docs.txt pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -r requirements-docs.txt
	touch $@

## The tests, benchmarks and linters on top (requirements-dev.txt includes the other two);
## compiled on every core afterwards, not one file at a time by pip, nor by each test process
## on first import (which cost the first test run about a minute).
$(VENV)/.installed-dev: requirements.txt requirements-docs.txt requirements-dev.txt pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --no-compile -r requirements-dev.txt
	$(BIN)/python -m compileall -q -j 0 "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
	touch $@ $(VENV)/.installed-docs

install-demo: $(VENV)/.installed-demo

install: $(VENV)/.installed-dev

## The demo: SQLite, offline summarizer, serves on 127.0.0.1:8000, compressions in the
## background by a `db_worker` beside the server (tasks mode: no broker, nothing but Python),
## started again a second after it fails (as a database restart makes it), until the demo ends.
## Ctrl-C reaches the worker too, which stops cleanly (exit status 0): that, or a TERM to the
## loop, ends the loop instead of starting the worker again.
## SQUAD_MEMORY_MODE=inline compresses in the saves; =celery needs a broker and a Celery
## worker of your own. DEMO_ARGS are passed on to `manage.py demo`: another port with
## DEMO_ARGS=--addrport=8001 (checked first, before anything is set up).
DEMO_MODE = $(or $(SQUAD_MEMORY_MODE),tasks)
demo: install-demo
	@$(BIN)/python manage.py demo --check-port --skip-checks $(DEMO_ARGS)
	$(BIN)/python manage.py migrate --verbosity 0
	@export SQUAD_MEMORY_MODE=$(DEMO_MODE); \
	if [ "$$SQUAD_MEMORY_MODE" = tasks ]; then \
	  ( stop=; trap 'stop=1; kill $$pid $$pause 2>/dev/null' INT TERM; \
	    while :; do \
	      $(BIN)/python manage.py db_worker --no-reload --queue-name '*' & pid=$$!; \
	      echo "Compressions run in the background: db_worker (pid $$pid), no broker."; \
	      wait $$pid; status=$$?; \
	      { [ -n "$$stop" ] || [ "$$status" = 0 ]; } && exit 0; \
	      sleep 1 & pause=$$!; wait $$pause; \
	      [ -n "$$stop" ] && exit 0; \
	      echo "db_worker (pid $$pid) exited with $$status; starting it again."; \
	    done ) & worker=$$!; \
	  trap 'kill $$worker 2>/dev/null' EXIT INT TERM; \
	fi; \
	$(BIN)/python manage.py demo $(DEMO_ARGS)

## Every test pass CI runs, each thing once (scripts/run-tests.sh says which): lint, the docs
## tier, SQLite, PostgreSQL, MariaDB, Django 6.1 on Python 3.12 (SQLite; PostgreSQL with prepared statements).
test: install
	VENV=$(VENV) bash scripts/run-tests.sh

## The core tier on SQLite: no process, broker, browser or site build.
test-quick: install
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(or $(TEST_WORKERS),2) -m core

test-sqlite: install
	VENV=$(VENV) bash scripts/run-tests.sh sqlite

test-postgres: install
	VENV=$(VENV) bash scripts/run-tests.sh postgres

test-django6:
	VENV=$(VENV) bash scripts/run-tests.sh django6

bench: install
	$(BIN)/python -m bench

bench-quick: install
	$(BIN)/python -m bench --quick

## The documentation site, into build/docs/ (offline, warnings as errors): open build/docs/index.html.
DOCS_DIR = build/docs
docs: $(VENV)/.installed-docs
	$(BIN)/sphinx-build -W --keep-going -q -b html docs $(DOCS_DIR)
	@echo "The documentation is in $(DOCS_DIR)/index.html"

lint: install
	VENV=$(VENV) bash scripts/run-tests.sh lint

## Everything install, the tests, the demo and the benchmarks leave behind: the environments,
## build/ (the documentation site too) and *.egg-info (the editable install's), var/, caches, and the benchmarks' work
## files and PostgreSQL database (dropped with psql where it is installed and answers).
BENCH_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/sm_bench
clean:
	rm -rf $(VENV) .venv-django6 var test-artifacts build *.egg-info bench/.work \
	  .pytest_cache .mypy_cache .ruff_cache .hypothesis
	@if command -v psql >/dev/null 2>&1; then \
	  PGCONNECT_TIMEOUT=3 psql -q "$(dir $(BENCH_DATABASE_URL))postgres" \
	    -c 'DROP DATABASE IF EXISTS "$(notdir $(BENCH_DATABASE_URL))"' 2>/dev/null \
	  || echo "make clean: could not drop $(notdir $(BENCH_DATABASE_URL)) at $(dir $(BENCH_DATABASE_URL))"; \
	fi

# squad_memory: `make demo` runs the demo, `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install install-demo demo test test-sqlite test-postgres test-django6 bench bench-quick lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

## What the demo needs only (requirements.txt).
$(VENV)/.installed-demo: requirements.txt pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -r requirements.txt
	touch $@

## The tests, benchmarks and linters on top (requirements-dev.txt includes requirements.txt).
$(VENV)/.installed-dev: requirements.txt requirements-dev.txt pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $@

install-demo: $(VENV)/.installed-demo

install: $(VENV)/.installed-dev

## The demo: SQLite, inline summarization, offline summarizer; serves on 127.0.0.1:8000.
demo: install-demo
	$(BIN)/python manage.py demo

## Every test pass CI runs (SQLite, PostgreSQL, Django 6.1 on Python 3.12).
test: install
	VENV=$(VENV) bash scripts/run-tests.sh

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

lint: install
	$(BIN)/ruff check squad_memory project tests bench
	$(BIN)/mypy squad_memory
	PYTHONPATH=$(CURDIR) $(BIN)/lint-imports

clean:
	rm -rf $(VENV) .venv-django6 var test-artifacts .pytest_cache

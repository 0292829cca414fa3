#!/usr/bin/env bash
# Runs the test passes: lint and types, the documentation site (build/docs/, offline,
# warnings as errors), SQLite (Django 5.2), PostgreSQL (Django 5.2; and the storage paths
# again with server-side binding and prepared statements), and Django 6.1 on
# Python 3.12 (SQLite and PostgreSQL). With no argument, all of them; name passes to run only those
# (lint docs sqlite postgres postgres-prepared mariadb django6).
# Where PostgreSQL or Python 3.12 is missing, that pass is skipped with a reason,
# except under CI=true, where every pass must run.
set -uo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PG_URL=${TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/squad_memory}
PASSES=" ${*:-all} "  # the passes named on the command line, or all
CI=${CI:-}
failed=0

in_ci() { [[ "${CI,,}" == "true" || "$CI" == "1" ]]; }

missing() {  # missing WHAT: skip the pass, or fail under CI
  if in_ci; then echo "FAILED: CI=true but $1" >&2; failed=1; else echo "SKIPPED: $1" >&2; fi
}

pg_up() { "$1/bin/python" -c "import psycopg,sys; psycopg.connect('${PG_URL%/*}/postgres', connect_timeout=3).close()" 2>/dev/null; }

run() {  # run LABEL VENV [env...] -- pytest args
  local label=$1 venv=$2; shift 2
  echo "=== $label ==="
  env "$@" || failed=1
}

find_python312() {  # the first candidate that really runs Python 3.12 (pyenv shims may not)
  local c
  for c in "${PYTHON312:-}" $(ls -d "$HOME"/.pyenv/versions/3.12*/bin/python3 /root/.pyenv/versions/3.12*/bin/python3 2>/dev/null) \
           "$(command -v python3.12 || true)"; do
    if [[ -n "$c" ]] && "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
      echo "$c"; return
    fi
  done
}

want() { [[ "$PASSES" == " all " || "$PASSES" == *" $1 "* ]]; }

if want lint; then
  echo "=== ruff (lint and format), mypy (strict) and the import layers ==="
  "$VENV/bin/ruff" check squad_memory project tests bench || failed=1
  "$VENV/bin/ruff" format --check squad_memory project tests bench || failed=1
  "$VENV/bin/mypy" squad_memory || failed=1
  PYTHONPATH=$PWD "$VENV/bin/lint-imports" || failed=1
fi

if want docs; then  # the site `make docs` builds; tests/test_docs.py runs its samples
  echo "=== the documentation site (Sphinx, warnings as errors) ==="
  "$VENV/bin/sphinx-build" -W --keep-going -q -b html docs build/docs || failed=1
fi

if want sqlite; then
  run "SQLite, Django $($VENV/bin/python -c 'import django;print(django.get_version())')" "$VENV" \
    "$VENV/bin/pytest" -m "not postgres" -q -p no:cacheprovider
fi

if want postgres; then
  if pg_up "$VENV"; then
    run "PostgreSQL, Django 5.2" "$VENV" DATABASE_URL="$PG_URL" "$VENV/bin/pytest" -q -p no:cacheprovider
  else
    missing "PostgreSQL is not reachable at ${PG_URL%/*}: the PostgreSQL pass did not run (set TEST_POSTGRES_URL)"
  fi
fi

if want postgres-prepared; then  # Django's server_side_binding + psycopg's prepared statements
  if pg_up "$VENV"; then
    run "PostgreSQL with server-side binding and prepared statements, the storage paths" "$VENV" \
      DATABASE_URL="${PG_URL}_prepared" DATABASE_PREPARED=1 "$VENV/bin/pytest" -q -p no:cacheprovider \
      tests/test_models.py tests/test_routing.py tests/test_storage.py tests/test_summarizing.py \
      tests/test_stateful.py tests/test_concurrency.py tests/test_pgbouncer.py tests/test_compression.py \
      tests/test_api_views.py tests/test_tokens.py
  else
    missing "PostgreSQL is not reachable at ${PG_URL%/*}: the prepared-statements pass did not run"
  fi
fi

if want mariadb; then  # optional: the core storage on MariaDB/MySQL, where one answers
  MYSQL_URL=${TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306/squad_memory}
  if "$VENV/bin/python" -c "import pymysql; pymysql.connect(host='127.0.0.1', user='root', connect_timeout=3).close()" 2>/dev/null; then
    run "MariaDB/MySQL, core storage" "$VENV" DATABASE_URL="$MYSQL_URL" "$VENV/bin/pytest" -q -p no:cacheprovider \
      tests/test_models.py tests/test_storage.py tests/test_summarizing.py tests/test_foreign_stores.py
  else
    echo "SKIPPED: MariaDB/MySQL is not reachable on 127.0.0.1:3306: the MariaDB pass did not run" >&2
  fi
fi

if want django6; then
  PY312=$(find_python312)
  if [[ -z "$PY312" ]]; then
    missing "Python 3.12 was not found (set PYTHON312): the Django 6.1 pass did not run"
  else
    V6=.venv-django6
    if [[ ! -f $V6/.installed || requirements.txt -nt $V6/.installed \
          || requirements-dev.txt -nt $V6/.installed || pyproject.toml -nt $V6/.installed ]]; then
      "$PY312" -m venv $V6 && $V6/bin/pip install -q --upgrade pip \
        && $V6/bin/pip install -q -r requirements-dev.txt "Django>=6.1,<6.2" && touch $V6/.installed \
        || { echo "FAILED: could not install the Django 6.1 environment" >&2; failed=1; }
    fi
    if [[ -f $V6/.installed ]]; then
      DJ6_PG_URL="${PG_URL}_dj6"
      run "SQLite, Django $($V6/bin/python -c 'import django;print(django.get_version())')" "$V6" \
        "$V6/bin/pytest" -m "not postgres and not services" -q -p no:cacheprovider
      if pg_up "$V6"; then
        run "PostgreSQL, Django 6.1" "$V6" DATABASE_URL="$DJ6_PG_URL" \
          "$V6/bin/pytest" -m "not services" -q -p no:cacheprovider
      else
        missing "PostgreSQL is not reachable: the Django 6.1 PostgreSQL pass did not run"
      fi
    fi
  fi
fi

exit $failed

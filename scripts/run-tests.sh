#!/usr/bin/env bash
# Runs the test passes, each thing once:
#   lint               ruff (lint and format), mypy --strict, the import-linter contract
#   docs               the docs tier on SQLite: the documentation site (Sphinx, warnings as
#                      errors), the docs' samples, the wheel and sdist, the package's layout
#   sqlite             every other tier on SQLite, Django 5.2: core, integration, bench;
#                      the one pass of the tests that use no database
#   postgres           the tests that use a database, on PostgreSQL, Django 5.2
#   mariadb            the core storage on MariaDB/MySQL
#   django6            Django 6.1 on Python 3.12: on SQLite, the core tier and the database
#                      tests without brokers, workers or browsers; on PostgreSQL with
#                      server-side binding and prepared statements, the storage paths and
#                      what is PostgreSQL's own (search, replicas, the database threads)
# Each pair of Django version, database and statement mode meets in some pass; the
# passes do not run every test under every combination.
# With no argument, all of them; name passes to run only those. Each pytest pass runs on
# TEST_WORKERS processes (pytest-xdist, default 2; each has its own test database).
# Where a service or Python 3.12 is missing, that pass is skipped with a reason, except
# under CI=true, where every pass must run. A pass that selects no test fails (pytest's
# exit code 5): its selection is wrong.
set -uo pipefail
cd "$(dirname "$0")/.."
{  # read whole before it runs: an edit during a run cannot change the run

VENV=${VENV:-.venv}
PG_URL=${TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/squad_memory}
MYSQL_URL=${TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306/squad_memory}
WORKERS=${TEST_WORKERS:-2}
PASSES=" ${*:-all} "  # the passes named on the command line, or all
CI=${CI:-}
failed=0

in_ci() { [[ "${CI,,}" == "true" || "$CI" == "1" ]]; }

missing() {  # missing WHAT: skip the pass, or fail under CI
  if in_ci; then echo "FAILED: CI=true but $1" >&2; failed=1; else echo "SKIPPED: $1" >&2; fi
}

pg_up() { "$1/bin/python" -c "import psycopg,sys; psycopg.connect('${PG_URL%/*}/postgres', connect_timeout=3).close()" 2>/dev/null; }

mysql_up() {
  "$VENV/bin/python" - "$MYSQL_URL" <<'EOF' 2>/dev/null
import sys, pymysql
from urllib.parse import urlsplit
url = urlsplit(sys.argv[1])
pymysql.connect(host=url.hostname, port=url.port or 3306, user=url.username,
                password=url.password or "", connect_timeout=3).close()
EOF
}

pytest_pass() {  # pytest_pass LABEL VENV [VAR=value...] -- pytest arguments
  local label=$1 venv=$2 started=$SECONDS code; shift 2
  local vars=()
  while [[ $1 != -- ]]; do vars+=("$1"); shift; done; shift
  echo "=== $label ==="
  env "${vars[@]}" "$venv/bin/python" -m pytest -q -p no:cacheprovider \
    -n "$WORKERS" --dist loadgroup --durations=5 "$@"
  code=$?
  case $code in
    0) ;;
    5) echo "FAILED: $label selected no test" >&2; failed=1 ;;
    *) failed=1 ;;
  esac
  echo "--- $label: $((SECONDS - started)) s (exit $code)"
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

# The Django 6.1 environment installs in the background while the passes before it run (its
# compilation at a lower priority than theirs).
V6=.venv-django6 V6_INSTALL="" PY312=""
if want django6; then
  PY312=$(find_python312)
  if [[ -n "$PY312" ]] && [[ ! -f $V6/.installed || requirements.txt -nt $V6/.installed \
        || requirements-dev.txt -nt $V6/.installed || requirements-docs.txt -nt $V6/.installed \
        || pyproject.toml -nt $V6/.installed ]]; then
    rm -f $V6/.installed
    if "$PY312" -m venv $V6; then  # here, so that nothing new appears in the checkout later
      { $V6/bin/pip install -q --upgrade pip \
          && $V6/bin/pip install -q --no-compile -r requirements-dev.txt "Django>=6.1,<6.2" \
          && nice -n 10 $V6/bin/python -m compileall -q -j 0 "$($V6/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
          && touch $V6/.installed; } > $V6/install.log 2>&1 &
      V6_INSTALL=$!
    else
      echo "FAILED: could not create the Django 6.1 environment $V6" >&2; failed=1
    fi
  fi
fi

if want lint; then
  started=$SECONDS
  echo "=== ruff (lint and format), mypy (strict) and the import layers ==="
  "$VENV/bin/ruff" check squad_memory project tests bench || failed=1
  "$VENV/bin/ruff" format --check squad_memory project tests bench || failed=1
  "$VENV/bin/mypy" squad_memory || failed=1
  PYTHONPATH=$PWD "$VENV/bin/lint-imports" || failed=1
  echo "--- lint: $((SECONDS - started)) s"
fi

if want docs; then
  # --dist loadfile: a module's tests on one process, so the site and the packages are built once
  pytest_pass "The docs tier: the site, the samples, the packaging, the layout" "$VENV" \
    -- -m "docs and not postgres" --dist loadfile
fi

if want sqlite; then
  pytest_pass "SQLite, Django $($VENV/bin/python -c 'import django;print(django.get_version())'): core, integration, bench" \
    "$VENV" -- -m "not docs and not postgres"
fi

if want postgres; then
  if pg_up "$VENV"; then
    pytest_pass "PostgreSQL, Django 5.2: the tests that use a database" "$VENV" \
      DATABASE_URL="$PG_URL" -- -m "not nodb and not docs"
  else
    missing "PostgreSQL is not reachable at ${PG_URL%/*}: the PostgreSQL pass did not run (set TEST_POSTGRES_URL)"
  fi
fi

if want mariadb; then
  if mysql_up; then
    pytest_pass "MariaDB/MySQL, the core storage" "$VENV" DATABASE_URL="$MYSQL_URL" \
      -- -m "mariadb and not nodb and not postgres"
  else
    missing "MariaDB/MySQL is not reachable at $MYSQL_URL: the MariaDB pass did not run (set TEST_MYSQL_URL)"
  fi
fi

if want django6; then
  if [[ -z "$PY312" ]]; then
    missing "Python 3.12 was not found (set PYTHON312): the Django 6.1 pass did not run"
  else
    if [[ -n $V6_INSTALL ]] && ! wait "$V6_INSTALL"; then
      cat $V6/install.log >&2
      echo "FAILED: could not install the Django 6.1 environment (log above)" >&2; failed=1
    elif [[ -f $V6/.installed ]]; then
      # The core tier whole (its checks of Django's behaviour use no database either), and the
      # database tests of the other tiers; brokers, workers and browsers ran once, above.
      pytest_pass "SQLite, Django $($V6/bin/python -c 'import django;print(django.get_version())')" "$V6" \
        -- -m "not services and not postgres and not docs and (core or not nodb)"
      if pg_up "$V6"; then  # Django's server_side_binding + psycopg's prepared statements
        pytest_pass "PostgreSQL, Django 6.1, prepared statements: the storage paths, search, replicas, threads" \
          "$V6" DATABASE_URL="${PG_URL}_dj6" DATABASE_PREPARED=1 -- -m "prepared and not nodb"
      else
        missing "PostgreSQL is not reachable: the Django 6.1 PostgreSQL pass did not run"
      fi
    fi
  fi
fi

exit $failed
}

"""The search benchmark still runs: a tiny ``python -m bench.search`` on PostgreSQL.

The full run (1,000,000 messages) is not part of the test suite; timings are not
asserted here, the shape of the report is.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import extra

extra("psycopg", "postgres")

import psycopg
import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.postgres


def server_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}"


def test_search_benchmark_smoke(db: Any) -> None:
    name = f"{connection.settings_dict['NAME']}_benchsmoke"
    command = [sys.executable, "-m", "bench.search", "--messages", "2000", "--per-slot", "100"]
    command += ["--runs", "2", "--database", name, "--server", server_url(), "--json"]
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        with psycopg.connect(f"{server_url()}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    assert report["messages"] == 2000
    figures = report["figures_ms"]
    assert figures["API searches: median"] > 0
    assert {"one user, rare word", "one slot, common word", "save, GIN index in place"} <= set(
        figures
    )

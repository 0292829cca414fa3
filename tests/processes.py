"""Helpers of the tests that run real processes (workers, writers) on the test database."""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import quote

from django.db import connection


def database_url() -> str:
    """The URL of the PostgreSQL test database, for a process started by a test."""
    db = connection.settings_dict
    auth = quote(db["USER"] or "") + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    host = f"{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
    return f"postgres://{auth}@{host}/{quote(db['NAME'])}"


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)

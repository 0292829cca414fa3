"""SQLite with a second writer: the W002 check, and a save that waits out a held write lock."""

from __future__ import annotations

import os
import queue
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError, transaction
from django.test import override_settings

from squad_memory.checks import check_sqlite
from squad_memory.models import Slot
from squad_memory.models.append import _retry_locked as retry_locked

ROOT = Path(__file__).resolve().parent.parent
SQLITE = "django.db.backends.sqlite3"


def w002(default: dict[str, Any]) -> list[str]:
    with override_settings(DATABASES={"default": default}):
        return [m.id for m in check_sqlite()]


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
@pytest.mark.parametrize(
    "default,warned",
    [
        ({"ENGINE": SQLITE, "NAME": "db.sqlite3"}, True),  # startproject
        ({"ENGINE": SQLITE, "NAME": "x", "OPTIONS": {"timeout": 20}}, True),
        ({"ENGINE": SQLITE, "NAME": "x", "OPTIONS": {"transaction_mode": "IMMEDIATE"}}, True),
        (
            {
                "ENGINE": SQLITE,
                "NAME": "x",
                "OPTIONS": {"transaction_mode": "DEFERRED", "timeout": 20},
            },
            True,
        ),
        (
            {
                "ENGINE": SQLITE,
                "NAME": "x",
                "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
            },
            False,
        ),
        ({"ENGINE": "django.db.backends.postgresql", "NAME": "app"}, False),
    ],
)
def test_sqlite_without_immediate_transactions_and_a_timeout_is_warned(
    default: dict[str, Any], warned: bool
) -> None:
    assert w002(default) == (["squad_memory.W002"] if warned else [])


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_the_demo_settings_pass_the_sqlite_check() -> None:
    from project import settings

    default = settings.DATABASES["default"]
    if default["ENGINE"] == SQLITE:
        assert w002(default) == []


def start_saver(db: Path, mode: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{db}", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.sqlite_saver", mode, *(args or ["0.1"])],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


@pytest.mark.parametrize("mode", ["IMMEDIATE", ""])
def test_a_save_retries_while_a_second_connection_holds_the_write_lock(
    tmp_path: Path, mode: str
) -> None:
    db = tmp_path / "db.sqlite3"
    proc = start_saver(db, mode)
    assert proc.stdin is not None and proc.stderr is not None
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # the second writer: holds the write lock
    proc.stdin.write("go\n")
    proc.stdin.flush()
    seen = []
    for line in proc.stderr:  # hold the lock until the save has failed once (or died)
        seen.append(line)
        if "retrying" in line:
            break
    other.execute("ROLLBACK")
    out, err = proc.communicate(timeout=60)
    log = "".join(seen) + err
    assert proc.returncode == 0, log
    assert out.strip() == "saved 1"
    assert "found the database locked (database is locked), attempt 1 of 5" in log
    assert other.execute("SELECT count(*) FROM squad_memory_message").fetchone() == (1,)


def test_an_async_save_that_finds_the_lock_waits_it_out(tmp_path: Path) -> None:
    """An async save meets the held write lock at BEGIN IMMEDIATE and waits (Django's
    ``timeout``), in its thread, until the other writer commits."""
    db = tmp_path / "db.sqlite3"
    proc = start_saver(db, "IMMEDIATE", "30", "async")
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    lines: queue.Queue[str] = queue.Queue()

    def read_stderr() -> None:
        for line in proc.stderr or []:
            lines.put(line)

    reader = threading.Thread(target=read_stderr)
    reader.start()
    seen: list[str] = []
    with closing(sqlite3.connect(db, isolation_level=None, timeout=30)) as other:
        try:
            other.execute("BEGIN IMMEDIATE")  # the second writer: holds the write lock
            proc.stdin.write("go\n")
            proc.stdin.flush()
            time.sleep(1.0)  # the save waits meanwhile (Django's timeout: 30 s)
            assert proc.poll() is None, "".join(list(lines.queue))
            released = time.time()
            other.execute("COMMIT")
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            reader.join(timeout=10)
        log = "".join(seen + list(lines.queue))
        assert proc.returncode == 0, log
        saved, count, done = proc.stdout.read().split()
        assert (saved, count) == ("saved", "2"), log
        assert float(done) > released, "the save finished before the lock was released"
        rows = other.execute("SELECT seq, text FROM squad_memory_message ORDER BY seq").fetchall()
        assert rows == [(1, "first"), (2, "second")]  # stored once, seqs gapless
        assert other.execute("SELECT last_seq FROM squad_memory_slot").fetchall() == [(2,)]


@pytest.mark.django_db
def test_no_retry_inside_a_callers_transaction() -> None:
    calls: list[int] = []

    def locked() -> Any:
        calls.append(1)
        raise OperationalError("database is locked")

    with pytest.raises(OperationalError, match="database is locked"), transaction.atomic():
        retry_locked(Slot.objects.write_db(), locked)
    assert calls == [1]


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_the_sqlite_check_looks_at_the_database_the_router_writes_to() -> None:
    databases = {
        "default": {"ENGINE": "django.db.backends.postgresql", "NAME": "app"},
        "memory": {"ENGINE": SQLITE, "NAME": "memory.sqlite3"},
    }
    routers = ["tests.test_routing.OwnDatabaseRouter"]
    with override_settings(DATABASES=databases, DATABASE_ROUTERS=routers):
        (warning,) = check_sqlite()
    assert warning.id == "squad_memory.W002" and "'memory'" in warning.msg
    assert "DATABASES['memory']['OPTIONS']" in (warning.hint or "")
    immediate = {"transaction_mode": "IMMEDIATE", "timeout": 20}
    databases["memory"]["OPTIONS"] = immediate
    databases["default"] = {"ENGINE": SQLITE, "NAME": "x"}  # holds none of squad_memory's tables
    with override_settings(DATABASES=databases, DATABASE_ROUTERS=routers):
        assert check_sqlite() == []

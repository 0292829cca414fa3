"""The benchmark's floors run exactly the floor's statements, and ``--turn-profile`` runs.

Django's floor (the floor every ratio is taken against) must do the turn as bare
statements through Django's connection and nothing else: two INSERTs and one SELECT of
the newest 2 x TRIGGER_AT rows, decoded into dicts.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from bench.config import TRIGGER_AT
from bench.floor import DjangoFloor

ROOT = Path(__file__).resolve().parent.parent


def test_django_floor_runs_the_floor_statements_through_django(db: Any) -> None:
    floor = DjangoFloor()
    floor.prepare()
    slot = ("u", "s", "a")
    floor.prefill_sync(slot, 100)
    seen: list[str] = []

    def capture(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql.split()[0].upper())
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        floor.insert(slot, "user", "hello")
        floor.insert(slot, "assistant", "hi")
        rows = floor.select(slot)
    assert seen == ["INSERT", "INSERT", "SELECT"]
    assert len(rows) == 2 * TRIGGER_AT
    assert rows[-1] == {
        "role": "assistant",
        "content": [{"text": "hi"}],
        "citations": None,
        "timestamp": rows[-1]["timestamp"],
    }
    assert [r["role"] for r in rows[-2:]] == ["user", "assistant"]
    assert connection.get_autocommit()  # each INSERT committed on its own


def test_django_floor_async_methods_hop_to_a_thread_once_per_call() -> None:
    import threading

    floor = DjangoFloor()
    calls: list[tuple[str, int]] = []

    def spy(name: str) -> Any:
        def record(*args: Any) -> None:
            calls.append((name, threading.get_ident()))

        return record

    # Spies, not the database: a connection opened in asgiref's thread outlives the test
    # (an in-memory SQLite test database is never closed) and would be seen by later tests.
    floor.insert, floor.select = spy("insert"), spy("select")  # type: ignore[method-assign]

    async def turn() -> None:
        await floor.save_user(("u", "s", "a"), 1)
        await floor.save_answer(("u", "s", "a"), 1)
        await floor.fetch(("u", "s", "a"))

    asyncio.run(turn())
    assert [name for name, _ in calls] == ["insert", "insert", "select"]
    assert threading.get_ident() not in {thread for _, thread in calls}


@pytest.mark.services
def test_turn_profile_prints_each_step(tmp_path: Path) -> None:
    env = {
        k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")
    }
    command = [sys.executable, "-m", "bench", "--turn-profile", "--quick", "--cprofile"]
    done = subprocess.run(
        [*command, "--work", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    out = done.stdout
    assert "sqlite: median ms per step (Django floor, squad_memory, driver" in out
    for step in ("save_user", "save_answer", "fetch", "turn"):
        assert f"    {step}" in out
    assert "sqlite: cProfile of 20 sync turns" in out and "squad_memory" in out

"""The native async path when the database fails it: a save the database refuses, a
PostgreSQL backend terminated under it, and the connection of a loop that has shut down."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import DatabaseError, connection, connections, utils

from squad_memory.models import Message, Slot
from squad_memory.native import loops
from squad_memory.storage import DjangoChatStorage
from tests.conftest import msg, texts

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def close_worker_connections() -> Iterator[None]:
    """Close the connection the thread path (and ``on_django``) opened in their worker thread."""
    yield
    asyncio.run(sync_to_async(connections.close_all)())


def sessions(pid: int) -> int:
    """Rows of pg_stat_activity for backend ``pid`` in this database (a Django connection)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND datname = current_database()",
            [pid],
        )
        (count,) = cursor.fetchone()
    return int(count)


def terminate(pid: int) -> None:
    """End backend ``pid`` from a Django connection and wait until it is gone."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    gone_by(pid, 10)


def gone_by(pid: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while sessions(pid):
        assert time.monotonic() < deadline, f"backend {pid} is still there"
        time.sleep(0.01)


async def native_pid() -> int:
    found = await loops.driver(connection.alias)
    assert found.vendor == "postgresql"
    return int(found.conn.info.backend_pid)  # type: ignore[attr-defined]


def stored(agent: str) -> list[tuple[int, str]]:
    slot = Slot.objects.get(agent_id=agent)
    rows = Message.objects.filter(slot=slot).order_by("seq").values_list("seq", "text")
    assert slot.last_seq == len(rows)
    return list(rows)


@pytest.mark.postgres
def test_a_terminated_connection_is_replaced_reads_retry_and_saves_raise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = DjangoChatStorage()
    store.save_chat_message_sync("u", "s", "a", msg("user", "q1"))  # the slot exists
    errors: list[BaseException] = []

    async def play() -> list[Any]:
        on_django = sync_to_async(terminate)
        await store.save_chat_message("u", "s", "a", msg("assistant", "a1"))
        assert texts(await store.fetch_chat("u", "s", "a")) == ["q1", "a1"]
        first = await native_pid()

        await on_django(first)  # a read: retried once on a fresh connection
        fetched = await store.fetch_chat("u", "s", "a")
        second = await native_pid()
        assert second != first

        await on_django(second)  # a save: the caller sees the error, nothing is written
        try:
            await store.save_chat_message("u", "s", "a", msg("user", "q2"))
        except Exception as exc:
            errors.append(exc)
        await store.save_chat_message("u", "s", "a", msg("user", "q2"))  # a fresh connection
        assert await native_pid() not in (first, second)
        return [fetched, await store.fetch_chat("u", "s", "a")]

    with caplog.at_level(logging.DEBUG, logger="squad_memory"):
        fetched, after = asyncio.run(play())
    assert texts(fetched) == ["q1", "a1"]
    assert "terminating connection" in caplog.text  # the read failed once, then
    assert "reading again on a new connection" in caplog.text  # ran again natively
    (error,) = errors
    assert isinstance(error, DatabaseError)
    assert type(error) in (utils.OperationalError, utils.InterfaceError), repr(error)
    assert texts(after) == ["q1", "a1", "q2"]
    assert stored("a") == [(1, "q1"), (2, "a1"), (3, "q2")]  # once each, gapless


@pytest.mark.postgres
def test_the_native_connection_is_gone_once_the_loop_has_shut_down() -> None:
    store = DjangoChatStorage()
    store.save_chat_message_sync("u", "s", "a", msg("user", "q1"))

    async def turn() -> tuple[int, int]:
        await store.save_chat_message("u", "s", "a", msg("assistant", "a1"))
        pid = await native_pid()
        return pid, await sync_to_async(sessions)(pid)

    pid, during = asyncio.run(turn())
    assert during == 1
    gone_by(pid, 5)  # the server drops the session as soon as the client has closed it
    assert sessions(pid) == 0


REFUSE = {  # a trigger refusing the message "poison": the whole transaction fails
    "sqlite": [
        "CREATE TRIGGER sm_refuse BEFORE INSERT ON squad_memory_message WHEN NEW.text = 'poison' "
        "BEGIN SELECT RAISE(ROLLBACK, 'poison refused'); END",
    ],
    "postgresql": [
        "CREATE FUNCTION sm_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF NEW.text = 'poison' THEN RAISE EXCEPTION 'poison refused'; END IF; RETURN NEW; "
        "END $$",
        "CREATE TRIGGER sm_refuse BEFORE INSERT ON squad_memory_message "
        "FOR EACH ROW EXECUTE FUNCTION sm_refuse()",
    ],
}
UNREFUSE = {
    "sqlite": ["DROP TRIGGER sm_refuse"],
    "postgresql": ["DROP TRIGGER sm_refuse ON squad_memory_message", "DROP FUNCTION sm_refuse()"],
}


@contextmanager
def refusing_poison() -> Iterator[None]:
    with connection.cursor() as cursor:
        for statement in REFUSE[connection.vendor]:
            cursor.execute(statement)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            for statement in UNREFUSE[connection.vendor]:
                cursor.execute(statement)


def test_a_save_the_database_refuses_raises_what_the_thread_path_raises() -> None:
    """SQLite's RAISE(ROLLBACK) ends the transaction itself: the native save's own ROLLBACK
    must not replace the error with "no transaction is active" (a bare sqlite3 error)."""
    store = DjangoChatStorage()
    store.save_chat_message_sync("u", "s", "a", msg("user", "q1"))

    async def play() -> pytest.ExceptionInfo[DatabaseError]:
        with pytest.raises(DatabaseError, match="poison refused") as refused:
            await store.save_chat_message("u", "s", "a", msg("assistant", "poison"))
        await store.save_chat_message("u", "s", "a", msg("assistant", "a1"))  # still usable
        return refused

    with refusing_poison():
        with pytest.raises(DatabaseError, match="poison refused") as on_thread:
            store.save_chat_message_sync("u", "s", "a", msg("assistant", "poison"))
        on_loop = asyncio.run(play())
    assert any(str(entry.path).endswith("drivers.py") for entry in on_loop.traceback)  # native
    assert type(on_loop.value) is type(on_thread.value)
    assert type(on_loop.value).__module__ == "django.db.utils"
    assert stored("a") == [(1, "q1"), (2, "a1")]

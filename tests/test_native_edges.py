"""Edges of the native async path: a dropped idle connection, ``assume_role``, a custom
token counter, a burst of first calls on a new loop, private in-memory SQLite."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test import override_settings

from squad_memory.models import Message
from squad_memory.native import drivers, loops
from squad_memory.storage import DjangoChatStorage
from squad_memory.storage import orm as storage_orm
from tests.conftest import msg, texts
from tests.test_native_faults import (  # noqa: F401 (an autouse fixture, used by import)
    close_worker_connections,
    native_pid,
    stored,
    terminate,
)

pytestmark = pytest.mark.django_db(transaction=True)


def count_words(message: Any) -> int:
    """A custom TOKEN_COUNTER: one token per word."""
    return sum(len(str(b.get("text", "")).split()) for b in message.get("content") or [])


@pytest.mark.postgres
def test_an_idle_connection_dropped_meanwhile_does_not_fail_the_next_save(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(drivers, "IDLE_CHECK_SECONDS", 0.0)  # every statement counts as idle
    store = DjangoChatStorage()
    store.save_chat_message_sync("u", "s", "a", msg("user", "q1"))

    async def play() -> tuple[int, int, list[Any]]:
        await store.save_chat_message("u", "s", "a", msg("assistant", "a1"))
        first = await native_pid()
        await sync_to_async(terminate)(first)  # a pooler's idle timeout, a restart
        out = await store.save_chat_message("u", "s", "a", msg("user", "q2"))  # no error
        await store.save_chat_message("u", "s", "a", msg("assistant", "a2"))
        return first, await native_pid(), out

    first, second, out = asyncio.run(play())
    assert second != first and texts(out) == ["q1", "a1", "q2"]
    assert stored("a") == [(1, "q1"), (2, "a1"), (3, "q2"), (4, "a2")]


@pytest.mark.postgres
def test_assume_role_is_set_on_the_native_connection_too() -> None:
    options = connection.settings_dict["OPTIONS"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        (user,) = cursor.fetchone()
    loops.close_all()
    options["assume_role"] = user
    try:

        async def role() -> str:
            found = await loops.driver(connection.alias)
            cursor = await found.conn.execute("SELECT current_user")  # type: ignore[attr-defined]
            (name,) = await cursor.fetchone()
            return str(name)

        assert asyncio.run(role()) == user
    finally:
        del options["assume_role"]
        loops.close_all()


def test_a_custom_token_counter_runs_in_the_thread_path(monkeypatch: pytest.MonkeyPatch) -> None:
    hops: list[str] = []
    real = storage_orm.sync_to_async

    def counting(function: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(function.__name__)
        return real(function, *args, **kwargs)

    monkeypatch.setattr(storage_orm, "sync_to_async", counting)
    store = DjangoChatStorage()
    store.save_chat_message_sync("u", "s", "a", msg("user", "first"))
    with override_settings(SQUAD_MEMORY={"TOKEN_COUNTER": f"{__name__}.count_words"}):
        asyncio.run(store.save_chat_message("u", "s", "a", msg("assistant", "one two three")))
    assert hops == ["save_chat_message_sync"]  # it may do I/O or use the ORM: not on the loop
    assert Message.objects.get(seq=2).tokens == 3


def test_a_burst_of_first_calls_on_a_new_loop_opens_one_connection() -> None:
    store = DjangoChatStorage()
    store.save_chat_message_sync("u", "s", "a", msg("user", "q1"))

    async def burst() -> tuple[list[Any], int]:
        found = await asyncio.gather(*(store.fetch_chat("u", "s", "a") for _ in range(8)))
        mine = loops._drivers.get(asyncio.get_running_loop(), {})
        return list(found), len(mine)

    found, opened = asyncio.run(burst())
    assert all(texts(f) == ["q1"] for f in found)
    assert opened == 1  # the others took the thread path while it was being opened


@pytest.mark.parametrize(
    "name,private",
    [
        (":memory:", True),
        ("file:x?mode=memory", True),
        ("file:memorydb_default?mode=memory&cache=shared", False),  # Django's test database
        ("/var/db.sqlite3", False),
    ],
)
def test_a_private_in_memory_sqlite_database_is_left_to_the_thread_path(
    name: str, private: bool
) -> None:
    assert drivers._private_memory(name) is private


def test_the_async_to_sync_check_sees_every_way_in() -> None:
    """The check's shortcut (asgiref's context variable empty) answers as asgiref does:
    a plain task, a Django ASGI request's context, ``async_to_sync`` from a sync thread
    and from a ``sync_to_async`` thread under a running loop."""
    from asgiref.sync import AsyncToSync, ThreadSensitiveContext, async_to_sync

    from squad_memory import native

    def asgiref_says() -> bool:
        return getattr(AsyncToSync.executors, "current", None) is not None

    seen: list[tuple[str, bool, bool]] = []

    async def look(where: str) -> None:
        seen.append((where, native._in_async_to_sync(), asgiref_says()))

    def from_a_sync_to_async_thread() -> None:
        async_to_sync(look)("async_to_sync under a running loop")

    async def main() -> None:
        await look("a plain task")
        async with ThreadSensitiveContext():  # what Django's ASGIHandler runs a request in
            await look("an ASGI request")
        await sync_to_async(from_a_sync_to_async_thread)()

    asyncio.run(main())
    async_to_sync(look)("async_to_sync from a sync thread")
    assert native._EXECUTORS_VAR is not None  # the shortcut is in use with this asgiref
    assert [(where, mine) for where, mine, _ in seen] == [
        ("a plain task", False),
        ("an ASGI request", False),
        ("async_to_sync under a running loop", True),
        ("async_to_sync from a sync thread", True),
    ]
    assert all(mine == theirs for _, mine, theirs in seen)

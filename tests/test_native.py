"""The native async path: a turn on the event loop without thread hops, and every case
it hands to the thread path (on the database the run is configured with)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import connection, connections, transaction
from django.test import override_settings

from squad_memory import native
from squad_memory.models import Message, Slot
from squad_memory.native import drivers, errors, loops
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
from squad_memory.storage import orm as storage_orm
from tests.conftest import msg, texts

pytestmark = pytest.mark.django_db(transaction=True)

FOLD = "tests.summarizers.fold"


@pytest.fixture(autouse=True)
def close_worker_connections() -> Iterator[None]:
    """Close the connection the thread path opened in its worker thread."""
    yield
    asyncio.run(sync_to_async(connections.close_all)())


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the synchronous methods the async API ran in a thread."""
    seen: list[str] = []
    real = storage_orm.sync_to_async

    def counting(function: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(getattr(function, "__name__", repr(function)))
        return real(function, *args, **kwargs)

    monkeypatch.setattr(storage_orm, "sync_to_async", counting)
    yield seen


def summarizing(trigger_at: int = 4) -> SummarizingChatStorage:
    return SummarizingChatStorage(DjangoChatStorage(), FOLD, trigger_at, 1)


def test_a_turn_runs_on_the_loop_without_a_thread_hop(hops: list[str]) -> None:
    store = summarizing(trigger_at=50)

    async def turns() -> list[Any]:
        await store.save_chat_message("u", "s", "a", msg("assistant", "hi"))  # creates the slot
        hops.clear()
        out = []
        for i in range(10):
            await store.save_chat_message("u", "s", "a", msg("user", f"q{i}"))
            await store.save_chat_message("u", "s", "a", msg("assistant", f"a{i}"))
            out = await store.fetch_chat("u", "s", "a")
        return out

    out = asyncio.run(turns())
    assert hops == []
    assert texts(out)[-2:] == ["q9", "a9"] and len(out) == 21


def test_the_native_and_thread_paths_agree_step_by_step() -> None:
    """The same script through the async API (native) and the sync API (thread path):
    every answer, every fetch, and the rows stored are the same."""
    script: list[tuple[str, Any, int | None]] = [
        ("one", msg("user", "hi"), None),
        ("one", msg("user", "refused: same role"), None),
        ("one", msg("assistant", "hello"), None),
        ("many", [msg("user", "b1"), msg("user", "b2"), msg("assistant", "b3")], None),
    ]
    for i in range(12):  # past trigger_at: compressions on the way, inline
        script.append(("one", msg("user" if i % 2 == 0 else "assistant", f"m{i}"), None))
    script += [
        ("one", msg("assistant", "refused again"), None),
        ("one", msg("user", "trim"), 6),
        ("many", [msg("assistant", "x"), msg("user", "y")], 3),
    ]
    for make in (summarizing, DjangoChatStorage):
        store = make()

        async def native_play(store: Any, agent: str) -> list[Any]:
            seen = []
            for kind, payload, size in script:
                if kind == "one":
                    seen.append(await store.save_chat_message("u", "s", agent, payload, size))
                else:
                    seen.append(await store.save_chat_messages("u", "s", agent, payload, size))
                seen.append(await store.fetch_chat("u", "s", agent))
                seen.append(await store.fetch_chat("u", "s", agent, 3))
            return seen

        def thread_play(store: Any, agent: str) -> list[Any]:
            seen = []
            for kind, payload, size in script:
                if kind == "one":
                    seen.append(store.save_chat_message_sync("u", "s", agent, payload, size))
                else:
                    seen.append(store.save_chat_messages_sync("u", "s", agent, payload, size))
                seen.append(store.fetch_chat_sync("u", "s", agent))
                seen.append(store.fetch_chat_sync("u", "s", agent, 3))
            return seen

        on_loop = asyncio.run(native_play(store, f"{make.__name__}-native"))
        on_thread = thread_play(store, f"{make.__name__}-thread")
        assert [[(m.role, m.content) for m in step] for step in on_loop] == [
            [(m.role, m.content) for m in step] for step in on_thread
        ], make.__name__

        def stored(agent: str) -> list[Any]:
            slot = Slot.objects.get(agent_id=agent)
            rows = Message.objects.filter(slot=slot).order_by("seq")
            state = (
                slot.last_seq,
                slot.last_role,
                slot.visible_from_seq,
                slot.covered_seq,
                slot.buffer_tokens,
                slot.version,
                slot.summary,
            )
            return [state, list(rows.values_list("seq", "role", "content", "text", "tokens"))]

        assert stored(f"{make.__name__}-native") == stored(f"{make.__name__}-thread")


def test_what_the_native_path_hands_to_the_thread_path(hops: list[str]) -> None:
    store = summarizing(trigger_at=3)

    async def play() -> None:
        await store.save_chat_message("u", "s", "a", msg("user", "new slot"))
        await store.save_chat_message("u", "s", "a", msg("user", "refused role"))
        for i in range(3):
            await store.save_chat_message("u", "s", "a", msg("assistant", f"a{i}"))
            await store.save_chat_message("u", "s", "a", msg("user", f"u{i}"))
        await store.fetch_chat("u", "s", "a")
        await store.fetch_all_chats("u", "s")

    asyncio.run(play())
    # a new slot, a refused role (the thread path tells it from a missing slot), the
    # activation by fetch_chat, fetch_all_chats: nothing else hopped.
    assert hops == [
        "save_chat_message_sync",
        "save_chat_message_sync",
        "fetch_chat_sync",
        "fetch_all_chats_sync",
    ]
    assert texts(store.fetch_chat_sync("u", "s", "a"))[-2:] == ["a2", "u2"]


def test_a_compression_due_after_a_native_save_is_claimed_and_run_once() -> None:
    from tests import summarizers

    store = summarizing(trigger_at=2)
    summarizers.CALLS.clear()

    async def play() -> list[Any]:
        await store.save_chat_messages(
            "u", "s", "a", [msg("user", "u0"), msg("assistant", "a0")] * 3
        )
        await store.fetch_chat("u", "s", "a")  # activates the buffer: the first compression
        for i in range(1, 13):
            await store.save_chat_message(
                "u", "s", "a", msg("user" if i % 2 else "assistant", f"m{i}")
            )
        return await store.fetch_chat("u", "s", "a")

    out = asyncio.run(play())
    slot = Slot.objects.get(agent_id="a")
    assert slot.active and not slot.pending_token and slot.last_seq == 18
    assert (
        len(summarizers.CALLS) >= 3
    )  # compressions happened, each once (the log has one row each)
    assert slot.compressions.filter(outcome="applied").count() == len(summarizers.CALLS)
    assert texts(out)[0].startswith("S(") and texts(out)[-1] == "m12"


def test_the_setting_turns_the_native_path_off(hops: list[str]) -> None:
    store = summarizing(trigger_at=50)
    store.save_chat_message_sync("u", "s", "a", msg("user", "first"))
    with override_settings(SQUAD_MEMORY={"NATIVE_ASYNC": False}):
        asyncio.run(store.save_chat_message("u", "s", "a", msg("assistant", "second")))
        asyncio.run(store.fetch_chat("u", "s", "a"))
    assert hops == ["save_chat_message_sync", "fetch_chat_sync"]


def test_a_call_from_sync_code_joins_the_callers_transaction() -> None:
    """``async_to_sync`` from a view inside ``transaction.atomic``: the save is part of the
    caller's transaction (thread path), so a rollback removes it."""
    store = summarizing(trigger_at=50)
    store.save_chat_message_sync("u", "s", "a", msg("user", "kept"))

    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        async_to_sync(store.save_chat_message)("u", "s", "a", msg("assistant", "rolled back"))
        assert texts(async_to_sync(store.fetch_chat)("u", "s", "a")) == ["kept", "rolled back"]
        raise Rollback
    assert texts(store.fetch_chat_sync("u", "s", "a")) == ["kept"]
    assert Message.objects.count() == 1


def test_the_loops_connection_is_closed_when_the_loop_shuts_down() -> None:
    store = summarizing(trigger_at=50)
    store.save_chat_message_sync("u", "s", "a", msg("user", "first"))
    opened: list[drivers.Driver] = []

    async def turn() -> None:
        await store.fetch_chat("u", "s", "a")
        opened.append(await loops.driver(connection.alias))

    asyncio.run(turn())
    (found,) = opened
    if found.vendor == "postgresql":
        assert found.conn.closed  # type: ignore[attr-defined]
    else:
        with pytest.raises(Exception, match="closed"):
            found.conn.execute("SELECT 1")  # type: ignore[attr-defined]


def test_driver_errors_are_djangos_and_locks_mean_the_thread_path() -> None:
    import sqlite3

    from django.db import utils

    assert isinstance(
        errors.as_django(sqlite3.OperationalError("database is locked")), errors.Unavailable
    )
    assert (
        type(errors.as_django(sqlite3.IntegrityError("UNIQUE constraint failed")))
        is utils.IntegrityError
    )
    assert (
        type(errors.as_django(sqlite3.OperationalError("disk I/O error"))) is utils.OperationalError
    )
    assert isinstance(errors.as_django(KeyError("x")), KeyError)


def test_a_failed_native_read_says_so_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    store = summarizing(trigger_at=50)
    store.save_chat_message_sync("u", "s", "a", msg("user", "first"))

    async def busy_driver(alias: str) -> Any:
        raise errors.Unavailable("the loop's connection is busy")

    with caplog.at_level(logging.DEBUG, logger="squad_memory"):
        real = native.driver
        native.driver = busy_driver  # type: ignore[assignment]
        try:
            out = asyncio.run(store.fetch_chat("u", "s", "a"))
        finally:
            native.driver = real  # type: ignore[assignment]
    assert texts(out) == ["first"]
    assert "busy" in caplog.text and "thread path" in caplog.text

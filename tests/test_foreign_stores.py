"""SummarizingChatStorage over agent-squad's own stores: InMemoryChatStorage,
SqlChatStorage on a local libsql file, and DynamoDbChatStorage on moto's DynamoDB."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from agent_squad.storage import ChatStorage, InMemoryChatStorage
from django.db import connections

from squad_memory.models import Compression, Message, Slot
from squad_memory.storage import SummarizingChatStorage
from tests import summarizers
from tests.conftest import msg, texts

# Transactional: an inline compression runs on commit (transaction.on_commit), as in a
# project's autocommit code; a rolled-back test would never run it.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.mariadb]


@asynccontextmanager
async def in_memory(tmp_path: Path) -> AsyncIterator[ChatStorage]:
    yield InMemoryChatStorage()


@asynccontextmanager
async def libsql(tmp_path: Path) -> AsyncIterator[ChatStorage]:
    from agent_squad.storage.sql_chat_storage import SqlChatStorage

    store = SqlChatStorage(url=f"file:{tmp_path / 'chat.db'}")
    await store.initialize()
    try:
        yield store
    finally:
        await store.client.close()


@asynccontextmanager
async def dynamodb(tmp_path: Path) -> AsyncIterator[ChatStorage]:
    import boto3
    from agent_squad.storage.dynamodb_chat_storage import DynamoDbChatStorage
    from moto import mock_aws

    with mock_aws():
        boto3.client("dynamodb", region_name="us-east-1").create_table(
            TableName="chats",
            KeySchema=[
                {"AttributeName": "PK", "KeyType": "HASH"},
                {"AttributeName": "SK", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "PK", "AttributeType": "S"},
                {"AttributeName": "SK", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        yield DynamoDbChatStorage("chats", "us-east-1")


STORES = {"in_memory": in_memory, "libsql": libsql, "dynamodb": dynamodb}


@pytest.fixture(autouse=True)
def _aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(name, "testing")


async def turn(store: ChatStorage, i: int) -> None:
    await store.save_chat_message("u", "s", "a", msg("user", f"q{i}"), 100)
    await store.save_chat_message("u", "s", "a", msg("assistant", f"a{i}"), 100)


def scenario(make: Callable[[Path], Any], tmp_path: Path) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with make(tmp_path) as inner:
            store = SummarizingChatStorage(inner, summarizers.fold, 2, 1)
            for i in range(3):
                await turn(store, i)
            seen["activated"] = texts(await store.fetch_chat("u", "s", "a"))
            await store.save_chat_message("u", "s", "a", msg("assistant", "same role: refused"))
            await turn(store, 3)
            seen["after"] = texts(await store.fetch_chat("u", "s", "a"))
            broken = SummarizingChatStorage(inner, summarizers.boom, 2, 1)
            seen["fresh"] = texts(await broken.fetch_chat("u", "s", "a"))
            await turn(broken, 4)  # the summarizer fails: raw messages still reach the store
            seen["failed_buffer"] = texts(await store.fetch_chat("u", "s", "a"))
            seen["raw"] = texts(await store.fetch_all_chats("u", "s"))
        return seen

    return asyncio.run(go())


@pytest.mark.parametrize("name", list(STORES))
def test_wrapper_over_agent_squad_stores(name: str, tmp_path: Path) -> None:
    seen = scenario(STORES[name], tmp_path)
    assert seen["activated"] == ["S(q0+a0+q1+a1)", "q2", "a2"]
    assert seen["after"] == ["S(S(q0+a0+q1+a1)+q2+a2)", "q3", "a3"]
    assert seen["fresh"] == seen["after"]  # a new wrapper instance: same buffer, no summarizer call
    assert seen["failed_buffer"] == ["S(S(q0+a0+q1+a1)+q2+a2)", "q3", "a3", "q4", "a4"]
    assert seen["raw"] == [t for i in range(5) for t in (f"q{i}", f"[a] a{i}")]
    assert Compression.objects.filter(outcome="failed").count() == 1
    slot = Slot.objects.get()
    assert (
        slot.namespace
        == {
            "in_memory": "InMemoryChatStorage",
            "libsql": "SqlChatStorage",
            "dynamodb": "DynamoDbChatStorage",
        }[name]
    )


def test_sync_methods_work_over_a_foreign_store() -> None:
    store = SummarizingChatStorage(InMemoryChatStorage(), summarizers.fold, 2, 1)
    for i in range(3):
        store.save_chat_message_sync("u", "s", "a", msg("user", f"q{i}"))
        store.save_chat_message_sync("u", "s", "a", msg("assistant", f"a{i}"))
    assert texts(store.fetch_chat_sync("u", "s", "a")) == ["S(q0+a0+q1+a1)", "q2", "a2"]
    assert len(store.fetch_all_chats_sync("u", "s")) == 6


def test_history_pages_over_a_foreign_store_are_cut_from_its_answer(settings: Any) -> None:
    """The store's fetch_all_chats answer, whatever FETCH_ALL_LIMIT (squad_memory's rows'
    bound), a page at a time from the newest."""
    settings.SQUAD_MEMORY = {**settings.SQUAD_MEMORY, "FETCH_ALL_LIMIT": 2}
    store = SummarizingChatStorage(InMemoryChatStorage(), summarizers.fold, 50, 1)
    for i in range(4):
        store.save_chat_message_sync("u", "s", "a", msg("user", f"q{i}"))
        store.save_chat_message_sync("u", "s", "a", msg("assistant", f"a{i}"))
    whole = texts(store.fetch_all_chats_sync("u", "s"))
    assert len(whole) == 8
    first, before = store.history_page_sync("u", "s", 3)
    second, before = store.history_page_sync("u", "s", 3, before)
    third, before = store.history_page_sync("u", "s", 3, before)
    assert texts(third) + texts(second) + texts(first) == whole and before == {}


def test_compress_now_on_an_inactive_foreign_slot_summarizes_the_stores_history() -> None:
    store = SummarizingChatStorage(InMemoryChatStorage(), summarizers.fold, 5, 1)
    for i in range(2):
        store.save_chat_message_sync("u", "s", "a", msg("user", f"q{i}"))
        store.save_chat_message_sync("u", "s", "a", msg("assistant", f"a{i}"))
    outcome = store.compress_now("u", "s", "a")
    assert outcome is not None and outcome.applied
    assert texts(store.fetch_chat_sync("u", "s", "a")) == ["S(q0+a0)", "q1", "a1"]


class LateWriteStore(InMemoryChatStorage):
    """While its fetch_chat is under way, another save lands through the wrapper."""

    wrapper: SummarizingChatStorage | None = None

    async def fetch_chat(
        self, user_id: str, session_id: str, agent_id: str, max_history_size: Any = None
    ) -> Any:
        before = await super().fetch_chat(user_id, session_id, agent_id)
        if self.wrapper is not None:
            wrapper, self.wrapper = self.wrapper, None
            await wrapper.save_chat_message(user_id, session_id, agent_id, msg("user", "late"))
        return before


def test_a_save_during_foreign_activation_is_not_lost() -> None:
    inner = LateWriteStore()
    store = SummarizingChatStorage(inner, summarizers.fold, 2, 1)

    async def go() -> list[str]:
        for i in range(3):
            await turn(store, i)
        inner.wrapper = store
        first = texts(await store.fetch_chat("u", "s", "a"))
        assert "late" not in first  # activation was refused: the read missed "late"
        return texts(await store.fetch_chat("u", "s", "a"))

    assert asyncio.run(go())[-1] == "late"


@pytest.mark.postgres  # threads writing at once: SQLite's in-memory test database refuses them
def test_concurrent_saves_over_a_foreign_store_keep_the_buffer_and_the_store_in_step() -> None:
    """Threads saving into one slot: the store and the wrapper's rows see the same saves in the
    same order (each save's store call and rows are one step, one slot at a time)."""
    inner = InMemoryChatStorage()
    store = SummarizingChatStorage(inner, summarizers.fold, 50, 1)
    for i in range(3):
        store.save_chat_message_sync("u", "s", "a", msg("user", f"q{i}"))
        store.save_chat_message_sync("u", "s", "a", msg("assistant", f"a{i}"))
    assert store.compress_now("u", "s", "a").applied  # active: the wrapper keeps its own rows
    start = threading.Barrier(6)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            start.wait()
            for i in range(12):
                role = "user" if i % 2 == 0 else "assistant"
                store.save_chat_message_sync("u", "s", "a", msg(role, f"w{n}-{i}"))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    history = texts(asyncio.run(inner.fetch_chat("u", "s", "a")))
    slot = Slot.objects.get()
    rows = Message.objects.filter(slot=slot).order_by("seq")
    assert [row.text for row in rows] == history
    assert len(history) > 6
    assert errors == []
    assert texts(store.fetch_chat_sync("u", "s", "a"))[1:] == history[4:]  # the kept pair, then


def test_an_empty_save_over_a_foreign_store_creates_no_slot() -> None:
    store = SummarizingChatStorage(InMemoryChatStorage(), summarizers.fold, 2, 1)
    assert store.save_chat_messages_sync("u", "s", "a", []) == []
    assert not Slot.objects.exists()


class LoopBound(InMemoryChatStorage):  # type: ignore[misc]
    """A store whose clients belong to the event loop that made them (as aiohttp's or
    aioboto3's do): each call notes the loop it runs in."""

    def __init__(self) -> None:
        super().__init__()
        self.loops: set[asyncio.AbstractEventLoop] = set()

    async def save_chat_message(self, *args: Any, **kwargs: Any) -> Any:
        self.loops.add(asyncio.get_running_loop())
        return await super().save_chat_message(*args, **kwargs)

    async def fetch_chat(self, *args: Any, **kwargs: Any) -> Any:
        self.loops.add(asyncio.get_running_loop())
        return await super().fetch_chat(*args, **kwargs)


def test_a_foreign_store_is_called_in_the_event_loop_of_the_async_caller() -> None:
    inner = LoopBound()
    store = SummarizingChatStorage(inner, summarizers.fold, 2, 1)

    async def go() -> asyncio.AbstractEventLoop:
        for i in range(3):
            await store.save_chat_message("u", "s", "a", msg("user", f"q{i}"))
            await store.save_chat_message("u", "s", "a", msg("assistant", f"a{i}"))
        assert texts(await store.fetch_chat("u", "s", "a")) == ["S(q0+a0+q1+a1)", "q2", "a2"]
        return asyncio.get_running_loop()

    assert inner.loops == {asyncio.run(go())}


class Hanging(InMemoryChatStorage):  # type: ignore[misc]
    """A store whose saves never end while ``hang`` is set."""

    hang = True

    async def save_chat_message(self, *args: Any, **kwargs: Any) -> Any:
        while self.hang:
            await asyncio.sleep(0.05)
        return await super().save_chat_message(*args, **kwargs)


def test_a_store_call_whose_caller_left_does_not_hold_the_slot() -> None:
    """The caller gave up (a timeout) and its event loop stopped, not closed, before the
    store's call ended: the database thread stops waiting for it, the slot's transaction
    ends, and the next save of the slot goes through."""
    inner = Hanging()
    store = SummarizingChatStorage(inner, summarizers.fold, 2, 1)
    loop = asyncio.new_event_loop()
    try:
        saving = store.save_chat_message("u", "s", "a", msg("user", "lost"))
        with pytest.raises(TimeoutError):
            loop.run_until_complete(asyncio.wait_for(saving, 0.2))
        inner.hang = False  # the loop is stopped: nothing runs the first save's call now
        with ThreadPoolExecutor(1) as pool:
            saved = pool.submit(store.save_chat_message_sync, "u", "s", "a", msg("user", "kept"))
            assert texts(saved.result(timeout=20)) == ["kept"]
    finally:
        loop.run_until_complete(asyncio.sleep(0.1))  # the abandoned call's cancellation
        loop.close()


def test_a_caller_that_gives_up_cancels_the_stores_call_and_nothing_is_stored() -> None:
    """A timeout around a save whose store hangs: the store's call is cancelled with it,
    nothing is stored, and the conversation goes on in the same event loop."""
    inner = Hanging()
    store = SummarizingChatStorage(inner, summarizers.fold, 2, 1)

    async def go() -> list[str]:
        saving = store.save_chat_message("u", "s", "a", msg("user", "lost"))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(saving, 0.2)
        inner.hang = False  # a call still running would now store its message
        return texts(await store.save_chat_message("u", "s", "a", msg("user", "kept")))

    assert asyncio.run(go()) == ["kept"]
    assert texts(asyncio.run(inner.fetch_all_chats("u", "s"))) == ["kept"]

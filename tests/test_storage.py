"""DjangoChatStorage behaves like agent-squad's InMemoryChatStorage, durably."""

from __future__ import annotations

import asyncio
import re
import threading
from typing import Any

import pytest
from agent_squad.storage import ChatStorage, InMemoryChatStorage
from agent_squad.types import ConversationMessage, ParticipantRole
from django.db import connection
from django.test.utils import CaptureQueriesContext

from squad_memory.exceptions import InvalidMessage, InvalidSlotKey
from squad_memory.models import Message, Slot
from squad_memory.storage import DjangoChatStorage
from tests.conftest import msg, texts

# Transactional: an inline compression runs on commit (transaction.on_commit), as in a
# project's autocommit code; a rolled-back test would never run it.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.prepared, pytest.mark.mariadb]


def dump(messages: list[ConversationMessage]) -> list[tuple[str, Any]]:
    return [(m.role, m.content) for m in messages]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_is_a_real_chat_storage() -> None:
    assert isinstance(DjangoChatStorage(), ChatStorage)


SCRIPT: list[tuple[str, Any]] = [
    ("one", ("a1", msg("user", "hi"), None)),
    ("one", ("a1", msg("user", "repeat user: skipped"), None)),
    ("one", ("a1", msg("assistant", "hello"), None)),
    ("one", ("a2", msg("user", "other agent"), None)),
    ("many", ("a1", [msg("user", "b1"), msg("user", "b2"), msg("assistant", "b3")], None)),
    ("one", ("a2", msg("assistant", "answer two"), 4)),
    ("one", ("a1", msg("user", "trim me"), 5)),
    ("one", ("a1", msg("assistant", "after trim"), None)),
    ("many", ("a2", [msg("user", "x"), msg("assistant", "y")], 3)),
]


def play(storage: ChatStorage) -> list[Any]:
    async def go() -> list[Any]:
        seen: list[Any] = []
        for kind, (agent, payload, size) in SCRIPT:
            if kind == "one":
                out = await storage.save_chat_message("u", "s", agent, payload, size)
            else:
                out = await storage.save_chat_messages("u", "s", agent, payload, size)
            seen.append(dump(out))
            await asyncio.sleep(0.002)  # distinct timestamps, as in real traffic
        for agent in ("a1", "a2"):
            seen.append(dump(await storage.fetch_chat("u", "s", agent)))
            seen.append(dump(await storage.fetch_chat("u", "s", agent, 3)))
        seen.append(dump(await storage.fetch_all_chats("u", "s")))
        return seen

    return run(go())


def test_same_results_as_in_memory_storage() -> None:
    assert play(DjangoChatStorage()) == play(InMemoryChatStorage())


def test_role_rule_skips_a_repeated_role_and_returns_the_conversation() -> None:
    store = DjangoChatStorage()
    store.save_chat_message_sync("u", "s", "a", msg("user", "one"))
    out = store.save_chat_message_sync("u", "s", "a", msg(ParticipantRole.USER.value, "two"))
    assert texts(out) == ["one"]
    assert Message.objects.count() == 1


def test_enum_roles_are_stored_as_plain_strings() -> None:
    store = DjangoChatStorage()
    store.save_chat_message_sync(
        "u", "s", "a", ConversationMessage(ParticipantRole.USER, [{"text": "x"}])
    )
    assert Message.objects.get().role == "user"
    assert store.fetch_chat_sync("u", "s", "a")[0].role == "user"


def test_trimmed_messages_stay_in_the_database_marked() -> None:
    store = DjangoChatStorage()
    for i in range(5):
        store.save_chat_messages_sync(
            "u", "s", "a", [msg("user", f"q{i}"), msg("assistant", f"a{i}")]
        )
    store.save_chat_message_sync("u", "s", "a", msg("user", "last"), max_history_size=3)
    assert texts(store.fetch_chat_sync("u", "s", "a")) == ["a4", "last"]
    rows = list(Message.objects.select_related("slot").order_by("seq"))
    assert len(rows) == 11
    assert [r.is_trimmed for r in rows] == [True] * 9 + [False] * 2
    assert Message.objects.trimmed().count() == 9 and Message.objects.visible().count() == 2


@pytest.mark.parametrize("size,expected", [(None, 6), (0, 6), (1, 6), (2, 2), (3, 2), (4, 4)])
def test_fetch_trims_with_even_rounding(size: int | None, expected: int) -> None:
    store = DjangoChatStorage()
    store.save_chat_messages_sync(
        "u", "s", "a", [msg(r, str(i)) for i, r in enumerate(["user", "assistant"] * 3)]
    )
    assert len(store.fetch_chat_sync("u", "s", "a", size)) == expected


def test_fetch_all_chats_merges_agents_by_time_with_prefixes() -> None:
    store = DjangoChatStorage()
    store.save_chat_message_sync("u", "s", "tech", msg("user", "q1"))
    store.save_chat_message_sync("u", "s", "tech", msg("assistant", "a1"))
    store.save_chat_message_sync("u", "s", "travel", msg("user", "q2"))
    store.save_chat_message_sync("u", "s", "travel", msg("assistant", "a2"))
    store.save_chat_message_sync("u", "other", "tech", msg("user", "elsewhere"))
    assert texts(store.fetch_all_chats_sync("u", "s")) == ["q1", "[tech] a1", "q2", "[travel] a2"]


def test_fetch_all_chats_keeps_each_slots_order_when_its_clock_steps_back() -> None:
    """Two concurrent saves stamp their time, then queue for the slot's lock: the later
    row may hold the earlier time. The merge never puts it before the slot's earlier row."""
    store = DjangoChatStorage()
    store.save_chat_messages_sync("u", "s", "tech", [msg("user", "q1"), msg("assistant", "a1")])
    store.save_chat_messages_sync("u", "s", "travel", [msg("user", "q2"), msg("assistant", "a2")])
    tech = Message.objects.filter(slot__agent_id="tech")
    tech.filter(seq=1).update(timestamp=1000)
    tech.filter(seq=2).update(timestamp=990)  # stamped first, stored second
    Message.objects.filter(slot__agent_id="travel").update(timestamp=995)
    # By the clock alone: a1 (990), q2, a2 (995), q1 (1000): tech's answer before its question.
    assert texts(store.fetch_all_chats_sync("u", "s")) == ["q2", "[travel] a2", "q1", "[tech] a1"]
    tech.filter(seq=1).update(timestamp=900)
    assert texts(store.fetch_all_chats_sync("u", "s")) == ["q1", "[tech] a1", "q2", "[travel] a2"]
    tech.update(timestamp=999)
    assert texts(store.fetch_all_chats_sync("u", "s")) == ["q2", "[travel] a2", "q1", "[tech] a1"]


def _alternating(count: int, first: int = 0) -> list[ConversationMessage]:
    return [msg("user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(first, count)]


def test_fetch_all_chats_reads_at_most_the_newest_of_each_slot(settings: Any) -> None:
    """An untrimmed slot: FETCH_ALL_LIMIT newest messages of each, taken by a bound on seq in
    the one statement (the index range, not a sort of the whole history)."""
    settings.SQUAD_MEMORY = {**settings.SQUAD_MEMORY, "FETCH_ALL_LIMIT": 10}
    store = DjangoChatStorage()
    store.save_chat_messages_sync("u", "s", "long", _alternating(30))
    store.save_chat_messages_sync("u", "s", "short", [msg("user", "q")])
    with CaptureQueriesContext(connection) as captured:
        fetched = texts(store.fetch_all_chats_sync("u", "s"))
    assert [t.removeprefix("[long] ") for t in fetched if t != "q"] == [
        f"m{i}" for i in range(20, 30)
    ]
    assert "q" in fetched and len(fetched) == 11
    (statement,) = captured
    assert re.search(r"last_seq\W*\s*-", statement["sql"]), statement["sql"]


@pytest.mark.parametrize("size", [4, 10])
def test_fetch_all_chats_of_trimmed_slots_is_as_before(settings: Any, size: int) -> None:
    """A slot agent-squad trims (max_history_size at most FETCH_ALL_LIMIT) reads the same."""
    store = DjangoChatStorage()
    store.save_chat_messages_sync("u", "s", "a", _alternating(30), size)
    before = texts(store.fetch_all_chats_sync("u", "s"))
    settings.SQUAD_MEMORY = {**settings.SQUAD_MEMORY, "FETCH_ALL_LIMIT": 10}
    assert texts(store.fetch_all_chats_sync("u", "s")) == before
    assert len(before) == size


def test_fetch_all_chats_reads_every_message_without_a_limit(settings: Any) -> None:
    settings.SQUAD_MEMORY = {**settings.SQUAD_MEMORY, "FETCH_ALL_LIMIT": None}
    store = DjangoChatStorage()
    store.save_chat_messages_sync("u", "s", "a", _alternating(1500))
    assert len(store.fetch_all_chats_sync("u", "s")) == 1500
    settings.SQUAD_MEMORY = {}
    assert len(store.fetch_all_chats_sync("u", "s")) == 1000  # the default


def _walk(store: DjangoChatStorage, size: int) -> list[list[str]]:
    pages, before = [], None
    while True:
        page, before = store.history_page_sync("u", "s", size, before)
        pages.append(texts(page))
        if not before:
            return pages


def test_history_pages_walk_the_merged_history_newest_first(settings: Any) -> None:
    """Pages of any size, newest first, make fetch_all_chats' merged history exactly once,
    each read with two statements whatever the history's length."""
    settings.SQUAD_MEMORY = {**settings.SQUAD_MEMORY, "FETCH_ALL_LIMIT": None}
    store = DjangoChatStorage()
    for turn in range(12):
        agent = "tech" if turn % 3 else "travel"
        store.save_chat_messages_sync(
            "u", "s", agent, [msg("user", f"q{turn}"), msg("assistant", f"a{turn}")]
        )
    store.save_chat_messages_sync("u", "s", "trimmed", _alternating(8), 2)
    whole = texts(store.fetch_all_chats_sync("u", "s"))
    for size in (1, 3, 5, 100):
        pages = _walk(store, size)
        assert [text for page in reversed(pages) for text in page] == whole
        assert all(len(page) == size for page in pages[:-1])  # the oldest may be short
    with CaptureQueriesContext(connection) as captured:
        store.history_page_sync("u", "s", 3)
    assert len(captured) == 2


def test_a_history_page_reads_only_the_sessions_slots() -> None:
    """A position naming another session's slot (a crafted cursor) reads nothing of it."""
    store = DjangoChatStorage()
    store.save_chat_messages_sync("u", "s", "a", _alternating(4))
    store.save_chat_messages_sync("u", "theirs", "a", _alternating(4))
    theirs = Slot.objects.get(session_id="theirs")
    assert store.history_page_sync("u", "s", 10, {theirs.pk: 5}) == ([], {})


def test_messages_stored_while_a_client_pages_are_on_a_new_first_page() -> None:
    store = DjangoChatStorage()
    store.save_chat_messages_sync("u", "s", "a", _alternating(6))
    first, before = store.history_page_sync("u", "s", 2)
    store.save_chat_messages_sync("u", "s", "a", _alternating(8, 6))
    store.save_chat_messages_sync("u", "s", "joined", [msg("user", "new agent")])
    second, before = store.history_page_sync("u", "s", 2, before)
    third, before = store.history_page_sync("u", "s", 2, before)
    assert [texts(first), texts(second), texts(third), before] == [
        ["m4", "[a] m5"], ["m2", "[a] m3"], ["m0", "[a] m1"], {},
    ]  # fmt: skip
    assert texts(store.history_page_sync("u", "s", 3)[0]) == ["m6", "[a] m7", "new agent"]


def test_returned_lists_are_fresh() -> None:
    store = DjangoChatStorage()
    out = store.save_chat_message_sync("u", "s", "a", msg("user", "keep"))
    out[0].content[0]["text"] = "mutated"
    out.append(msg("assistant", "injected"))
    fetched = store.fetch_chat_sync("u", "s", "a")
    fetched[0].content.append({"text": "more"})
    assert dump(store.fetch_chat_sync("u", "s", "a")) == [("user", [{"text": "keep"}])]


def test_server_timestamps_in_ms() -> None:
    import time

    before = int(time.time() * 1000)
    DjangoChatStorage().save_chat_message_sync("u", "s", "a", msg("user", "x"))
    assert before <= Message.objects.get().timestamp <= int(time.time() * 1000)


def test_tool_blocks_and_citations_round_trip() -> None:
    store = DjangoChatStorage()
    blocks = [{"toolUse": {"toolUseId": "t1", "name": "weather", "input": {"city": "Paris"}}}]
    store.save_chat_message_sync(
        "u", "s", "a", ConversationMessage("assistant", blocks, citations=[{"url": "x"}])
    )
    out = store.fetch_chat_sync("u", "s", "a")
    assert out[0].content == blocks and out[0].citations == [{"url": "x"}]


def test_empty_batch_stores_nothing() -> None:
    store = DjangoChatStorage()
    assert store.save_chat_messages_sync("u", "s", "a", []) == []
    assert Message.objects.count() == 0


@pytest.mark.parametrize(
    "bad",
    [
        ConversationMessage("system", [{"text": "x"}]),
        ConversationMessage("user", "not a list"),
        ConversationMessage("user", ["not a dict"]),
        "just a string",
    ],
)
def test_bad_messages_raise_a_clear_error_and_store_nothing(bad: Any) -> None:
    store = DjangoChatStorage()
    with pytest.raises(InvalidMessage):
        store.save_chat_messages_sync("u", "s", "a", [msg("user", "fine"), bad])
    assert Message.objects.count() == 0 and Slot.objects.count() == 0


@pytest.mark.parametrize(
    "key", [("", "s", "a"), ("u", None, "a"), ("u", "s", "x" * 256), ("u\x00", "s", "a")]
)
def test_bad_ids_raise_a_clear_error(key: tuple[Any, Any, Any]) -> None:
    with pytest.raises(InvalidSlotKey):
        DjangoChatStorage().save_chat_message_sync(*key, msg("user", "x"))


def test_async_methods_work_from_any_thread_and_event_loop() -> None:
    store = DjangoChatStorage()
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            asyncio.run(store.save_chat_messages("u", "s", f"agent{n}", [msg("user", f"{n}")]))
            assert texts(asyncio.run(store.fetch_chat("u", "s", f"agent{n}"))) == [f"{n}"]
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(asyncio.run(store.fetch_all_chats("u", "s"))) == 4


def test_history_survives_a_new_instance() -> None:
    DjangoChatStorage().save_chat_message_sync("u", "s", "a", msg("user", "durable"))
    assert texts(DjangoChatStorage().fetch_chat_sync("u", "s", "a")) == ["durable"]


@pytest.mark.parametrize(
    "content",
    [
        [{"image": b"\x89PNG"}],
        [{"text": float("nan")}],
        [{"text": "nul\x00byte"}],
        [{"text": "\ud800"}],
        [{"text": "ok \U0001f600", "nul\x00key": 1}],
        [{"toolUse": {"input": [["deep", "\udfff"]]}}],
        [{"toolUse": {"input": ("a tuple, written as an array", "nul\x00")}}],
    ],
)
def test_content_that_cannot_be_stored_as_json_is_refused(content: list[Any]) -> None:
    with pytest.raises(InvalidMessage):
        DjangoChatStorage().save_chat_message_sync(
            "u", "s", "a", ConversationMessage("user", content)
        )
    assert not Message.objects.exists()


def test_text_outside_the_basic_plane_is_stored() -> None:
    """Characters JSON writes as surrogate pairs (emoji) are text like any other."""
    store = DjangoChatStorage()
    store.save_chat_message_sync("u", "s", "a", msg("user", "smile \U0001f600 \\ud83d"))
    assert texts(store.fetch_chat_sync("u", "s", "a")) == ["smile \U0001f600 \\ud83d"]

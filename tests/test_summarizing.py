"""SummarizingChatStorage over DjangoChatStorage: the described semantics, and none of
the defects of agent-squad's in-process wrapper (one test per defect)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from agent_squad.storage import ChatStorage
from agent_squad.types import ConversationMessage
from django.db import connection
from django.test import override_settings

import squad_memory
from squad_memory import compression
from squad_memory.exceptions import ConfigurationError, SummarizerError
from squad_memory.models import Compression, Message, Slot
from squad_memory.models.append import SQL_VENDORS
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
from tests import summarizers
from tests.conftest import msg, texts

# Transactional: an inline compression runs on commit (transaction.on_commit), as in a
# project's autocommit code; a rolled-back test would never run it.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.prepared, pytest.mark.mariadb]


def wrap(
    summarizer: Any = summarizers.fold, trigger_at: int = 2, keep_last: int = 1, **kw: Any
) -> SummarizingChatStorage:
    return SummarizingChatStorage(DjangoChatStorage(), summarizer, trigger_at, keep_last, **kw)


def turns(store: SummarizingChatStorage, start: int, count: int, agent: str = "a") -> None:
    for i in range(start, start + count):
        store.save_chat_message_sync("u", "s", agent, msg("user", f"q{i}"))
        store.save_chat_message_sync("u", "s", agent, msg("assistant", f"a{i}"))


def raw(agent: str = "a") -> list[str]:
    return [
        m.content[0]["text"] for m in Message.objects.filter(slot__agent_id=agent).order_by("seq")
    ]


def test_is_a_real_chat_storage_with_agent_squad_constructor_names() -> None:
    store = SummarizingChatStorage(
        storage=DjangoChatStorage(), summarizer=summarizers.fold, trigger_at=20, keep_last=2
    )
    assert isinstance(store, ChatStorage)


def test_before_activation_reads_and_writes_delegate() -> None:
    store = wrap()
    turns(store, 0, 2)
    assert texts(store.fetch_chat_sync("u", "s", "a")) == ["q0", "a0", "q1", "a1"]
    assert not Slot.objects.get().active and not Compression.objects.exists()


def test_first_fetch_over_the_threshold_activates_then_saves_compress() -> None:
    store = wrap()
    turns(store, 0, 3)
    assert not Slot.objects.get().active  # lazy: no compression on save before activation
    assert texts(store.fetch_chat_sync("u", "s", "a")) == ["S(q0+a0+q1+a1)", "q2", "a2"]
    store.save_chat_message_sync("u", "s", "a", msg("user", "q3"))
    assert texts(store.fetch_chat_sync("u", "s", "a")) == ["S(q0+a0+q1+a1)", "q2", "a2", "q3"]
    store.save_chat_message_sync("u", "s", "a", msg("assistant", "a3"))  # 5 > 2 * trigger_at
    assert texts(store.fetch_chat_sync("u", "s", "a")) == ["S(S(q0+a0+q1+a1)+q2+a2)", "q3", "a3"]
    store.save_chat_message_sync("u", "s", "a", msg("user", "q4"))
    assert raw() == ["q0", "a0", "q1", "a1", "q2", "a2", "q3", "a3", "q4"]


def test_fetch_all_chats_is_never_intercepted() -> None:
    store = wrap()
    turns(store, 0, 5)
    store.fetch_chat_sync("u", "s", "a")
    assert len(store.fetch_all_chats_sync("u", "s")) == 10


def test_summarizer_may_be_async_sync_or_a_dotted_path() -> None:
    for i, summarizer in enumerate([summarizers.fold, summarizers.afold, "tests.summarizers.fold"]):
        store = wrap(summarizer)
        turns(store, 0, 3, agent=f"a{i}")
        assert texts(asyncio.run(store.fetch_chat("u", "s", f"a{i}")))[0] == "S(q0+a0+q1+a1)"


def test_summarizer_receives_the_current_buffer_and_keep_last() -> None:
    seen: list[tuple[list[str], int]] = []

    def spy(history: list[ConversationMessage], keep_last: int) -> list[ConversationMessage]:
        seen.append((texts(history), keep_last))
        return summarizers.fold(history, keep_last)

    store = wrap(spy, trigger_at=2, keep_last=1)
    turns(store, 0, 3)
    store.fetch_chat_sync("u", "s", "a")
    turns(store, 3, 1)
    assert seen == [
        (["q0", "a0", "q1", "a1", "q2", "a2"], 1),
        (["S(q0+a0+q1+a1)", "q2", "a2", "q3", "a3"], 1),
    ]


def test_per_slot_overrides_are_stored_with_the_slot() -> None:
    store = wrap(trigger_at=10, keep_last=2)
    turns(store, 0, 4)
    Slot.objects.update(trigger_at=3, keep_last=1)
    assert texts(wrap(trigger_at=10, keep_last=2).fetch_chat_sync("u", "s", "a")) == [
        "S(q0+a0+q1+a1+q2+a2)",
        "q3",
        "a3",
    ]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"trigger_at": 0},
        {"keep_last": -1},
        {"trigger_at": 2, "keep_last": 2},
        {"mode": "bogus"},
        {"on_error": "x"},
    ],
)
def test_bad_constructor_arguments_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        wrap(**kwargs)


def test_get_storage_follows_settings_live() -> None:
    with override_settings(
        SQUAD_MEMORY={"TRIGGER_AT": 7, "KEEP_LAST": 3, "SUMMARIZER": "tests.summarizers.fold"}
    ):
        store = squad_memory.get_storage()
        assert (store.trigger_at, store.keep_last, store.summarizer.path) == (
            7,
            3,
            "tests.summarizers.fold",
        )
    assert squad_memory.get_storage().trigger_at == 20


def test_sizes_left_out_come_from_the_settings_and_arguments_win() -> None:
    with override_settings(SQUAD_MEMORY={"TRIGGER_AT": 7, "KEEP_LAST": 3}):
        built = SummarizingChatStorage(DjangoChatStorage(), summarizers.fold)
        assert (built.trigger_at, built.keep_last) == (7, 3)
        given = SummarizingChatStorage(DjangoChatStorage(), summarizers.fold, 5, 0)
        assert (given.trigger_at, given.keep_last) == (5, 0)


# -- defect 1: a summarizer error never loses the raw message -----------------------------
def test_defect1_summarizer_error_keeps_the_message_and_is_logged_then_retried() -> None:
    store = wrap()
    turns(store, 0, 3)
    store.fetch_chat_sync("u", "s", "a")
    broken = wrap(summarizers.boom)
    broken.save_chat_message_sync("u", "s", "a", msg("user", "q3"))
    broken.save_chat_message_sync("u", "s", "a", msg("assistant", "a3"))
    assert raw()[-2:] == ["q3", "a3"]
    assert texts(store.fetch_chat_sync("u", "s", "a")) == ["S(q0+a0+q1+a1)", "q2", "a2", "q3", "a3"]
    failed = Compression.objects.filter(outcome="failed")
    assert failed.count() == 1 and "LLM unavailable" in failed.first().error  # type: ignore[union-attr]
    assert Slot.objects.get().state == "failed"
    store.save_chat_message_sync("u", "s", "a", msg("user", "q4"))  # a later save tries again
    assert texts(store.fetch_chat_sync("u", "s", "a"))[0].startswith("S(S(")
    assert Slot.objects.get().state == "active"


def test_defect1_on_error_raise_stores_first_then_raises() -> None:
    store = wrap(summarizers.boom, on_error="raise")
    turns(store, 0, 3)
    with pytest.raises(SummarizerError, match="LLM unavailable"):
        store.fetch_chat_sync("u", "s", "a")
    with pytest.raises(SummarizerError):
        store.save_chat_message_sync("u", "s", "a", msg("user", "kept"))
    assert raw()[-1] == "kept"


def test_defect1_invalid_output_is_a_recorded_failure_and_the_buffer_stays() -> None:
    store = wrap(summarizers.not_a_list)
    turns(store, 0, 3)
    assert texts(store.fetch_chat_sync("u", "s", "a")) == ["q0", "a0", "q1", "a1", "q2", "a2"]
    log = Compression.objects.get()
    assert log.outcome == "failed" and "list of ConversationMessage" in log.error


# -- defect 2: the buffer follows the inner store's role rule ------------------------------
def test_defect2_a_refused_same_role_message_is_not_in_the_buffer() -> None:
    store = wrap()
    turns(store, 0, 3)
    store.fetch_chat_sync("u", "s", "a")
    store.save_chat_message_sync("u", "s", "a", msg("assistant", "duplicate role"))
    assert "duplicate role" not in texts(store.fetch_chat_sync("u", "s", "a"))
    assert "duplicate role" not in raw()


# -- defect 3: one compression per slot at a time; concurrent saves kept in order ----------
def test_defect3_saves_during_a_compression_are_kept_after_its_output() -> None:
    gate = summarizers.Gate()
    store = wrap(gate)
    turns(store, 0, 3)
    fetcher = threading.Thread(target=store.fetch_chat_sync, args=("u", "s", "a"))
    fetcher.start()
    assert gate.entered.wait(10)
    turns(store, 3, 2)  # crosses the threshold again while the first compression runs
    gate.release.set()
    fetcher.join(10)
    assert gate.max_active == 1 and gate.calls == 1
    assert raw() == ["q0", "a0", "q1", "a1", "q2", "a2", "q3", "a3", "q4", "a4"]
    assert texts(store.fetch_chat_sync("u", "s", "a")) == [
        "S(q0+a0+q1+a1)",
        "q2",
        "a2",
        "q3",
        "a3",
        "q4",
        "a4",
    ]
    store.save_chat_message_sync("u", "s", "a", msg("user", "q5"))  # the next save compresses again
    assert gate.calls == 2
    assert texts(store.fetch_chat_sync("u", "s", "a")) == [
        "S(S(q0+a0+q1+a1)+q2+a2+q3+a3+q4)",
        "a4",
        "q5",
    ]


def test_defect3_a_stale_compression_changes_nothing() -> None:

    store = wrap()
    turns(store, 0, 3)
    store.fetch_chat_sync("u", "s", "a")
    slot = Slot.objects.get()
    snap = compression.snapshot(slot)
    claimed = compression.Claim(slot.pk, "not-the-claim-token", 1)
    outcome = compression.compress(snap, claimed, store.summarizer)
    assert outcome.outcome == "stale"
    assert Slot.objects.get().version == slot.version


# -- defect 4: the buffer is shared and survives restarts ---------------------------------
def test_defect4_a_new_instance_sees_the_buffer_without_calling_the_summarizer() -> None:
    turns(wrap(), 0, 3)
    wrap().fetch_chat_sync("u", "s", "a")
    calls = len(summarizers.CALLS)
    fresh = wrap(summarizers.boom)
    assert texts(fresh.fetch_chat_sync("u", "s", "a")) == ["S(q0+a0+q1+a1)", "q2", "a2"]
    assert (
        len(summarizers.CALLS) == calls
        and not Compression.objects.filter(outcome="failed").exists()
    )


# -- defect 5: activation judges the whole history; 3-argument fetch_chat works ------------
class ThreeArgStore(ChatStorage):
    """A foreign store whose fetch_chat takes no size (like DynamoDbChatStorage)."""

    def __init__(self) -> None:
        self.data: dict[str, list[ConversationMessage]] = {}

    async def save_chat_message(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_message: Any,
        max_history_size: Any = None,
    ) -> Any:
        conv = self.data.setdefault(agent_id, [])
        if not (conv and conv[-1].role == new_message.role):
            conv.append(new_message)
        return list(conv)

    async def save_chat_messages(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_messages: Any,
        max_history_size: Any = None,
    ) -> Any:
        self.data.setdefault(agent_id, []).extend(new_messages)
        return list(self.data[agent_id])

    async def fetch_chat(self, user_id: str, session_id: str, agent_id: str) -> Any:  # type: ignore[override]
        return list(self.data.get(agent_id, []))

    async def fetch_all_chats(self, user_id: str, session_id: str) -> Any:
        return [m for conv in self.data.values() for m in conv]


def test_defect5_activation_judges_the_whole_history_not_the_requested_size() -> None:
    store = wrap()
    turns(store, 0, 3)
    assert texts(store.fetch_chat_sync("u", "s", "a", max_history_size=2)) == ["q2", "a2"]
    assert Slot.objects.get().active


def test_defect5_works_over_a_store_whose_fetch_chat_takes_no_size() -> None:
    store = SummarizingChatStorage(ThreeArgStore(), summarizers.fold, 2, 1)
    turns(store, 0, 3)  # type: ignore[arg-type]
    assert texts(store.fetch_chat_sync("u", "s", "a", 10)) == ["S(q0+a0+q1+a1)", "q2", "a2"]


# -- defect 6: returned lists are fresh ----------------------------------------------------
def test_defect6_mutating_a_returned_buffer_does_not_touch_the_store() -> None:
    store = wrap()
    turns(store, 0, 3)
    out = store.fetch_chat_sync("u", "s", "a")
    out[0].content[0]["text"] = "tampered"
    out.clear()
    assert texts(store.fetch_chat_sync("u", "s", "a"))[0] == "S(q0+a0+q1+a1)"


# -- query counts ---------------------------------------------------------------------------
@pytest.mark.parametrize("stored", [10, 10_000])
def test_query_counts_do_not_grow_with_the_history(
    stored: int, count_queries: Any, settings: Any
) -> None:
    # fold() names every message it folds: 10,000 of them pass the default summary size limit.
    settings.SQUAD_MEMORY = {"MAX_SUMMARY_CHARS": 200_000}
    store = wrap(trigger_at=20, keep_last=2)
    pairs = [msg("user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(stored)]
    store.save_chat_messages_sync("u", "s", "a", pairs)
    store.compress_now("u", "s", "a")  # activates, whatever the length
    store.save_chat_message_sync("u", "s", "a", msg("user", "q"))
    with count_queries() as fetch:
        store.fetch_chat_sync("u", "s", "a")
    with count_queries() as save:
        store.save_chat_message_sync("u", "s", "a", msg("assistant", "a"))
    for i in range(40):  # cross the threshold: the compressing save
        store.save_chat_message_sync("u", "s", "a", msg(["user", "assistant"][i % 2], f"x{i}"))
        if Slot.objects.get().buffer_length == 2 * 20:
            break
    with count_queries() as compressing:
        store.save_chat_message_sync(
            "u", "s", "a", msg(["user", "assistant"][(i + 1) % 2], "cross")
        )
    assert Compression.objects.filter(outcome="applied").count() == 2
    statements = STATEMENTS["sql" if connection.vendor in SQL_VENDORS else "twin"]
    assert fetch.count <= statements["fetch"], fetch.statements
    assert save.count <= statements["save"], save.statements
    assert compressing.count <= statements["compressing"], compressing.statements


#: The most statements a turn's steps take, whatever the history's length. The fixed
#: statements (PostgreSQL, SQLite): a fetch reads the slot and its buffer in one; a save
#: is the slot's UPDATE and the INSERT (one on PostgreSQL), which also read the answer.
#: A compressing save adds the claim (lock, mark), the snapshot, the apply and its log
#: row (with the previous row it refers to), and the answer read again. The Python twin
#: (other databases) reads the slot and its rows apart, and locks before it writes.
STATEMENTS = {
    "sql": {"fetch": 1, "save": 2, "compressing": 9},
    "twin": {"fetch": 2, "save": 5, "compressing": 13},
}


# -- edge cases found in review ---------------------------------------------------------------
def test_a_slot_override_never_lets_keep_last_reach_trigger_at() -> None:
    seen: list[int] = []

    def spy(history: list[ConversationMessage], keep_last: int) -> list[ConversationMessage]:
        seen.append(keep_last)
        return summarizers.fold(history, keep_last)

    store = wrap(spy, trigger_at=10, keep_last=2)
    turns(store, 0, 3)
    Slot.objects.update(trigger_at=2)  # the storage's keep_last (2) would equal it
    store.fetch_chat_sync("u", "s", "a")
    turns(store, 3, 1)
    assert seen == [1, 1]
    assert len(store.fetch_chat_sync("u", "s", "a")) <= 2 * 2


def test_inline_compression_waits_for_the_callers_commit() -> None:
    from django.db import connection, transaction

    in_transaction: list[bool] = []

    def spy(history: list[ConversationMessage], keep_last: int) -> list[ConversationMessage]:
        in_transaction.append(connection.in_atomic_block)
        return summarizers.fold(history, keep_last)

    store = wrap(spy)
    turns(store, 0, 3)
    store.fetch_chat_sync("u", "s", "a")
    with transaction.atomic():
        turns(store, 3, 1)  # crosses the threshold inside the caller's transaction
        assert len(in_transaction) == 1
    assert in_transaction == [False, False]
    assert texts(store.fetch_chat_sync("u", "s", "a"))[0] == "S(S(q0+a0+q1+a1)+q2+a2)"


def test_activation_judges_the_whole_history_even_when_saves_trim_it() -> None:
    store = wrap(trigger_at=3, keep_last=1)
    for i in range(10):
        store.save_chat_message_sync("u", "s", "a", msg("user", f"q{i}"), max_history_size=4)
        store.save_chat_message_sync("u", "s", "a", msg("assistant", f"a{i}"), max_history_size=4)
    assert texts(store.fetch_chat_sync("u", "s", "a")) == ["q8", "a8", "q9", "a9"]
    assert Slot.objects.get().active  # 20 raw messages > 6, though only 4 are visible
    turns(store, 10, 2)
    assert texts(store.fetch_chat_sync("u", "s", "a"))[0].startswith("S(")


def test_an_empty_batch_creates_no_slot() -> None:
    assert wrap().save_chat_messages_sync("u", "s", "a", []) == []
    assert DjangoChatStorage().save_chat_messages_sync("u", "s", "a", []) == []
    assert not Slot.objects.exists()

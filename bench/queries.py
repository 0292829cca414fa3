"""Workload 4 (SQL statements per operation) and the sync save against a bare insert."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from bench import conversation
from bench.sm import FAST, BareOrm, bulk_history
from bench.stats import ms
from squad_memory.models import Slot
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage

_TX_CONTROL = re.compile(r"^\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE SAVEPOINT)", re.I)


def count(operation: Callable[..., Any], *args: Any) -> int:
    """SQL statements ``operation(*args)`` runs, transaction control left out."""
    with CaptureQueriesContext(connection) as ctx:
        operation(*args)
    return sum(1 for q in ctx.captured_queries if not _TX_CONTROL.match(q["sql"]))


def _slot(run: str, name: str, n: int) -> tuple[str, str, str]:
    key = (run, name, "agent")
    row, _ = Slot.objects.get_or_create(user_id=key[0], session_id=key[1], agent_id=key[2])
    bulk_history(row, n)
    row.save(update_fields=["last_seq", "last_role"])
    return key


def query_counts(run: str, sizes: tuple[int, ...] = (10, 10_000)) -> dict[str, dict[str, int]]:
    """Statements per operation of the inline wrapper and the raw store, at each size."""
    raw = DjangoChatStorage()
    result: dict[str, dict[str, int]] = {}
    for n in sizes:
        # a threshold under N, so that the buffer is active at every size
        trigger = min(20, max(n // 2 - 1, 1))
        wrapper = SummarizingChatStorage(DjangoChatStorage(), FAST, trigger, min(2, trigger - 1))
        row: dict[str, int] = {"trigger_at (pairs)": trigger}
        key = _slot(run, f"q-inactive-{n}", n)
        row["fetch_chat, inactive slot (raw history)"] = count(raw.fetch_chat_sync, *key)
        row["DjangoChatStorage.save_chat_message"] = count(
            raw.save_chat_message_sync, *key, conversation.user(n)
        )
        row["fetch_all_chats"] = count(raw.fetch_all_chats_sync, key[0], key[1])
        key = _slot(run, f"q-active-{n}", n)
        row["first fetch_chat over the threshold (activation, inline compression)"] = count(
            wrapper.fetch_chat_sync, *key
        )
        row["fetch_chat, active buffer"] = count(wrapper.fetch_chat_sync, *key)
        row["save_chat_message, active buffer"] = count(
            wrapper.save_chat_message_sync, *key, conversation.user(n)
        )
        row["save_chat_messages (2), active buffer"] = count(
            wrapper.save_chat_messages_sync,
            *key,
            [conversation.answer(n), conversation.user(n + 1)],
        )
        row["save_chat_message, same role (skipped)"] = count(
            wrapper.save_chat_message_sync, *key, conversation.user(n + 1)
        )
        row["save_chat_message crossing the threshold (inline compression)"] = _crossing(
            wrapper, key, n
        )
        result[str(n)] = row
    return result


def _crossing(wrapper: SummarizingChatStorage, key: tuple[str, str, str], n: int) -> int:
    """Statements of the save that claims and runs a compression (the largest one)."""
    slot = Slot.objects.for_key(*key).get()
    worst = 0
    for i in range(2, 60):
        message = (
            conversation.answer(n + i) if slot.last_role == "user" else conversation.user(n + i)
        )
        worst = max(worst, count(wrapper.save_chat_message_sync, *key, message))
        slot.refresh_from_db()
        if slot.version > 1:
            break
    return worst


def sync_saves(run: str, n: int, saves: int) -> dict[str, Any]:
    """A save through the wrapper (sync twin) and a bare ORM insert, same connection, same N."""
    wrapper = SummarizingChatStorage(DjangoChatStorage(), FAST, 20, 2, mode="inline")
    key = _slot(run, f"sync-{n}", n)
    wrapper.fetch_chat_sync(*key)
    floor = BareOrm()
    fkey = (run, f"floor-sync-{n}", "agent")
    floor._prefill(fkey, n)
    wrap_t, floor_t, select_t, fetch_t = [], [], [], []
    for i in range(saves):
        message = conversation.user(i) if i % 2 == 0 else conversation.answer(i)
        wrap_t.append(_time(wrapper.save_chat_message_sync, *key, message))
        floor_t.append(_time(floor.insert, fkey, message.role, message.content[0]["text"]))
        fetch_t.append(_time(wrapper.fetch_chat_sync, *key))
        select_t.append(_time(floor.select, fkey))
    return {
        "n": n,
        "wrapper_save": ms(wrap_t),
        "orm_insert": ms(floor_t),
        "wrapper_fetch": ms(fetch_t),
        "orm_select": ms(select_t),
    }


def _time(operation: Callable[..., Any], *args: Any) -> float:
    t0 = time.perf_counter()
    operation(*args)
    return time.perf_counter() - t0

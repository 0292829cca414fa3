"""The systems side by side: squad_memory, the floors, agent-squad's stores and LangChain.

Each offers the same async turn: save the user message, save the answer, fetch. Every
system summarizes with the same fake summarizer (:func:`summarize`; in W2 and W4's slow runs
after a sleep that stands for the LLM call).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agent_squad.storage import InMemoryChatStorage, SqlChatStorage
from agent_squad.storage import SummarizingChatStorage as SquadSummarizing
from agent_squad.types import ConversationMessage, TimestampedMessage
from asgiref.sync import sync_to_async
from django.db import connection, transaction

from squad_memory.models import Message, Slot
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage

SlotId = tuple[str, str, str]
#: Whether psycopg prepares the statements the connection repeats (Django's OPTIONS).
PREPARED = bool(connection.settings_dict.get("OPTIONS", {}).get("server_side_binding"))
TRIGGER_AT, KEEP_LAST = 20, 2  # every summarizing store: compress past 20 pairs, keep 2
WINDOW = 2 * TRIGGER_AT  # the floors read the slot's newest 40 rows
FIELDS = ("slot", "seq", "role", "content", "citations", "timestamp", "text", "tokens")
USER = "Could you check the order status and the delivery address for me, please?"
ANSWER = (
    "Your order is packed and leaves the warehouse tomorrow morning; the delivery address "
    "on file is the one you confirmed last week, and the courier will text you a time slot."
)


def database() -> str:
    """The database as the systems' labels name it (MySQL's name asks the server)."""
    return f"{connection.display_name}{', prepared statements' if PREPARED else ''}"


# -- the conversation and the summarizer -------------------------------------------------
def text_of(k: int) -> str:
    """The ``k``-th message of a conversation (0-based): user, answer, user, ..."""
    return f"Question {k // 2}. {USER}" if k % 2 == 0 else f"Answer {k // 2}. {ANSWER}"


def role_of(k: int) -> str:
    return "user" if k % 2 == 0 else "assistant"


def message(k: int, content: list[dict[str, Any]] | None = None) -> ConversationMessage:
    return ConversationMessage(role=role_of(k), content=content or [{"text": text_of(k)}])


def summarize(history: list[Any], keep_last: int) -> list[Any]:
    """Keep the last ``keep_last`` pairs and fold the rest into one summary message."""
    cut = max(len(history) - keep_last * 2, 0)
    text = f"[Summary] {cut} earlier messages."
    return [ConversationMessage(role="user", content=[{"text": text}]), *history[cut:]]


#: (start, end, last message's text) of every slow summary run in this process
SUMMARIES: list[tuple[float, float, str]] = []
_LOCK = threading.Lock()


def summarize_slow(history: list[Any], keep_last: int) -> list[Any]:
    """:func:`summarize` after a sync LLM call: a sleep of ``BENCH_SLOW_SLEEP`` seconds (1
    by default), recorded in :data:`SUMMARIES` for the concurrency workload."""
    started = time.perf_counter()
    time.sleep(float(os.environ.get("BENCH_SLOW_SLEEP", "1")))
    with _LOCK:
        SUMMARIES.append((started, time.perf_counter(), str(history[-1].content)))
    return summarize(history, keep_last)


async def asummarize(history: list[Any], keep_last: int) -> list[Any]:
    """agent-squad's wrapper awaits its summarizer."""
    return summarize(history, keep_last)


async def asummarize_slow(history: list[Any], keep_last: int) -> list[Any]:
    """:func:`summarize_slow`'s sleep, in the event loop."""
    await asyncio.sleep(float(os.environ.get("BENCH_SLOW_SLEEP", "1")))
    return summarize(history, keep_last)


# -- the systems ---------------------------------------------------------------------------
class System:
    """One store under test; a turn is :meth:`save` of a user message and of an answer,
    then :meth:`fetch`, by default through agent-squad's ``ChatStorage`` contract on
    :attr:`storage`, as its orchestrator calls it."""

    label = "system"
    storage: Any = None

    async def start(self) -> None:
        """Open connections, create tables."""

    async def prefill(self, slot: SlotId, n: int) -> None:
        """Store ``n`` messages in bulk and activate the buffer where there is one."""

    async def save(self, slot: SlotId, k: int) -> Any:
        return await self.storage.save_chat_message(*slot, message(k))

    async def fetch(self, slot: SlotId) -> Any:
        return await self.storage.fetch_chat(*slot)

    async def settle(self) -> None:
        """Wait until background work is done (Celery mode)."""

    async def close(self) -> None:
        """Release connections."""


def stored(k: int) -> dict[str, Any]:
    """The ``k``-th message's fields as squad_memory stores them (its slot and seq aside)."""
    text = text_of(k)
    content, tokens = [{"text": text}], -(-len(text) // 4)
    return {"role": role_of(k), "content": content, "text": text, "tokens": tokens}


def _slot_row(slot: SlotId, n: int) -> Slot:
    """The slot's row with ``n`` messages inserted in bulk (statistics gathered after)."""
    row, _ = Slot.objects.get_or_create(user_id=slot[0], session_id=slot[1], agent_id=slot[2])
    stamp = int(time.time() * 1000)
    rows = [Message(slot=row, seq=k + 1, timestamp=stamp, **stored(k)) for k in range(n)]
    Message.objects.bulk_create(rows, batch_size=2000)
    row.last_seq, row.last_role = n, role_of(n - 1) if n else ""
    row.save(update_fields=["last_seq", "last_role"])
    with connection.cursor() as cursor:  # as autovacuum would, after a bulk load
        cursor.execute(f"ANALYZE {Message._meta.db_table}")
    return row


class SquadMemory(System):
    """``SummarizingChatStorage(DjangoChatStorage(), ...)`` through its async API."""

    def __init__(self, mode: str = "inline", summarizer: str = "bench.systems.summarize") -> None:
        self.mode, self.label = mode, f"squad_memory {mode} ({database()})"
        self.storage = SummarizingChatStorage(
            DjangoChatStorage(), summarizer, TRIGGER_AT, KEEP_LAST, mode=mode
        )

    async def prefill(self, slot: SlotId, n: int) -> None:
        await sync_to_async(_slot_row)(slot, n)
        await self.storage.fetch_chat(*slot)  # activates the buffer (one compression)
        await self.settle()

    async def settle(self, timeout: float = 120) -> None:
        """Wait for every queued compression to be applied by the worker."""
        deadline = time.monotonic() + timeout
        pending = Slot.objects.exclude(pending_token="").aexists
        while self.mode != "inline" and await pending():
            if time.monotonic() > deadline:
                raise TimeoutError(f"compressions still pending after {timeout} s")
            await sync_to_async(time.sleep)(0.02)


class SquadMemoryOneThread(SquadMemory):
    """squad_memory inline, its sync API through ``sync_to_async`` on one thread of its own
    that serves every call: the async API before its database threads, for a lone
    conversation (the floors' turns would keep asgiref's shared thread warm between calls)."""

    def __init__(self) -> None:
        super().__init__()
        self.label = f"squad_memory inline, one thread ({database()})"
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="one-thread")

    def hop(self, func: Any) -> Any:
        return sync_to_async(func, thread_sensitive=False, executor=self.thread)

    async def save(self, slot: SlotId, k: int) -> Any:
        return await self.hop(self.storage.save_chat_message_sync)(*slot, message(k))

    async def fetch(self, slot: SlotId) -> Any:
        return await self.hop(self.storage.fetch_chat_sync)(*slot)


class DjangoFloor(System):
    """Django's floor: the same rows as bare statements through Django's connection, one
    ``sync_to_async`` hop per call. A save is one INSERT (its sequence number kept in the
    process); a fetch selects the slot's newest :data:`WINDOW` rows. The least any Django
    app pays to serve agent-squad's async API."""

    kind = "Django's floor"

    def __init__(self) -> None:
        self.label = f"{self.kind} ({database()})"
        self.slots: dict[SlotId, list[int]] = {}  # slot -> [row id, last seq]
        m, s = Message._meta, Slot._meta
        self.messages, self.slot_table = m.db_table, s.db_table
        fields = [m.get_field(f) for f in FIELDS]
        self.columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
        cast = connection.vendor == "postgresql"  # typed marks, as a SELECT list needs them
        self.marks = [f"%s::{f.db_type(connection)}" if cast else "%s" for f in fields]
        self.insert_sql = (
            f"INSERT INTO {self.messages} ({self.columns}) VALUES ({', '.join(self.marks)})"
        )
        self.read = (
            f"SELECT role, content, citations, {connection.ops.quote_name('timestamp')} "
            f"FROM {self.messages} WHERE slot_id = %s ORDER BY seq DESC LIMIT {WINDOW}"
        )

    def values(self, row_id: int, seq: int, k: int) -> list[Any]:
        """The parameters of :data:`FIELDS` for the ``k``-th message."""
        row = stored(k) | {"slot": row_id, "seq": seq, "citations": None}
        row |= {"content": json.dumps(row["content"]), "timestamp": int(time.time() * 1000)}
        return [row[name] for name in FIELDS]

    def rows(self, sql: str, params: list[Any]) -> list[dict[str, Any]]:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            found = cursor.fetchall()
        return [
            {"role": r[0], "content": _json(r[1]), "citations": _json(r[2]), "timestamp": r[3]}
            for r in reversed(found)
        ]

    async def prefill(self, slot: SlotId, n: int) -> None:
        row = await sync_to_async(_slot_row)(slot, n)
        self.slots[slot] = [row.pk, n]

    def insert(self, slot: SlotId, k: int) -> None:
        state = self.slots[slot]
        state[1] += 1
        with connection.cursor() as cursor:
            cursor.execute(self.insert_sql, self.values(state[0], state[1], k))

    async def save(self, slot: SlotId, k: int) -> Any:
        await sync_to_async(self.insert)(slot, k)

    async def fetch(self, slot: SlotId) -> Any:
        return await sync_to_async(self.rows)(self.read, [self.slots[slot][0]])


class ContractFloor(DjangoFloor):
    """The contract floor: Django's floor plus what agent-squad's contract and several
    writer processes need, the plainest way. A save bumps the slot's counter (skipping a
    message of the last one's role), inserts at that sequence number and returns the
    conversation read in the same transaction; on PostgreSQL one statement. One
    ``sync_to_async`` hop per call."""

    kind = "contract floor"

    def __init__(self) -> None:
        super().__init__()
        s, q = Slot._meta, connection.ops.quote_name
        seq, role = q(s.get_field("last_seq").column), q(s.get_field("last_role").column)
        self.bump = (
            f"UPDATE {self.slot_table} SET {seq} = {seq} + 1, {role} = %s "
            f"WHERE id = %s AND {role} <> %s RETURNING {seq}"
        )
        marks = ", ".join([self.marks[0], seq, *self.marks[2:]])
        self.one_statement = (  # PostgreSQL: bump, insert and read in one statement
            f"WITH bumped AS ({self.bump}), added AS (INSERT INTO {self.messages} "
            f"({self.columns}) SELECT {marks} FROM bumped RETURNING seq, role, "
            f"content, citations, {q('timestamp')}) SELECT role, content, citations, "
            f"{q('timestamp')} FROM (SELECT * FROM added UNION ALL (SELECT seq, role, content, "
            f"citations, {q('timestamp')} FROM {self.messages} WHERE slot_id = %s "
            f"ORDER BY seq DESC LIMIT {WINDOW})) AS recent ORDER BY seq DESC LIMIT {WINDOW}"
        )

    def append(self, slot: SlotId, k: int) -> list[dict[str, Any]]:
        row_id = self.slots[slot][0]
        values = self.values(row_id, 0, k)
        role = values[2]
        if connection.vendor == "postgresql":
            return self.rows(self.one_statement, [role, row_id, role, row_id, *values[2:], row_id])
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(self.bump, [role, row_id, role])
            bumped = cursor.fetchone()
            if bumped is not None:
                values[1] = bumped[0]
                cursor.execute(self.insert_sql, values)
            return self.rows(self.read, [row_id])

    async def save(self, slot: SlotId, k: int) -> Any:
        return await sync_to_async(self.append)(slot, k)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


class AgentSquadInMemory(System):
    """agent-squad's own ``SummarizingChatStorage`` over its ``InMemoryChatStorage``."""

    label = "agent-squad wrapper (InMemory)"

    def __init__(self, slow: bool = False, inner: Any = None) -> None:
        self.inner = inner or InMemoryChatStorage()
        summarizer = asummarize_slow if slow else asummarize
        self.storage = SquadSummarizing(self.inner, summarizer, TRIGGER_AT, KEEP_LAST)

    async def prefill(self, slot: SlotId, n: int) -> None:
        now = int(time.time() * 1000)
        self.inner.conversations["#".join(slot)] = [
            TimestampedMessage(role=role_of(k), content=[{"text": text_of(k)}], timestamp=now)
            for k in range(n)
        ]
        await self.storage.fetch_chat(*slot)  # activates the buffer


class AgentSquadLibsql(AgentSquadInMemory):
    """agent-squad's ``SummarizingChatStorage`` over its ``SqlChatStorage`` (a libsql file)."""

    label = "agent-squad wrapper (libsql)"

    def __init__(self, path: Path) -> None:
        self.path = path
        path.unlink(missing_ok=True)
        super().__init__(inner=SqlChatStorage(url=f"file:{path}"))

    async def start(self) -> None:
        await self.inner.initialize()

    async def prefill(self, slot: SlotId, n: int) -> None:
        now = int(time.time() * 1000)
        rows = [(*slot, k, role_of(k), json.dumps([{"text": text_of(k)}]), now) for k in range(n)]
        with sqlite3.connect(self.path) as db:  # bulk, beside the store's own connection
            db.executemany("INSERT INTO conversations VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        await self.storage.fetch_chat(*slot)

    async def close(self) -> None:
        await self.inner.close()


class LangChain(System):
    """LangChain's ``ConversationSummaryBufferMemory`` over ``SQLChatMessageHistory``
    (SQLite); ``save_context`` stores the question and the answer at once, so the user
    message's save stores both and the answer's does nothing."""

    label = "LangChain summary buffer (SQL)"

    def __init__(self, path: Path) -> None:
        self.url = f"sqlite:///{path}"
        path.unlink(missing_ok=True)
        self.memories: dict[SlotId, Any] = {}

    async def prefill(self, slot: SlotId, n: int) -> None:
        import warnings

        warnings.filterwarnings("ignore", category=DeprecationWarning)
        from langchain_classic.memory import ConversationSummaryBufferMemory
        from langchain_community.chat_message_histories import SQLChatMessageHistory
        from langchain_core.messages import AIMessage, HumanMessage

        history = SQLChatMessageHistory(session_id="#".join(slot), connection=self.url)
        limit = (len(text_of(0)) + len(text_of(1))) // 4 * TRIGGER_AT
        self.memories[slot] = memory = ConversationSummaryBufferMemory(
            llm=_fake_llm(), chat_memory=history, max_token_limit=limit, return_messages=True
        )
        kinds = {"user": HumanMessage, "assistant": AIMessage}
        history.add_messages([kinds[role_of(k)](content=text_of(k)) for k in range(n)])
        memory.prune()  # the first summary, as agent-squad's activation

    async def save(self, slot: SlotId, k: int) -> Any:
        if k % 2 == 0:
            self.memories[slot].save_context({"input": text_of(k)}, {"output": text_of(k + 1)})

    async def fetch(self, slot: SlotId) -> Any:
        return self.memories[slot].load_memory_variables({})


def contenders(work: Path, slow: bool = False) -> dict[str, System]:
    """The systems of the database Django is connected to, by id (with prepared statements,
    squad_memory inline and the floors alone); with ``slow``, those W2 runs, with the slow
    summarizer."""
    db = connection.vendor + ("_prepared" if PREPARED else "")
    summarizer = "bench.systems.summarize_slow" if slow else "bench.systems.summarize"
    found: dict[str, System] = {f"sm-inline-{db}": SquadMemory("inline", summarizer)}
    if db == "postgresql":
        found["sm-celery-postgresql"] = SquadMemory("celery", summarizer)
    if db == "sqlite":
        found["as-inmemory"] = AgentSquadInMemory(slow)
    if not slow:
        if not PREPARED:
            found[f"sm-onethread-{db}"] = SquadMemoryOneThread()
        found[f"floor-django-{db}"] = DjangoFloor()
        found[f"floor-contract-{db}"] = ContractFloor()
        if db == "sqlite":
            found["as-libsql"] = AgentSquadLibsql(work / "libsql.db")
            found["langchain"] = LangChain(work / "langchain.db")
    return found


def _fake_llm() -> Any:
    from langchain_core.language_models.fake import FakeListLLM

    class FakeSummaryLLM(FakeListLLM):
        """Answers at once, as :func:`summarize`; counts tokens as characters / 4."""

        def _call(self, prompt: str, *args: Any, **kwargs: Any) -> str:
            return f"[Summary] {len(prompt)} characters of earlier conversation."

        def get_num_tokens(self, text: str) -> int:
            return len(text) // 4

        def get_num_tokens_from_messages(self, messages: list[Any], tools: Any = None) -> int:
            return sum(len(str(m.content)) for m in messages) // 4

    return FakeSummaryLLM(responses=["-"])

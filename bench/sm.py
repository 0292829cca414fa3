"""squad_memory under test (inline or Celery mode), and the bare Django ORM beside it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection

from bench import conversation
from bench.base import ChatStorageSystem, SlotId, System
from squad_memory.messages import now_ms
from squad_memory.models import Message, Slot
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage

FAST = "bench.summarizer.summarize"
SLOW = "bench.summarizer.summarize_slow"


def bulk_history(slot: Slot, n: int, start: int = 0) -> None:
    """Insert ``n`` alternating messages after the slot's last one, in large batches."""
    stamp = now_ms()
    rows = [
        Message(
            slot=slot,
            seq=slot.last_seq + k + 1,
            role=conversation.role_of(start + k),
            content=[{"text": conversation.text_of(start + k)}],
            timestamp=stamp,
        )
        for k in range(n)
    ]
    Message.objects.bulk_create(rows, batch_size=2000)
    slot.last_seq += n
    slot.last_role = conversation.role_of(start + n - 1) if n else slot.last_role


def vendor() -> str:
    return connection.vendor


def analyze() -> None:
    """Planner statistics after a bulk prefill, as autovacuum would gather them (the
    floors do the same for their tables)."""
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Message._meta.db_table}")


class SquadMemory(ChatStorageSystem):
    """``SummarizingChatStorage(DjangoChatStorage(), ...)`` through the async contract."""

    def __init__(self, mode: str = "inline", summarizer: str = FAST) -> None:
        self.mode = mode
        self.storage = SummarizingChatStorage(DjangoChatStorage(), summarizer, 20, 2, mode=mode)
        self.database = vendor()
        db = "PostgreSQL" if self.database == "postgresql" else "SQLite"
        self.name = f"squad_memory-{mode}-{self.database}"
        self.label = f"squad_memory {mode} ({db})"

    async def prefill(self, slot: SlotId, n: int) -> None:
        await sync_to_async(self._prefill)(slot, n)
        await self.storage.fetch_chat(*slot)  # activates the buffer (one compression)
        await self.settle(slot)

    def _prefill(self, slot: SlotId, n: int) -> None:
        row, _ = Slot.objects.get_or_create(user_id=slot[0], session_id=slot[1], agent_id=slot[2])
        bulk_history(row, n)
        row.save(update_fields=["last_seq", "last_role"])
        analyze()

    async def settle(self, slot: SlotId, timeout: float = 120) -> None:
        """Wait for a queued compression to be applied by the worker."""
        deadline = time.monotonic() + timeout
        while await sync_to_async(_pending)(slot):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the compression of {slot} is still pending after {timeout} s")
            await asyncio.sleep(0.05)


def _pending(slot: SlotId) -> bool:
    row = Slot.objects.for_key(*slot).values("pending_token").first()
    return bool(row and row["pending_token"])


class BareOrm(System):
    """A bare ORM insert and select of one message row: what any ORM-backed store pays at least
    for its rows (``Message.objects.create``, one ``values()`` row)."""

    def __init__(self) -> None:
        self.database = vendor()
        self.name = f"django-orm-{self.database}"
        db = "PostgreSQL" if self.database == "postgresql" else "SQLite"
        self.label = f"bare Django ORM ({db})"
        self.seq: dict[SlotId, int] = {}
        self.slot_pk: dict[SlotId, int] = {}

    async def prefill(self, slot: SlotId, n: int) -> None:
        await sync_to_async(self._prefill)(slot, n)

    def _prefill(self, slot: SlotId, n: int) -> None:
        row, _ = Slot.objects.get_or_create(user_id=slot[0], session_id=slot[1], agent_id=slot[2])
        bulk_history(row, n)
        analyze()
        self.seq[slot], self.slot_pk[slot] = row.last_seq, row.pk

    def insert(self, slot: SlotId, role: str, text: str) -> None:
        if slot not in self.slot_pk:
            self._prefill(slot, 0)
        self.seq[slot] += 1
        Message.objects.create(
            slot_id=self.slot_pk[slot],
            seq=self.seq[slot],
            role=role,
            content=[{"text": text}],
            timestamp=now_ms(),
        )

    def select(self, slot: SlotId) -> Any:
        return (
            Message.objects.filter(slot_id=self.slot_pk[slot], seq=self.seq[slot])
            .values("role", "content", "citations")
            .first()
        )

    async def save_user(self, slot: SlotId, i: int) -> Any:
        return await sync_to_async(self.insert)(slot, "user", conversation.user_text(i))

    async def save_answer(self, slot: SlotId, i: int) -> Any:
        return await sync_to_async(self.insert)(slot, "assistant", conversation.answer_text(i))

    async def fetch(self, slot: SlotId) -> Any:
        return await sync_to_async(self.select)(slot)

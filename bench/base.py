"""What every benchmarked system offers the workloads: the same async turn."""

from __future__ import annotations

import time
from typing import Any

from bench import conversation

SlotId = tuple[str, str, str]


class System:
    """One store under test. A turn is: save the user message, save the answer, fetch."""

    name = "system"
    label = "system"
    #: the inner database, for the results table
    database = "-"

    async def start(self) -> None:
        """Open connections and create tables."""

    async def prefill(self, slot: SlotId, n: int) -> None:
        """Store ``n`` messages fast (bulk) and make the buffer active where there is one."""
        raise NotImplementedError

    async def save_user(self, slot: SlotId, i: int) -> Any:
        raise NotImplementedError

    async def save_answer(self, slot: SlotId, i: int) -> Any:
        raise NotImplementedError

    async def fetch(self, slot: SlotId) -> Any:
        raise NotImplementedError

    async def settle(self, slot: SlotId) -> None:
        """Wait until background work on the slot is done (Celery mode)."""

    async def close(self) -> None:
        """Release connections."""


class ChatStorageSystem(System):
    """A system that is an agent-squad ``ChatStorage`` (``self.storage``): the turn is its API."""

    storage: Any

    async def save_user(self, slot: SlotId, i: int) -> Any:
        return await self.storage.save_chat_message(*slot, conversation.user(i))

    async def save_answer(self, slot: SlotId, i: int) -> Any:
        return await self.storage.save_chat_message(*slot, conversation.answer(i))

    async def fetch(self, slot: SlotId) -> Any:
        return await self.storage.fetch_chat(*slot)


async def timed_turn(system: System, slot: SlotId, i: int) -> dict[str, float]:
    """Run one turn; the seconds each step took (``save`` covers both saves)."""
    custom = getattr(system, "turn", None)
    if custom is not None:
        result: dict[str, float] = await custom(slot, i)
        return result
    t0 = time.perf_counter()
    await system.save_user(slot, i)
    t1 = time.perf_counter()
    await system.save_answer(slot, i)
    t2 = time.perf_counter()
    await system.fetch(slot)
    t3 = time.perf_counter()
    return {"save_user": t1 - t0, "save_answer": t2 - t1, "save": t2 - t0, "fetch": t3 - t2}

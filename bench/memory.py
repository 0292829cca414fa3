"""Workload 6: peak memory of a process serving many active slots.

squad_memory keeps the slots in the database: the measured process fetches every
slot's buffer and runs a whole turn on every tenth slot. agent-squad keeps raw
histories (InMemory) and buffers in the process: the measured process builds
them, activates every buffer, then runs the same fetches and turns. Each is
measured in its own fresh process, by its resident set size (RSS).
"""

from __future__ import annotations

import asyncio
import resource
import time
from typing import Any

from bench import conversation, logbytes
from bench.config import KEEP_LAST, TRIGGER_AT

PER_SLOT = 42  # 21 pairs: just over the default threshold of 20, so every buffer is active


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fill(run: str, slots: int) -> dict[str, Any]:
    """Store ``slots`` slots of raw history, then activate each through the public API.

    Every activation is a real compression (one per slot), so the compression log
    holds what squad_memory writes for that many active slots.
    """
    from squad_memory.models import Message, Slot

    started = time.perf_counter()
    rows = Slot.objects.bulk_create(
        [
            Slot(
                user_id=run,
                session_id=f"s{i}",
                agent_id="agent",
                last_seq=PER_SLOT,
                last_role=conversation.role_of(PER_SLOT - 1),
            )
            for i in range(slots)
        ],
        batch_size=2000,
    )
    if not all(r.pk for r in rows):  # SQLite before RETURNING support
        rows = list(Slot.objects.filter(user_id=run))
    texts = [
        (conversation.role_of(k), [{"text": conversation.text_of(k)}]) for k in range(PER_SLOT)
    ]
    stamp = conversation.stamp()
    for start in range(0, len(rows), 200):
        Message.objects.bulk_create(
            [
                Message(slot=row, seq=k + 1, role=role, content=content, timestamp=stamp)
                for row in rows[start : start + 200]
                for k, (role, content) in enumerate(texts)
            ],
            batch_size=5000,
        )
    filled = time.perf_counter()
    workers = activate_all(run, slots)
    result = {
        "fill_s": filled - started,
        "activate_s": time.perf_counter() - filled,
        "activators": workers,
    }
    result.update(logbytes.measure(run))
    return result


#: Processes activating the slots at once on PostgreSQL (each slot once, through the public
#: API): an activation is a dozen round trips, mostly waits, so the fill takes a fraction of
#: the time. SQLite has one writer at a time: one process.
ACTIVATORS = 4


def activate_all(run: str, slots: int) -> int:
    """Activate every slot of ``run`` by its first ``fetch_chat`` (one compression each);
    the number of processes that did."""
    from django.db import connection

    if connection.vendor != "postgresql":
        activate(run, range(slots))
        return 1
    import multiprocessing as mp

    connection.close()  # the children open their own
    with mp.get_context("spawn").Pool(ACTIVATORS) as pool:
        pool.starmap(
            activate, [(run, range(k, slots, ACTIVATORS), True) for k in range(ACTIVATORS)]
        )
    return ACTIVATORS


def activate(run: str, indices: range, setup: bool = False) -> None:
    """``fetch_chat`` of the slots ``s<i>`` of ``run``: the activation, one compression."""
    if setup:
        import django

        django.setup()
    from bench.sm import FAST
    from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage

    storage = SummarizingChatStorage(
        DjangoChatStorage(), FAST, TRIGGER_AT, KEEP_LAST, mode="inline"
    )
    for i in indices:
        storage.fetch_chat_sync(run, f"s{i}", "agent")


def measure_squad_memory(run: str, slots: int) -> dict[str, Any]:
    """Fetch every slot's buffer, and run a whole turn on every tenth slot."""
    from bench.sm import FAST
    from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage

    storage = SummarizingChatStorage(
        DjangoChatStorage(), FAST, TRIGGER_AT, KEEP_LAST, mode="inline"
    )
    storage.fetch_chat_sync(run, "s0", "agent")  # connection open, code paths warm
    baseline = _rss_mb()
    for i in range(slots):
        key = (run, f"s{i}", "agent")
        if i % 10 == 0:
            storage.save_chat_message_sync(*key, conversation.user(PER_SLOT))
            storage.save_chat_message_sync(*key, conversation.answer(PER_SLOT))
        storage.fetch_chat_sync(*key)
    return _report(baseline, slots)


async def _agent_squad(storage: Any, slots: int) -> None:
    messages = conversation.history(PER_SLOT)
    for i in range(slots):
        await storage.save_chat_messages("u", f"s{i}", "agent", messages)
        await storage.fetch_chat("u", f"s{i}", "agent")  # activates the buffer
    for i in range(slots):
        if i % 10 == 0:
            await storage.save_chat_message("u", f"s{i}", "agent", conversation.user(PER_SLOT))
            await storage.save_chat_message("u", f"s{i}", "agent", conversation.answer(PER_SLOT))
        await storage.fetch_chat("u", f"s{i}", "agent")


def measure_agent_squad(slots: int) -> dict[str, Any]:
    """Build and activate every slot in the process, then the same fetches and turns."""
    from agent_squad.storage import InMemoryChatStorage, SummarizingChatStorage

    from bench.summarizer import asummarize

    storage = SummarizingChatStorage(InMemoryChatStorage(), asummarize, 20, 2)
    baseline = _rss_mb()
    asyncio.run(_agent_squad(storage, slots))
    result = _report(baseline, slots)
    result["buffers"] = len(storage._buffers)
    return result


def _report(baseline: float, slots: int) -> dict[str, Any]:
    return {
        "slots": slots,
        "rss_before_mb": baseline,
        "rss_after_mb": _rss_mb(),
        "peak_rss_mb": _peak_mb(),
    }


def run(spec: dict[str, Any]) -> dict[str, Any]:
    p, kind = spec["params"], spec["kind"]
    if kind == "memory-fill":
        return fill(spec["run"], p["slots"])
    if spec["system"] == "as-inmemory":
        return measure_agent_squad(p["slots"])
    return measure_squad_memory(spec["run"], p["slots"])

"""The workloads: a turn as the history grows (W1), the turn with a slow summarizer (W2),
and statements per operation (W3)."""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from bench import systems
from bench.systems import SlotId, System
from squad_memory.models import Slot
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage


def stats(seconds: list[float]) -> dict[str, float]:
    """Median, p90, p99 and max in ms, and the count."""
    if not seconds:
        return {"n": 0}
    ordered = sorted(seconds)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    return {
        "n": len(ordered),
        "median": statistics.median(ordered) * 1000,
        "p50": pick(0.5),
        "p90": pick(0.9),
        "p99": pick(0.99),
        "max": ordered[-1] * 1000,
    }


async def turn(system: System, slot: SlotId, i: int) -> tuple[float, float, float]:
    """One turn; the seconds of the user message's save, the answer's, and the fetch."""
    t0 = time.perf_counter()
    await system.save(slot, 2 * i)
    t1 = time.perf_counter()
    await system.save(slot, 2 * i + 1)
    t2 = time.perf_counter()
    await system.fetch(slot)
    return t1 - t0, t2 - t1, time.perf_counter() - t2


async def growth(named: dict[str, System], run: str, p: dict[str, Any]) -> dict[str, Any]:
    """W1: the turn of every system at each stored history N, all in this process and run
    in turn, one block of turns of each system at each N before the next block, so a slow
    phase of the machine touches every system alike. A system stops at a N once its turns
    there took ``cap_s`` seconds in all."""
    slots: dict[tuple[str, int], SlotId] = {}
    for name, system in named.items():
        await system.start()
        for n in p["sizes"]:
            slots[name, n] = (run, f"{name}-{n}", "agent")
            await system.prefill(slots[name, n], n)
            await turn(system, slots[name, n], n)  # warm-up: connections, caches
        await system.settle()
    steps: dict[tuple[str, int], list[tuple[float, float, float]]] = {key: [] for key in slots}
    for first in range(0, p["turns"], p["block"]):
        for (name, n), slot in slots.items():
            done = steps[name, n]
            for i in range(first, min(first + p["block"], p["turns"])):
                if sum(map(sum, done)) < p["cap_s"]:
                    done.append(await turn(named[name], slot, n + 1 + i))
    result: dict[str, Any] = {}
    for (name, n), done in steps.items():
        per = result.setdefault(name, {"label": named[name].label, "W1": {}})
        per["W1"][str(n)] = {
            "turn": stats([sum(s) for s in done]),
            **{
                part: stats([s[k] for s in done])
                for k, part in enumerate(("save_user", "save_answer", "fetch"))
            },
            "capped": len(done) < p["turns"],
        }
    for system in named.values():
        await system.settle()
        await system.close()
    return result


async def slow_turns(system: System, run: str, turns: int) -> dict[str, Any]:
    """W2: the critical path of each turn of a conversation from empty, while its
    summarizer sleeps ``BENCH_SLOW_SLEEP`` seconds."""
    await system.start()
    slot = (run, f"slow-{system.label}", "agent")
    times = [sum(await turn(system, slot, i)) for i in range(turns)]
    await system.settle()
    await system.close()
    return {
        "label": system.label,
        "turn": stats(times),
        "series_ms": [t * 1000 for t in times],
        "over_half_s": sum(t > 0.5 for t in times),
    }


# -- W3: statements per operation -----------------------------------------------------------
_TX = re.compile(r"^\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE SAVEPOINT)", re.I)


def count(operation: Callable[..., Any], *args: Any) -> int:
    """SQL statements ``operation(*args)`` runs, transaction control left out."""
    with CaptureQueriesContext(connection) as ctx:
        operation(*args)
    return sum(1 for q in ctx.captured_queries if not _TX.match(q["sql"]))


def statements(run: str, n: int) -> dict[str, int]:
    """W3: statements of each operation of the inline wrapper on a slot of ``n`` messages
    (more than ``2 * TRIGGER_AT``: the first fetch activates the buffer)."""
    wrapper = SummarizingChatStorage(
        DjangoChatStorage(), systems.summarize, systems.TRIGGER_AT, systems.KEEP_LAST
    )
    key = (run, f"statements-{n}", "agent")
    systems._slot_row(key, n)
    found = {
        "first fetch_chat (activation: one compression)": count(wrapper.fetch_chat_sync, *key),
        "fetch_chat, active buffer": count(wrapper.fetch_chat_sync, *key),
        "save_chat_message": count(wrapper.save_chat_message_sync, *key, systems.message(n)),
        "save_chat_messages (2)": count(
            wrapper.save_chat_messages_sync, *key, [systems.message(n + 1), systems.message(n + 2)]
        ),
        "save_chat_message, same role (skipped)": count(
            wrapper.save_chat_message_sync, *key, systems.message(n + 2)
        ),
        "fetch_all_chats": count(wrapper.fetch_all_chats_sync, key[0], key[1]),
    }
    worst, k = 0, n + 3
    while Slot.objects.for_key(*key).values_list("version", flat=True).get() < 2 and k < n + 99:
        worst = max(worst, count(wrapper.save_chat_message_sync, *key, systems.message(k)))
        k += 1
    found["save_chat_message crossing the threshold (inline compression)"] = worst
    return found

"""The workloads: a turn as the history grows (W1), the turn with a slow summarizer (W2),
statements per operation (W3), and many conversations in one event loop (W4); :func:`step`
runs those of one step of the run in this process."""

from __future__ import annotations

import asyncio
import os
import random
import re
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from asgiref.sync import sync_to_async
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
    """W1: the turn of every system at each stored history N, all in this process: rounds of
    one block of turns of each system at each N, in a new order each round, so that a slow
    phase of the machine touches every system alike and no block always follows the same one
    (a heavy one slows the next). A system stops at a N once its turns took ``cap_s`` s."""
    slots: dict[tuple[str, int], SlotId] = {}
    for name, system in named.items():
        await system.start()
        for n in p["sizes"]:
            slots[name, n] = (run, f"{name}-{n}", "agent")
            await system.prefill(slots[name, n], n)
            await turn(system, slots[name, n], n)  # warm-up: connections, caches
        await system.settle()
    steps: dict[tuple[str, int], list[tuple[float, float, float]]] = {key: [] for key in slots}
    order = random.Random(0)  # the same orders in every run
    for first in range(0, p["turns"], p["block"]):
        for (name, n), slot in order.sample(list(slots.items()), len(slots)):
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
    key, message = (run, f"statements-{n}", "agent"), systems.message
    fetch, save = wrapper.fetch_chat_sync, wrapper.save_chat_message_sync
    systems._slot_row(key, n)
    found = {
        "first fetch_chat (activation: one compression)": count(fetch, *key),
        "fetch_chat, active buffer": count(fetch, *key),
        "save_chat_message": count(save, *key, message(n)),
        "save_chat_messages (2)": count(
            wrapper.save_chat_messages_sync, *key, [message(n + 1), message(n + 2)]
        ),
        "save_chat_message, same role (skipped)": count(save, *key, message(n + 2)),
        "fetch_all_chats": count(wrapper.fetch_all_chats_sync, key[0], key[1]),
    }
    worst, k = 0, n + 3
    while Slot.objects.for_key(*key).values_list("version", flat=True).get() < 2 and k < n + 99:
        worst = max(worst, count(save, *key, message(k)))
        k += 1
    found["save_chat_message crossing the threshold (inline compression)"] = worst
    return found


# -- W4: many conversations in one event loop ----------------------------------------------
class Connections(threading.Thread):
    """Samples, every 20 ms, the server connections of this process's application name
    (``pg_stat_activity``) from a connection of its own to ``DATABASE_URL``; :attr:`peak`
    is the most seen."""

    def __init__(self, application_name: str) -> None:
        super().__init__(daemon=True)
        self.name_, self.peak, self.stop = application_name, 0, threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
            while not self.stop.wait(0.02):
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND application_name = %s",
                    [self.name_],
                ).fetchone()
                self.peak = max(self.peak, row[0] if row else 0)


async def conversations(run: str, count_: int, spec: dict[str, Any]) -> dict[str, Any]:
    """W4 (PostgreSQL): ``count_`` conversations at once in this event loop, in the mode, with
    the summarizer and trigger of ``spec``, each its ``turns`` turns as agent-squad's
    orchestrator makes them: fetch_chat, save the user message, save the answer. Messages
    stored per second, the turn's latency, fetch_chat's, and fetch_chat's while a slow
    summary of another conversation runs in this process and none of its own (each message
    names its conversation, and so does the last message a summary reads)."""
    mode, slow, turns = spec["mode"], spec["slow"], spec["turns"]  # and trigger, pool
    summarizer = "bench.systems.summarize_slow" if slow else "bench.systems.summarize"
    storage = SummarizingChatStorage(DjangoChatStorage(), summarizer, *spec["trigger"], mode=mode)
    turn_s: list[float] = []
    fetches: list[tuple[str, float, float]] = []

    slots = [(run, f"{mode}-{slow}-{count_}-{c}", "agent") for c in range(count_)]

    def said(c: int, k: int) -> Any:  # each message names its conversation
        return systems.message(k, [{"text": f"conversation {c}: {systems.text_of(k)}"}])

    for c in range(count_) if slow else ():  # c mod trigger_at pairs first: summaries apart
        pairs = [said(c, k) for k in range(2 * (c % spec["trigger"][0]))]
        await storage.save_chat_messages(*slots[c], pairs)

    async def conversation(c: int) -> None:
        slot, tag = slots[c], f"conversation {c}:"
        for i in range(turns):
            t0 = time.perf_counter()
            await storage.fetch_chat(*slot)
            fetches.append((tag, t0, time.perf_counter()))
            for k in (2 * i, 2 * i + 1):
                await storage.save_chat_message(*slot, said(c, k))
            turn_s.append(time.perf_counter() - t0)

    sampler = Connections(connection.settings_dict["OPTIONS"]["application_name"])
    sampler.start()
    systems.SUMMARIES.clear()
    started = time.perf_counter()
    await asyncio.gather(*(conversation(c) for c in range(count_)))
    wall = time.perf_counter() - started
    sampler.stop.set()
    sampler.join()

    def overlaps(tag: str, f0: float, f1: float, own: bool) -> bool:
        return any(
            f0 < s1 and s0 < f1 and (tag in text) == own for s0, s1, text in systems.SUMMARIES
        )

    beside = [(tag, f0, f1) for tag, f0, f1 in fetches if overlaps(tag, f0, f1, own=False)]
    during = [  # a summary's last message names its conversation; a fetch that ran its own
        f1 - f0  # conversation's summary waited for that one, not for another's
        for tag, f0, f1 in beside
        if not overlaps(tag, f0, f1, own=True)
    ]
    return {
        "conversations": count_,
        "turns": turns,
        "wall_s": wall,
        "messages_per_s": 2 * len(turn_s) / wall,
        "turn": stats(turn_s),
        "fetch": stats([f1 - f0 for _, f0, f1 in fetches]),
        "fetch_during_summaries": stats(during),
        "fetches_beside_summaries": len(beside),  # overlapping another's, own or not
        "summaries": len(systems.SUMMARIES),
        "connections": sampler.peak,
    }


async def step(spec: dict[str, Any]) -> dict[str, Any]:
    """One step of the run (``spec`` from :meth:`bench.__main__.Run.step`): W4's run at each
    count of conversations, or W1, W2 and W3 on this database (W1 alone where it prepares
    statements)."""
    p, run, c = spec["params"], spec["run"], spec.get("concurrency")
    if c:
        return {str(k): await conversations(run, k, c) for k in p["counts"]}
    if systems.PREPARED:  # W1 alone: the turn against its floors
        return {"systems": await growth(systems.contenders(Path(spec["work"])), run, p)}
    slow = systems.contenders(Path(spec["work"]), slow=True)
    return {
        "systems": await growth(systems.contenders(Path(spec["work"])), run, p),
        "W2": {sid: await slow_turns(system, run, p["slow_turns"]) for sid, system in slow.items()},
        "W3": await sync_to_async(statements)(run, p["statements_n"]),
    }

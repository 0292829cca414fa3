"""Workloads 1 to 3: one turn as the history grows, fetch on an active buffer, latency."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench import lockstep
from bench.base import SlotId, System, timed_turn
from bench.stats import ms


async def history_growth(
    system: System,
    run: str,
    sizes: list[int],
    turns: int,
    cap_s: float,
    fetches: int,
    block: int = lockstep.BLOCK,
) -> dict[str, Any]:
    """W1 and W2: per-turn cost and ``fetch_chat`` cost at each stored history size N.

    W2 comes after W1 at every N, its fetches taken in turn across the sizes, so that a
    drift of the machine's speed touches every N alike. In a lockstep round
    (:mod:`bench.lockstep`) the process waits at a gate before and after each N's
    prefill, after each block of turns and before W2, with nothing of its own still
    running; a process that reached the time cap keeps passing its gates."""
    w1: dict[str, Any] = {}
    slots: dict[int, SlotId] = {}
    for n in sizes:
        slot: SlotId = (run, f"n{n}", "agent")
        lockstep.gate()
        t0 = time.perf_counter()
        await system.prefill(slot, n)
        prefill_s = time.perf_counter() - t0
        await system.settle(slot)
        lockstep.gate()  # the prefill's own segment: its writes settle before the blocks
        w1[str(n)] = await _turns(system, slot, turns, cap_s, block)
        w1[str(n)]["prefill_s"] = prefill_s
        slots[n] = slot
    for slot in slots.values():
        await system.settle(slot)
    lockstep.gate()
    return {"W1": w1, "W2": await _fetches(system, slots, fetches, cap_s)}


async def _turns(
    system: System, slot: SlotId, turns: int, cap_s: float, block: int
) -> dict[str, Any]:
    parts: dict[str, list[float]] = {}
    totals: list[float] = []
    spans: list[list[float]] = []  # lockstep: each block's start and end (monotonic)
    paired = lockstep.active()
    await timed_turn(system, slot, 0)  # warm-up (connections, caches)
    deadline = time.monotonic() + cap_s
    waited = 0.0  # at gates: not this process's time
    capped = False
    started = time.monotonic()
    for i in range(1, turns + 1):
        if not capped:
            step = await timed_turn(system, slot, i)
            totals.append(sum(v for k, v in step.items() if k in ("save", "fetch")))
            for key, value in step.items():
                parts.setdefault(key, []).append(value)
            capped = time.monotonic() - waited > deadline
        if capped and not paired:
            break
        if paired and i % block == 0:
            spans.append([started, time.monotonic()])
            await system.settle(slot)  # a queued compression is not left to run meanwhile
            at = time.monotonic()
            lockstep.gate()
            started = time.monotonic()
            waited += started - at
    result: dict[str, Any] = {"turn": ms(totals), "capped": len(totals) < turns, "asked": turns}
    result.update({key: ms(values) for key, values in parts.items()})
    # Block medians (ms) and times, for the ratio to a floor run in lockstep beside it.
    blocks = [b * 1000 for b in lockstep.blocks_of(totals, block)] if paired else None
    result["blocks"], result["spans"] = blocks, spans[: len(blocks)] if blocks else None
    return result


async def _fetches(
    system: System, slots: dict[int, SlotId], count: int, cap_s: float
) -> dict[str, Any]:
    """``count`` fetches of each slot, one slot after the other (N=100, 1,000, 10,000,
    100, ...); a slot's fetches stop once they took ``cap_s`` seconds in all."""
    values: dict[int, list[float]] = {n: [] for n in slots}
    spent = dict.fromkeys(slots, 0.0)
    for _ in range(count):
        for n, slot in slots.items():
            if spent[n] > cap_s:
                continue
            t0 = time.perf_counter()
            await system.fetch(slot)
            took = time.perf_counter() - t0
            values[n].append(took)
            spent[n] += took
    result: dict[str, Any] = {}
    for n, found in values.items():
        result[str(n)] = ms(found)
        result[str(n)]["capped"] = len(found) < count
    return result


async def latency(system: System, run: str, turns: int, think_s: float) -> dict[str, Any]:
    """W3: critical-path time of each turn of a conversation from empty, summarizer slow.

    ``think_s`` (not timed) stands for the agent's own answer between turns.
    """
    slot: SlotId = (run, "latency", "agent")
    totals: list[float] = []
    started = time.perf_counter()
    for i in range(turns):
        step = await timed_turn(system, slot, i)
        totals.append(step["save"] + step["fetch"])
        await asyncio.sleep(think_s)
    elapsed = time.perf_counter() - started
    await system.settle(slot)
    result: dict[str, Any] = {"turn": ms(totals), "series_ms": [t * 1000 for t in totals]}
    result["wall_s"] = elapsed
    result["slow_turns"] = sum(1 for t in totals if t > 0.5)
    return result

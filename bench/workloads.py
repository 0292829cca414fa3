"""Workloads 1 to 3: one turn as the history grows, fetch on an active buffer, latency."""

from __future__ import annotations

import asyncio
import statistics
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

    Every N's slot is prefilled first; then the turns run in cycles, one block of
    ``block`` turns at each N in turn (N=100, 1,000, 10,000, 100, ...), so a block at
    N=10,000 and the block at N=100 of the same cycle are milliseconds apart and their
    ratio (``flat_ratios``) is paired in time, as a ratio to a floor is in lockstep. W2
    comes after W1, its fetches taken in turn across the sizes for the same reason. In a
    lockstep round (:mod:`bench.lockstep`) the process waits at a gate before each
    prefill, before the turns, after each block and before W2, with nothing of its own
    still running; a process that reached the time cap keeps passing its gates."""
    slots: dict[int, SlotId] = {}
    prefill_s: dict[int, float] = {}
    for n in sizes:
        slot: SlotId = (run, f"n{n}", "agent")
        lockstep.gate()
        t0 = time.perf_counter()
        await system.prefill(slot, n)
        prefill_s[n] = time.perf_counter() - t0
        await system.settle(slot)
        slots[n] = slot
    for slot in slots.values():
        await timed_turn(system, slot, 0)  # warm-up (connections, caches)
        await system.settle(slot)
    lockstep.gate()  # the prefills' and warm-ups' own segment
    w1 = await _turns(system, slots, turns, cap_s, block)
    for n in sizes:
        w1[str(n)]["prefill_s"] = prefill_s[n]
    for slot in slots.values():
        await system.settle(slot)
    lockstep.gate()
    return {"W1": w1, "W2": await _fetches(system, slots, fetches, cap_s)}


class _Series:
    """One N's timed turns: each step's times, and the turn times of each cycle."""

    def __init__(self) -> None:
        self.parts: dict[str, list[float]] = {}
        self.cycles: list[list[float]] = []
        self.spans: list[list[float]] = []  # each cycle's start and end (monotonic)
        self.spent = 0.0

    def add(self, step: dict[str, float]) -> None:
        total = sum(v for k, v in step.items() if k in ("save", "fetch"))
        self.cycles[-1].append(total)
        self.spent += total
        for key, value in step.items():
            self.parts.setdefault(key, []).append(value)

    def full(self, block: int) -> list[int]:
        """The cycles that ran a whole block."""
        return [c for c, totals in enumerate(self.cycles) if len(totals) == block]


async def _turns(
    system: System, slots: dict[int, SlotId], turns: int, cap_s: float, block: int
) -> dict[str, Any]:
    """``turns`` timed turns at each N, in cycles of one block per N; a N's turns stop
    once they took ``cap_s`` seconds in all (its later blocks are empty)."""
    paired = lockstep.active()
    series = {n: _Series() for n in slots}
    done = 0
    while done < turns:
        size = min(block, turns - done)
        for n, slot in slots.items():
            one = series[n]
            one.cycles.append([])
            started = time.monotonic()
            for i in range(done + 1, done + size + 1):
                if one.spent > cap_s:
                    break
                one.add(await timed_turn(system, slot, i))
            one.spans.append([started, time.monotonic()])
            if paired:
                await system.settle(slot)  # a queued compression is not left to run meanwhile
                lockstep.gate()
        done += size
    return {str(n): _figures(series, n, turns, block, paired) for n in slots}


def _figures(
    series: dict[int, _Series], n: int, turns: int, block: int, paired: bool
) -> dict[str, Any]:
    """One N's W1 figures: statistics of the turn and of each step; the medians of its
    whole blocks (ms) and their spans, in lockstep, for the ratio to a floor run beside
    it; and ``flat_ratios``: each whole block's median over the smallest N's block of the
    same cycle."""
    one, base = series[n], series[min(series)]
    totals = [t for cycle in one.cycles for t in cycle]
    result: dict[str, Any] = {"turn": ms(totals), "capped": len(totals) < turns, "asked": turns}
    result.update({key: ms(values) for key, values in one.parts.items()})
    full = one.full(block)
    medians = [statistics.median(one.cycles[c]) for c in full]
    result["blocks"] = [m * 1000 for m in medians] if paired else None
    result["spans"] = [one.spans[c] for c in full] if paired else None
    both = [c for c in full if c in set(base.full(block))]
    result["flat_ratios"] = [
        statistics.median(one.cycles[c]) / statistics.median(base.cycles[c]) for c in both
    ]
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

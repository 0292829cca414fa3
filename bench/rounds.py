"""W1 again, in rounds, for the systems held against a floor, and the rounds merged.

The plain driver's turn and squad_memory's are measured in separate processes, some
seconds apart; on a shared machine the speed of the CPU can drift between the two
more than the difference being measured. So the floors and the systems held against
them run W1 again in alternation (floor, system, floor, system, ...), each round a
fresh process on a fresh slot, and every figure of W1 becomes the median of the
rounds' figures: one slow phase moves one round, not the ratio. The rounds after the
first run in lockstep (:mod:`bench.lockstep`): each system beside its floor, one
block of turns at a time, and the ratio to the floor is taken block by block.
"""

from __future__ import annotations

import statistics
from typing import Any

#: The systems run in rounds, each in lockstep beside the floor it is held against
#: (a floor runs once per system in a round).
ROUND_PAIRS = (
    ("floor-sqlite", "sm-inline-sqlite"),
    ("floor-postgresql", "sm-inline-postgresql"),
    ("floor-postgresql", "sm-celery-postgresql"),
)
ROUND_SYSTEMS = tuple(dict.fromkeys(sid for pair in ROUND_PAIRS for sid in pair))


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One W1 result from the W1 results of several rounds: each timing's statistics the
    median of the rounds' (``rounds``: the rounds' medians), counts summed."""
    merged: dict[str, Any] = {}
    for n in runs[0]:
        per = [run[n] for run in runs if n in run]
        out: dict[str, Any] = {}
        for key, value in per[0].items():
            if key in ("blocks", "spans"):  # per round: its blocks (None outside lockstep)
                out[key] = [p.get(key) for p in per]
            elif isinstance(value, dict) and "median" in value:
                out[key] = merge_stats([p[key] for p in per if key in p])
            elif isinstance(value, bool):
                out[key] = any(p.get(key, False) for p in per)
            elif isinstance(value, (int, float)):
                out[key] = statistics.median(p[key] for p in per if key in p)
            else:
                out[key] = value
        merged[n] = out
    return merged


def merge_w2(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One W2 result (``{N: statistics}``) from the rounds' W2 results."""
    out: dict[str, Any] = {}
    for n in runs[0]:
        per = [run[n] for run in runs if n in run]
        out[n] = merge_stats(per)
        out[n]["capped"] = any(p.get("capped", False) for p in per)
    return out


def merge_stats(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Statistics of several rounds: each the median of the rounds', ``n`` summed, and the
    rounds' medians in ``rounds``."""
    stats: dict[str, Any] = {
        stat: statistics.median(p[stat] for p in parts)
        for stat, value in parts[0].items()
        if stat not in ("n", "capped", "rounds") and isinstance(value, (int, float))
    }
    stats["n"] = sum(p.get("n", 0) for p in parts)
    stats["rounds"] = [p["median"] for p in parts]
    return stats

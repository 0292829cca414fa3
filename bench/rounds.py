"""W1 again, in rounds, for the systems held against a floor, and the rounds merged.

The floor and squad_memory are measured in separate processes; on a shared machine
the speed of the CPU can drift between the two more than the difference being
measured. So the floors and the systems held against them run W1 again, each round a
fresh process on a fresh slot, and every figure of W1 becomes the median of the
rounds' figures: one slow phase moves one round, not the ratio. The rounds after the
first run in lockstep (:mod:`bench.lockstep`): each system beside its floors, one
block of turns at a time, and a ratio to a floor is taken block by block.
"""

from __future__ import annotations

import statistics
from typing import Any

#: The groups run in lockstep in each round after the first: Django's floor, the system
#: held against it, then (for information) the plain driver's floor. The system runs in
#: the middle, so its every block runs right before or after a block of each floor (the
#: order turns around every cycle). A floor runs once per group it is in. Celery mode
#: is held against Django's floor only (its plain-driver ratio is the medians' ratio).
ROUND_GROUPS: tuple[tuple[str, ...], ...] = (
    ("floor-django-sqlite", "sm-inline-sqlite", "floor-driver-sqlite"),
    ("floor-django-postgresql", "sm-inline-postgresql", "floor-driver-postgresql"),
    ("floor-django-postgresql", "sm-celery-postgresql"),
)
ROUND_SYSTEMS = tuple(dict.fromkeys(sid for group in ROUND_GROUPS for sid in group))


def is_floor(sid: str) -> bool:
    return sid.startswith("floor-")


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
            elif key == "flat_ratios":  # every round's, together
                out[key] = [r for p in per for r in p.get(key) or []]
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

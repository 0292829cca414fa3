"""Each system's turn against the floor of its database (the plain driver's turn)."""

from __future__ import annotations

import statistics
from typing import Any

FLOORS = {"postgresql": "floor-postgresql", "sqlite": "floor-sqlite"}


def database_of(sid: str) -> str:
    """The database whose floor a system is held against.

    PostgreSQL systems against psycopg; the rest (SQLite, agent-squad's libsql file,
    LangChain's SQLite, in-process memory) against sqlite3 on a local file.
    """
    return "postgresql" if sid.endswith("postgresql") else "sqlite"


def turn(results: dict[str, Any], sid: str, n: int) -> float | None:
    try:
        return float(results["systems"][sid]["W1"][str(n)]["turn"]["median"])
    except KeyError:
        return None


def _w1(results: dict[str, Any], sid: str, n: int) -> dict[str, Any]:
    return results["systems"].get(sid, {}).get("W1", {}).get(str(n), {})  # type: ignore[no-any-return]


def to_floor(results: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """``{system: {N: turn / floor turn}}`` for every system with W1 figures: the median
    of the blocks' ratios where it ran in lockstep beside its floor (:mod:`bench.lockstep`),
    else median turn / median floor turn."""
    sizes = results["params"]["sizes"]
    out: dict[str, dict[str, float | None]] = {}
    for sid, value in results["systems"].items():
        if "W1" not in value:
            continue
        floor = FLOORS[database_of(sid)]
        per: dict[str, float | None] = {}
        for n in sizes:
            blocks = _w1(results, sid, n).get("block_ratios")
            mine, base = turn(results, sid, n), turn(results, floor, n)
            if blocks:
                per[str(n)] = float(statistics.median(blocks))
            else:
                per[str(n)] = mine / base if mine and base else None
        out[sid] = per
    return out


def lines(results: dict[str, Any]) -> list[str]:
    """Printable lines: each system's ratio to its database's floor at each N."""
    sizes = results["params"]["sizes"]
    head = "  turn / floor of its database: " + ", ".join(f"N={n:,}" for n in sizes)
    rows = [head]
    for sid, per in to_floor(results).items():
        cells = ", ".join("-" if r is None else f"{r:.2f}x" for r in per.values())
        rows.append(f"    {sid:<22} (vs {FLOORS[database_of(sid)]}): {cells}")
    return rows


def show(results: dict[str, Any]) -> None:
    print("\n".join(lines(results)), flush=True)

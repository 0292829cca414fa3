"""Each system's turn against the floors of its database.

The floor every ratio is judged against is Django's (:class:`bench.floor.DjangoFloor`:
the floor's statements through Django's connection, one ``sync_to_async`` hop per
call); the plain driver's (:class:`bench.floor.DriverFloor`) is shown beside it, for
information.
"""

from __future__ import annotations

import statistics
from typing import Any

#: The floor of each database: the statements through Django's connection.
FLOORS = {"postgresql": "floor-django-postgresql", "sqlite": "floor-django-sqlite"}
#: The plain driver doing the same, for information.
DRIVER_FLOORS = {"postgresql": "floor-driver-postgresql", "sqlite": "floor-driver-sqlite"}


def database_of(sid: str) -> str:
    """The database whose floor a system is held against.

    PostgreSQL systems against PostgreSQL's; the rest (SQLite, agent-squad's libsql file,
    LangChain's SQLite, in-process memory) against SQLite's, on a local file.
    """
    return "postgresql" if sid.endswith("postgresql") else "sqlite"


def turn(results: dict[str, Any], sid: str, n: int) -> float | None:
    try:
        return float(results["systems"][sid]["W1"][str(n)]["turn"]["median"])
    except KeyError:
        return None


def _w1(results: dict[str, Any], sid: str, n: int) -> dict[str, Any]:
    return results["systems"].get(sid, {}).get("W1", {}).get(str(n), {})  # type: ignore[no-any-return]


def to_floor(
    results: dict[str, Any], floors: dict[str, str] = FLOORS
) -> dict[str, dict[str, float | None]]:
    """``{system: {N: turn / floor turn}}`` for every system with W1 figures, against
    ``floors`` (Django's by default): the median of the blocks' ratios where the system
    ran in lockstep beside that floor (:mod:`bench.lockstep`), else median turn / median
    floor turn."""
    sizes = results["params"]["sizes"]
    out: dict[str, dict[str, float | None]] = {}
    for sid, value in results["systems"].items():
        if "W1" not in value:
            continue
        floor = floors[database_of(sid)]
        per: dict[str, float | None] = {}
        for n in sizes:
            blocks = (_w1(results, sid, n).get("block_ratios") or {}).get(floor)
            mine, base = turn(results, sid, n), turn(results, floor, n)
            if blocks:
                per[str(n)] = float(statistics.median(blocks))
            else:
                per[str(n)] = mine / base if mine and base else None
        out[sid] = per
    return out


def flatness(results: dict[str, Any], sid: str, small: int, large: int) -> float | None:
    """Turn at N=``large`` / turn at N=``small``: the median of the ratios of the blocks of
    one cycle (``flat_ratios``: the two N's blocks run milliseconds apart in the same
    process, :func:`bench.workloads.history_growth`), else the medians' ratio."""
    paired = _w1(results, sid, large).get("flat_ratios")
    if paired and small == min(results["params"]["sizes"]):
        return float(statistics.median(paired))
    a, b = turn(results, sid, large), turn(results, sid, small)
    return a / b if a and b else None


def lines(results: dict[str, Any]) -> list[str]:
    """Printable lines: each system's ratio to its database's floors at each N."""
    sizes = results["params"]["sizes"]
    at = ", ".join(f"N={n:,}" for n in sizes)
    rows = [f"  turn / floor of its database (Django's; the plain driver's in brackets): {at}"]
    django, driver = to_floor(results), to_floor(results, DRIVER_FLOORS)
    for sid, per in django.items():
        cells = ", ".join(f"{_x(r)} ({_x(driver[sid][n])})" for n, r in per.items())
        rows.append(f"    {sid:<24} {cells}")
    return rows


def _x(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def show(results: dict[str, Any]) -> None:
    print("\n".join(lines(results)), flush=True)

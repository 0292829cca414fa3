"""The targets the results are judged against: each met or not, with its ratio."""

from __future__ import annotations

import itertools
from typing import Any

from bench.ratios import FLOORS, database_of, flatness, to_floor

PGBOUNCER_TARGET = "squad_memory different slots, PgBouncer"

SM = ("sm-inline-sqlite", "sm-inline-postgresql", "sm-celery-postgresql")


def _w1(results: dict[str, Any], sid: str, n: int, part: str = "turn") -> float | None:
    try:
        return float(results["systems"][sid]["W1"][str(n)][part]["median"])
    except KeyError:
        return None


def _w2(results: dict[str, Any], sid: str, n: int) -> float | None:
    try:
        return float(results["systems"][sid]["W2"][str(n)]["median"])
    except KeyError:
        return None


def _row(
    target: str, subject: str, ratio: float | None, met: bool | None, how: str
) -> dict[str, Any]:
    return {"target": target, "subject": subject, "ratio": ratio, "met": met, "how": how}


def _judge(ratio: float | None, ok: Any) -> bool | None:
    return None if ratio is None else bool(ok(ratio))


#: The most a squad_memory turn may cost against Django's floor of its database.
FLOOR_LIMITS = {"sqlite": 1.5, "postgresql": 1.3}
#: How many times faster than agent-squad's wrapper over libsql a turn must be.
LIBSQL_SPEEDUP = 3.0
#: The most a turn or a fetch may grow from the smallest N to the largest.
FLAT = 1.3


def evaluate(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target judged on ``results``: ``target``, ``subject``, ``ratio``, ``met``
    (None: not measured) and ``how`` the ratio is taken. The floor and libsql targets
    are judged at the smallest and the largest N (100 and 10,000 in a full run)."""
    sizes = results["params"]["sizes"]
    small, large = min(sizes), max(sizes)
    rows: list[dict[str, Any]] = []
    for sid in SM:
        if sid not in results["systems"] or "W1" not in results["systems"][sid]:
            continue
        rows.extend(_floor_row(results, sid, n) for n in (small, large))
        rows.extend(_libsql_row(results, sid, n) for n in (small, large))
        ratio = flatness(results, sid, small, large)
        rows.append(
            _row(
                f"per turn, N={large:,} within {FLAT}x of N={small:,}",
                sid,
                ratio,
                _judge(ratio, lambda r: r <= FLAT),
                "turn(N large) / turn(N small), median of the ratios of blocks run in turn",
            )
        )
        a, b = _w2(results, sid, large), _w2(results, sid, small)
        ratio = a / b if a and b else None
        rows.append(
            _row(
                f"fetch_chat, N={large:,} within {FLAT}x of N={small:,}",
                sid,
                ratio,
                _judge(ratio, lambda r: r <= FLAT),
                "median fetch(N large) / fetch(N small)",
            )
        )
        other, mine = _w1(results, "as-inmemory", large), _w1(results, sid, large)
        ratio = other / mine if other and mine else None
        rows.append(
            _row(
                f"faster per turn than agent-squad InMemory at N={large:,}",
                sid,
                ratio,
                _judge(ratio, lambda r: r > 1),
                "agent-squad turn / ours (>1 = we are faster)",
            )
        )
    rows.extend(_save_rows(results, large))
    rows.extend(_log_rows(results))
    rows.extend(_celery_and_writers(results))
    return rows


def _floor_row(results: dict[str, Any], sid: str, n: int) -> dict[str, Any]:
    """Turn / Django's floor's turn on the same database, at ``n``."""
    database = database_of(sid)
    limit = FLOOR_LIMITS[database]
    ratio = to_floor(results).get(sid, {}).get(str(n))
    return _row(
        f"turn within {limit:g}x Django's floor ({database}) at N={n:,}",
        sid,
        ratio,
        _judge(ratio, lambda r: r <= limit),
        f"ours / {FLOORS[database]} turn (median of lockstep blocks' ratios)",
    )


def _libsql_row(results: dict[str, Any], sid: str, n: int) -> dict[str, Any]:
    other, mine = _w1(results, "as-libsql", n), _w1(results, sid, n)
    ratio = other / mine if other and mine else None
    return _row(
        f"at least {LIBSQL_SPEEDUP:g}x faster per turn than agent-squad over libsql at N={n:,}",
        sid,
        ratio,
        _judge(ratio, lambda r: r >= LIBSQL_SPEEDUP),
        "libsql turn / ours (medians)",
    )


def _log_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    fill = results.get("W6", {}).get("fill", {})
    if not fill.get("raw_bytes"):
        return []
    ratio = fill["log_bytes"] / fill["raw_bytes"]
    return [
        _row(
            "compression log bytes at most 10% of raw message bytes",
            f"W6, {results['W6']['squad_memory']['slots']:,} slots, {results['W6']['database']}",
            ratio,
            ratio <= 0.10,
            "bytes of the slots' compression log rows / of their message rows",
        )
    ]


def _save_rows(results: dict[str, Any], large: int) -> list[dict[str, Any]]:
    rows = []
    for db, sync in results.get("sync", {}).items():
        ratio = sync["wrapper_save"]["median"] / sync["orm_insert"]["median"]
        rows.append(
            _row(
                "a save through the wrapper within 2x a bare ORM insert",
                f"sync, {db}",
                ratio,
                ratio <= 2,
                "save_chat_message_sync / Message.objects.create (medians)",
            )
        )
    for db in ("sqlite", "postgresql"):
        mine, floor = (
            _w1(results, f"sm-inline-{db}", large, "save_user"),
            _w1(results, f"orm-{db}", large, "save_user"),
        )
        if mine and floor:
            rows.append(
                _row(
                    "a save through the wrapper within 2x a bare ORM insert",
                    f"async, {db}",
                    mine / floor,
                    mine / floor <= 2,
                    f"await save_chat_message / await sync_to_async(create), N={large:,}",
                )
            )
    return rows


def _celery_and_writers(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    w3 = results["systems"].get("sm-celery-postgresql", {}).get("W3")
    if w3:
        ratio = w3["turn"]["p99"] / w3["turn"]["p50"]
        rows.append(
            _row(
                "Celery mode: per-turn p99 within 1.5x p50",
                "sm-celery-postgresql",
                ratio,
                ratio <= 1.5,
                "p99 / p50 of the turn latency",
            )
        )
    for target in ("squad_memory different slots", PGBOUNCER_TARGET):
        rows.extend(_scaling(results, target))
    bouncer = results.get("W5_pgbouncer")
    if bouncer:
        works = not bouncer.get("error") and bool(results.get("W5", {}).get(PGBOUNCER_TARGET))
        rows.append(
            _row(
                "the save path works unchanged through PgBouncer (transaction pooling)",
                "W5 writers via PgBouncer",
                None,
                works,
                bouncer.get("error") or "every writer saved through PgBouncer",
            )
        )
    return rows


def _scaling(results: dict[str, Any], target: str) -> list[dict[str, Any]]:
    w5 = results.get("W5", {}).get(target)
    cores = results["machine"]["nproc"] or 1
    if not w5:
        return []
    counts = sorted(int(w) for w in w5)
    upto = [w for w in counts if w <= cores] or counts[:1]
    series = [w5[str(w)] for w in upto]
    ratio = series[-1] / series[0] if series[0] else None
    grows = all(b > a for a, b in itertools.pairwise(series))
    return [
        _row(
            f"throughput on different slots grows with writers up to {cores} cores",
            f"{target}: writers {upto[0]}..{upto[-1]}",
            ratio,
            grows and len(series) > 1,
            f"msgs/s at {upto[-1]} writers / at {upto[0]}",
        )
    ]

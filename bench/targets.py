"""The targets the results are judged against: each met or not, with its ratio."""

from __future__ import annotations

from typing import Any

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


def evaluate(results: dict[str, Any]) -> list[dict[str, Any]]:
    sizes = results["params"]["sizes"]
    small, large = min(sizes), max(sizes)
    rows: list[dict[str, Any]] = []
    for sid in SM:
        if sid not in results["systems"] or "W1" not in results["systems"][sid]:
            continue
        a, b = _w1(results, sid, large), _w1(results, sid, small)
        ratio = a / b if a and b else None
        rows.append(
            _row(
                f"per turn, N={large:,} within 1.3x of N={small:,}",
                sid,
                ratio,
                _judge(ratio, lambda r: r <= 1.3),
                "median turn(N large) / turn(N small)",
            )
        )
        a, b = _w2(results, sid, large), _w2(results, sid, small)
        ratio = a / b if a and b else None
        rows.append(
            _row(
                f"fetch_chat, N={large:,} within 1.3x of N={small:,}",
                sid,
                ratio,
                _judge(ratio, lambda r: r <= 1.3),
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
        per_n = [(_w1(results, "as-libsql", n), _w1(results, sid, n)) for n in sizes]
        ratios = [o / m for o, m in per_n if o and m]
        worst = min(ratios) if len(ratios) == len(sizes) else None
        rows.append(
            _row(
                "10x faster than agent-squad over libsql at every N",
                sid,
                worst,
                _judge(worst, lambda r: r >= 10),
                "smallest libsql turn / ours over N",
            )
        )
    rows.extend(_save_rows(results, large))
    rows.extend(_celery_and_writers(results))
    return rows


def _save_rows(results: dict[str, Any], large: int) -> list[dict[str, Any]]:
    rows = []
    for db, sync in results.get("sync", {}).items():
        ratio = sync["wrapper_save"]["median"] / sync["orm_insert"]["median"]
        rows.append(
            _row(
                "a save through the wrapper within 3x a bare ORM insert",
                f"sync, {db}",
                ratio,
                ratio <= 3,
                "save_chat_message_sync / Message.objects.create (medians)",
            )
        )
    for db in ("sqlite", "postgresql"):
        mine, floor = (
            _w1(results, f"sm-inline-{db}", large, "save_user"),
            _w1(results, f"floor-{db}", large, "save_user"),
        )
        if mine and floor:
            rows.append(
                _row(
                    "a save through the wrapper within 3x a bare ORM insert",
                    f"async, {db}",
                    mine / floor,
                    mine / floor <= 3,
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
    w5 = results.get("W5", {}).get("squad_memory different slots")
    cores = results["machine"]["nproc"] or 1
    if w5:
        counts = sorted(int(w) for w in w5)
        upto = [w for w in counts if w <= cores] or counts[:1]
        series = [w5[str(w)] for w in upto]
        ratio = series[-1] / series[0] if series[0] else None
        grows = all(b > a for a, b in zip(series, series[1:]))
        rows.append(
            _row(
                f"throughput on different slots grows with writers up to {cores} cores",
                f"writers {upto[0]}..{upto[-1]}",
                ratio,
                grows and len(series) > 1,
                f"msgs/s at {upto[-1]} writers / at {upto[0]}",
            )
        )
    return rows

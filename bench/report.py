"""The results page (README.md) and its plots, from one run's results.

The page's prose is the template ``results.md`` beside this module; the figures and the
tables built here fill its named placeholders (``str.format``).
"""

from __future__ import annotations

import datetime
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import django
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

FLOORS = {"floor-django": "Django's floor", "floor-contract": "contract floor"}
RIVALS = {
    "as-inmemory": "agent-squad InMemory",
    "as-libsql": "agent-squad libsql",
    "langchain": "LangChain SQL",
}
TEMPLATE = Path(__file__).with_name("results.md")


def f(value: Any) -> str:
    """A figure as the page shows it: 3 significant digits, thousands separated."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.2f}" if abs(value) >= 0.01 or value == 0 else f"{value:.4f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of ``rows`` (their keys are its head)."""
    head = list(rows[0]) if rows else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(
        [*lines, *("| " + " | ".join(f(c) for c in row.values()) + " |" for row in rows)]
    )


def turn(r: dict[str, Any], sid: str, n: int) -> float | None:
    got = r["systems"].get(sid, {}).get("W1", {}).get(str(n), {}).get("turn", {})
    return got.get("median")


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def ratios(r: dict[str, Any], sid: str, base: str) -> dict[str, float | None]:
    """``sid``'s W1 turn over ``base``'s at each N, by column."""
    return {f"N={n:,}": ratio(turn(r, sid, n), turn(r, base, n)) for n in r["params"]["sizes"]}


def database(db: str) -> str:
    """A database of the results (``postgresql_prepared``: W1 with prepared statements)."""
    return db.replace("_prepared", ", prepared statements")


def goals(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal, the ratio measured and whether it is met."""
    sizes, rows = r["params"]["sizes"], []

    def add(goal: str, measured: float | None, met: Callable[[float], bool]) -> None:
        verdict = "-" if measured is None else ("met" if met(measured) else "**not met**")
        rows.append({"goal": goal, "measured": measured, "verdict": verdict})

    for db in ("sqlite", "postgresql", "postgresql_prepared"):
        sm, name = f"sm-inline-{db}", database(db)
        for n in (sizes[0], sizes[-1]):
            got = ratio(turn(r, sm, n), turn(r, f"floor-contract-{db}", n))
            add(f"turn within 1.3x the contract floor ({name}), N={n:,}", got, lambda v: v <= 1.3)
            if f"sm-onethread-{db}" in r["systems"]:
                got = ratio(turn(r, sm, n), turn(r, f"sm-onethread-{db}", n))
                goal = f"turn no slower than on one thread ({db}, within 5%), N={n:,}"
                add(goal, got, lambda v: v <= 1.05)
        flat = ratio(turn(r, sm, sizes[-1]), turn(r, sm, sizes[0]))
        goal = f"turn flat in N ({name}): N={sizes[-1]:,} within 1.3x N={sizes[0]:,}"
        add(goal, flat, lambda v: v <= 1.3)
    for n in (sizes[0], sizes[-1]):
        got = ratio(turn(r, "as-libsql", n), turn(r, "sm-inline-sqlite", n))
        add(f"3x faster per turn than agent-squad over libsql, N={n:,}", got, lambda v: v >= 3)
    w4 = r.get("W4", {})
    far = w4.get("inline, database 2 ms away", {}).get("by_count", {})
    counts = sorted(int(k) for k in far)
    if len(counts) > 1:
        got = ratio(far[str(counts[-1])]["messages_per_s"], far[str(counts[0])]["messages_per_s"])
        goal = f"{counts[-1]} conversations get 3x the messages/s of one, database 2 ms away"
        add(goal, got, lambda v: v >= 3)
    slow = w4.get("inline, 1 s summarizer, database 2 ms away", {}).get("by_count", {})
    for k, got in list(slow.items())[1:]:  # one conversation has no others
        goal = f"{k} conversations, 1 s summarizer: the others' fetch_chat p99 under 250 ms"
        add(goal, got["fetch_during_summaries"].get("p99"), lambda v: v < 250)
    return rows


def w1(r: dict[str, Any]) -> dict[str, str]:
    """W1's tables: the turn at each N, its steps, its ratios to the floors and to others."""
    sizes, turns = r["params"]["sizes"], r["params"]["turns"]

    def cell(one: dict[str, Any]) -> str:
        """The turn's median (its p90, and how many turns ran if capped)."""
        capped = f", {one['turn']['n']}/{turns} turns" if one["capped"] else ""
        return f"{f(one['turn']['median'])} ({f(one['turn']['p90'])}{capped})"

    def steps(one: dict[str, Any]) -> str:
        """The median of each step: save user / save answer / fetch."""
        return " / ".join(
            f(one[step].get("median")) for step in ("save_user", "save_answer", "fetch")
        )

    rows, parts, floors = [], [], []
    for sid, got in r["systems"].items():
        at = {f"N={n:,}": got["W1"][str(n)] for n in sizes}
        growth = ratio(turn(r, sid, sizes[-1]), turn(r, sid, sizes[0]))
        cells = {col: cell(one) for col, one in at.items()}
        rows.append({"system": got["label"], **cells, f"N={sizes[-1]:,} / N={sizes[0]:,}": growth})
        parts.append({"system": got["label"], **{col: steps(one) for col, one in at.items()}})
        db = sid.rsplit("-", 1)[-1]
        for floor, name in FLOORS.items():
            base = f"{floor}-{db}"
            if sid.startswith(("sm-", "floor-contract")) and sid != base and base in r["systems"]:
                floor_name = f"{name} ({database(db)})"
                floors.append({"system": got["label"], "floor": floor_name, **ratios(r, sid, base)})
    rivals = [
        {"store": name, **ratios(r, sid, "sm-inline-sqlite")}
        for sid, name in RIVALS.items()
        if sid in r["systems"]
    ]
    tables = {"w1": rows, "w1_steps": parts, "w1_floors": floors, "w1_rivals": rivals}
    return {name: table(found) for name, found in tables.items()}


def w2_to_w3(r: dict[str, Any]) -> dict[str, str]:
    rows = []
    for got in r["W2"].values():
        latency = {q: got["turn"][q] for q in ("p50", "p99", "max")}
        rows.append({"system": got["label"], **latency, "turns over 0.5 s": got["over_half_s"]})
    ops = next(iter(r["W3"].values()), {})
    return {
        "w2": table(rows),
        "w3": table(
            [{"operation": op, **{db: got[op] for db, got in r["W3"].items()}} for op in ops]
        ),
    }


def w4(r: dict[str, Any]) -> str:
    p = r["params"]
    rows = []
    for label, run in r.get("W4", {}).items():
        one = run["by_count"][str(p["counts"][0])]["messages_per_s"]
        for k, got in run["by_count"].items():
            rows.append(
                {
                    "run": label,
                    "conversations": int(k),
                    "messages/s": got["messages_per_s"],
                    "x one": ratio(got["messages_per_s"], one),
                    "turn p50": got["turn"]["p50"],
                    "turn p99": got["turn"]["p99"],
                    "fetch p99": got["fetch"]["p99"],
                    "others' fetch p99": got["fetch_during_summaries"].get("p99"),
                    "connections": got["connections"],
                }
            )
    return table(rows)


def page(r: dict[str, Any]) -> str:
    p, rtt = r["params"], r.get("round_trip_ms", {})
    load = " / ".join(
        ", ".join(f"{v:.2f}" for v in lv) for lv in (r["load_average"], r["load_average_end"])
    )
    return TEMPLATE.read_text().format(
        when=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        quick=" (quick smoke run: sizes too small to judge)" if r["quick"] else "",
        command=r["command"],
        elapsed_s=r["elapsed_s"],
        machine=platform.machine(),
        python=platform.python_version(),
        django=django.get_version(),
        load=load,
        delay_ms=p["delay_s"] * 1000,
        proxied=f(rtt.get("proxied")),
        local=f(rtt.get("local")),
        goals=table(goals(r)),
        w4=w4(r),
        **w1(r),
        **w2_to_w3(r),
        **p,
    )


def plots(r: dict[str, Any], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 5))
    sizes = r["params"]["sizes"]
    for sid, got in r["systems"].items():
        ax.plot(sizes, [turn(r, sid, n) for n in sizes], marker="o", label=got["label"])
    ax.set(xscale="log", yscale="log", xlabel="stored history N (messages)")
    ax.set(ylabel="ms per turn (median)", title="W1: one turn as the history grows")
    _save(fig, ax, out / "w1_turn.png")
    fig, ax = plt.subplots(figsize=(8, 5))
    for got in r["W2"].values():
        ax.plot(range(1, len(got["series_ms"]) + 1), got["series_ms"], lw=1, label=got["label"])
    ax.set(yscale="log", xlabel="turn", ylabel="ms per turn")
    ax.set(title=f"W2: turns with a summarizer sleeping {r['params']['slow_sleep']} s")
    _save(fig, ax, out / "w2_latency.png")
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, run in r["W4"].items():
        counts = sorted(int(k) for k in run["by_count"])
        per_s = [run["by_count"][str(k)]["messages_per_s"] for k in counts]
        ax.plot(counts, per_s, marker="o", label=label)
    ax.set(xlabel="conversations in one event loop", ylabel="messages stored per second")
    ax.set(title="W4: conversations at once (PostgreSQL)")
    _save(fig, ax, out / "w4_concurrency.png")


def _save(fig: Any, ax: Any, path: Path) -> None:
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(r: dict[str, Any], out: Path) -> None:
    plots(r, out)
    (out / "README.md").write_text(page(r))
    if (out / "worker.json").exists():  # W5 runs on its own (python -m bench worker)
        from bench import worker

        worker.into_page(out)

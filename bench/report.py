"""The results page (README.md) and its plots, from one run's results."""

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


def f(value: Any) -> str:
    """A figure as the page shows it: 3 significant digits, thousands separated."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.2f}" if abs(value) >= 0.01 or value == 0 else f"{value:.4f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def table(rows: list[dict[str, Any]]) -> list[str]:
    """A Markdown table of ``rows`` (their keys are its head), then a blank line."""
    head = list(rows[0]) if rows else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return [*lines, *("| " + " | ".join(f(c) for c in row.values()) + " |" for row in rows), ""]


def turn(r: dict[str, Any], sid: str, n: int) -> float | None:
    got = r["systems"].get(sid, {}).get("W1", {}).get(str(n), {}).get("turn", {})
    return got.get("median")


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def ratios(r: dict[str, Any], sid: str, base: str) -> dict[str, float | None]:
    """``sid``'s W1 turn over ``base``'s at each N, by column."""
    return {f"N={n:,}": ratio(turn(r, sid, n), turn(r, base, n)) for n in r["params"]["sizes"]}


def goals(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal, the ratio measured and whether it is met."""
    sizes, rows = r["params"]["sizes"], []

    def add(goal: str, measured: float | None, met: Callable[[float], bool]) -> None:
        verdict = "-" if measured is None else ("met" if met(measured) else "**not met**")
        rows.append({"goal": goal, "measured": measured, "verdict": verdict})

    for db in ("sqlite", "postgresql"):
        sm = f"sm-inline-{db}"
        for n in (sizes[0], sizes[-1]):
            got = ratio(turn(r, sm, n), turn(r, f"floor-contract-{db}", n))
            add(f"turn within 1.3x the contract floor ({db}), N={n:,}", got, lambda v: v <= 1.3)
        flat = ratio(turn(r, sm, sizes[-1]), turn(r, sm, sizes[0]))
        goal = f"turn flat in N ({db}): N={sizes[-1]:,} within 1.3x N={sizes[0]:,}"
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


def w1(r: dict[str, Any]) -> list[str]:
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
        rows.append(
            {
                "system": got["label"],
                **{col: cell(one) for col, one in at.items()},
                f"N={sizes[-1]:,} / N={sizes[0]:,}": growth,
            }
        )
        parts.append({"system": got["label"], **{col: steps(one) for col, one in at.items()}})
        db = sid.rsplit("-", 1)[-1]
        for floor, name in FLOORS.items():
            base = f"{floor}-{db}"
            if sid.startswith(("sm-", "floor-contract")) and sid != base and base in r["systems"]:
                floors.append(
                    {"system": got["label"], "floor": f"{name} ({db})", **ratios(r, sid, base)}
                )
    rivals = [
        {"store": name, **ratios(r, sid, "sm-inline-sqlite")}
        for sid, name in RIVALS.items()
        if sid in r["systems"]
    ]
    return [
        "## W1: one turn as the stored history grows",
        "",
        "A turn is: save the user message, save the answer, fetch_chat (ms, median; p90 "
        "in brackets), through the async API as agent-squad's orchestrator calls it, on a "
        "slot pre-filled with N messages.",
        "",
        *table(rows),
        "Per step (median ms: save user / save answer / fetch):",
        "",
        *table(parts),
        "![W1](w1_turn.png)",
        "",
        "### Ratios per turn",
        "",
        "squad_memory's turn over each floor of its database (medians of the same run):",
        "",
        *table(floors),
        "Other stores' turn over squad_memory inline (SQLite)'s (>1: squad_memory is faster):",
        "",
        *table(rivals),
    ]


def w2_to_w3(r: dict[str, Any]) -> list[str]:
    p = r["params"]
    rows = [
        {
            "system": got["label"],
            **{q: got["turn"][q] for q in ("p50", "p99", "max")},
            "turns over 0.5 s": got["over_half_s"],
        }
        for got in r["W2"].values()
    ]
    ops = next(iter(r["W3"].values()), {})
    return [
        "## W2: the turn while the summarizer takes its time",
        "",
        f"{p['slow_turns']} turns from an empty slot, summarizer sleeping "
        f"{p['slow_sleep']} s, trigger_at 20, keep_last 2 (ms).",
        "",
        *table(rows),
        "![W2](w2_latency.png)",
        "",
        "## W3: SQL statements per operation",
        "",
        f"squad_memory inline, sync API, on a slot of {p['statements_n']:,} messages; "
        "BEGIN, COMMIT and savepoints left out.",
        "",
        *table([{"operation": op, **{db: got[op] for db, got in r["W3"].items()}} for op in ops]),
    ]


def w4(r: dict[str, Any]) -> list[str]:
    p, rtt = r["params"], r.get("round_trip_ms", {})
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
    return [
        "## W4: many conversations in one event loop (PostgreSQL)",
        "",
        "Each conversation makes turns as agent-squad's orchestrator does (fetch_chat, save "
        "the user message, save the answer) through the async API, all of them at once in "
        f"one event loop: {p['conv_turns']} turns each (trigger_at 20, keep_last 2, "
        f"summarizer sleeping 0 s), or with a sync summarizer sleeping {p['slow_sleep']} s "
        f'{p["slow_conv_turns"]} turns each (trigger_at 4, keep_last 1). "2 ms away": '
        f"through a TCP proxy the run starts on 127.0.0.1 that holds every reply "
        f"{p['delay_s'] * 1000:g} ms (a `SELECT 1` round trip: {f(rtt.get('proxied'))} ms "
        f"median through it, {f(rtt.get('local'))} ms without). Tasks mode: a `manage.py "
        'db_worker` runs the compressions. Latencies in ms; "others\' fetch p99": fetch_chat '
        "calls that overlap a summary of another conversation and none of their own (inline "
        "mode); connections: the most server connections of the process seen in "
        "`pg_stat_activity` (sampled every 20 ms).",
        "",
        *table(rows),
        "![W4](w4_concurrency.png)",
        "",
    ]


def page(r: dict[str, Any]) -> str:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    quick = " (quick smoke run: sizes too small to judge)" if r["quick"] else ""
    load = " / ".join(
        ", ".join(f"{v:.2f}" for v in lv) for lv in (r["load_average"], r["load_average_end"])
    )
    lines = [
        "# Benchmark results",
        "",
        f"Taken in one run on {when}{quick}, with "
        f"`.venv/bin/{r['command']}` from the repository root, in {r['elapsed_s']:.0f} s "
        f"on {platform.machine()} Linux, Python {platform.python_version()}, Django "
        f"{django.get_version()}; load average at the start / end: {load}. Raw figures: "
        "`results.json`.",
        "",
    ]
    lines += ["## Goals", "", *table(goals(r))]
    lines += w1(r) + w2_to_w3(r) + w4(r)
    lines += [
        "## Method",
        "",
        "- The same conversation and the same fake summarizer for every system "
        "(`bench/systems.py`): deterministic, keeps the last pairs and folds the rest into one "
        "message, after a sleep standing for the LLM call.",
        "- **Django's floor**: the same rows as bare statements through Django's connection, "
        "one `sync_to_async` hop per call: a save is one INSERT, a fetch one SELECT of the "
        "newest 40 rows. **The contract floor** adds what agent-squad's contract and several "
        "writer processes need, the plainest way: a save bumps the slot's counter (skipping a "
        "message of the last one's role), inserts at that sequence number and returns the "
        "conversation read in the same transaction (on PostgreSQL, one statement).",
        "- W1 runs every system of a database in one process, in blocks of "
        f"{r['params']['block']} turns taken in turn, so a ratio compares medians taken in "
        f"the same minutes; a system's turns at one N stop after {r['params']['cap_s']:g} s "
        "(a capped cell says how many ran). Histories are pre-filled in bulk and the buffer "
        "activated by one fetch before timing.",
        "- PostgreSQL at its default durability; SQLite in WAL with `synchronous=NORMAL`; "
        "Django's PostgreSQL connection with server-side binding and prepared statements "
        "(`DATABASE_PREPARED=1`). Celery mode: a real worker (concurrency 1) on Redis.",
        "- The machine is shared and has 2 cores: read ratios, not absolute figures.",
        "",
    ]
    return "\n".join(lines)


def plots(r: dict[str, Any], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 5))
    sizes = r["params"]["sizes"]
    for sid, got in r["systems"].items():
        ax.plot(sizes, [turn(r, sid, n) for n in sizes], marker="o", label=got["label"])
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="stored history N (messages)",
        ylabel="ms per turn (median)",
        title="W1: one turn as the history grows",
    )
    _save(fig, ax, out / "w1_turn.png")
    fig, ax = plt.subplots(figsize=(8, 5))
    for got in r["W2"].values():
        ax.plot(range(1, len(got["series_ms"]) + 1), got["series_ms"], lw=1, label=got["label"])
    ax.set(
        yscale="log",
        xlabel="turn",
        ylabel="ms per turn",
        title=f"W2: turns with a summarizer sleeping {r['params']['slow_sleep']} s",
    )
    _save(fig, ax, out / "w2_latency.png")
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, run in r["W4"].items():
        counts = sorted(int(k) for k in run["by_count"])
        per_s = [run["by_count"][str(k)]["messages_per_s"] for k in counts]
        ax.plot(counts, per_s, marker="o", label=label)
    ax.set(
        xlabel="conversations in one event loop",
        ylabel="messages stored per second",
        title="W4: conversations at once (PostgreSQL)",
    )
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

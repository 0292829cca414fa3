"""Writes the results directory: README.md with every figure and the ratios, and the plots."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from bench import plots
from bench.config import TRIGGER_AT
from bench.ratios import DRIVER_FLOORS, FLOORS, database_of, flatness, to_floor
from bench.targets import SM, evaluate

QUICK_NOTE = " (quick smoke run: sizes too small to judge)"
BASELINES = (
    ("as-inmemory", "agent-squad InMemory"),
    ("as-libsql", "agent-squad libsql"),
    ("langchain", "LangChain SQL"),
)


def _f(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.{digits}f}" if abs(value) >= 0.01 or value == 0 else f"{value:.4f}"
    return str(value)


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(_f(c) for c in row) + " |" for row in rows]


def _label(results: dict[str, Any], sid: str) -> str:
    return str(results["systems"][sid].get("meta", {}).get("label", sid))


def header(r: dict[str, Any]) -> list[str]:
    m = r["machine"]
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Benchmark results",
        "",
        f"Taken in one run on {when}{QUICK_NOTE if r['quick'] else ''}.",
        "",
        "Command (from the repository root):",
        "",
        "```",
        f".venv/bin/{r['command']}",
        "```",
        "",
        f"The run took {r['elapsed_s']:.0f} s. Raw figures: `results.json`.",
        "",
        "## Machine",
        "",
    ]
    rows = [[k, v] for k, v in m.items() if k != "load_average"]
    rows.append(
        [
            "load average at start / end",
            f"{_load(m['load_average'])} / {_load(r['load_average_end'])}",
        ]
    )
    return lines + _table(["", ""], rows) + [""]


def _load(values: Any) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def systems(r: dict[str, Any]) -> list[str]:
    lines = ["## Systems", ""]
    rows = [
        [sid, _label(r, sid), v.get("meta", {}).get("database", "-")]
        for sid, v in r["systems"].items()
    ]
    lines += _table(["id", "system", "stores in"], rows)
    for item in r["skipped"]:
        lines.append(f"\n- **Not measured: {item['what']}** ({item['reason']}).")
    return [*lines, ""]


def w1(r: dict[str, Any]) -> list[str]:
    sizes = r["params"]["sizes"]
    lines = [
        "## W1: one turn as the stored history grows",
        "",
        "A turn is save user message, save answer, fetch "
        "(ms, median over the turns; p90 in brackets). Each N's slot is prefilled first; "
        f"then the turns run in cycles, one block of {r['params'].get('block')} turns at each "
        "N in turn, so the last column is paired in time: the median, over the cycles, of "
        "a block's median turn at the largest N over the block's at the smallest N of the "
        "same cycle (where a time cap left no whole blocks, the medians' ratio).",
        "",
        *_rounds_note(r),
    ]
    rows = []
    for sid, v in r["systems"].items():
        if "W1" not in v:
            continue
        cells = []
        for n in sizes:
            d = v["W1"].get(str(n))
            cap = f", {d['turn']['n']}/{d['asked']} turns (time cap)" if d and d["capped"] else ""
            cells.append(f"{_f(d['turn']['median'])} ({_f(d['turn']['p90'])}){cap}" if d else "-")
        rows.append([_label(r, sid), *cells, flatness(r, sid, min(sizes), max(sizes))])
    lines += _table(
        ["system", *[f"N={n:,}" for n in sizes], f"N={max(sizes):,} / N={min(sizes):,}"], rows
    )
    lines += [
        "",
        "Per step (median ms at each N: save user / save answer / fetch; "
        "LangChain: save_context / load):",
        "",
    ]
    rows = []
    for sid, v in r["systems"].items():
        if "W1" in v:
            rows.append([_label(r, sid), *[_steps(v["W1"].get(str(n))) for n in sizes]])
    lines += _table(["system", *[f"N={n:,}" for n in sizes]], rows)
    return [*lines, "", "![W1](w1_turn.png)", "", *ratios(r)]


def _rounds_note(r: dict[str, Any]) -> list[str]:
    from bench.rounds import ROUND_GROUPS, ROUND_SYSTEMS

    count = r["params"].get("floor_rounds", 1)
    if count <= 1:
        return []
    names = ", ".join(f"`{sid}`" for sid in ROUND_SYSTEMS if sid in r["systems"])
    note = (
        f"The floors and the systems held against them ({names}) ran W1 in {count} "
        "rounds, each a fresh process on fresh slots; their figures are the "
        "median of the rounds' figures (per-round medians of the turn in results.json, "
        "`rounds`)."
    )
    blocks = sum(
        len(values)
        for sid in ROUND_SYSTEMS
        for figures in r["systems"].get(sid, {}).get("W1", {}).values()
        for values in (figures.get("block_ratios") or {}).values()
    )
    if blocks:
        groups = "; ".join(" | ".join(f"`{sid}`" for sid in group) for group in ROUND_GROUPS)
        note += (
            " After the first, each round ran each system in lockstep beside its floors "
            f"({groups}): the processes side by side but never at once, one block of "
            f"{r['params'].get('block')} turns each in turn, the order turned around every "
            "cycle, the system in the middle, so each block of the system and the floors' "
            "blocks beside it are milliseconds apart, in the same phase of the machine. A "
            "ratio to a floor is the median of those blocks' ratios "
            f"({blocks} block ratios in all; per N and floor in results.json, "
            "`block_ratios`), so a slow phase of the machine moves a block, not a ratio."
        )
    else:
        note += " A ratio to the floor is the median turn over the floor's median turn."
    return [note, ""]


def _steps(d: dict[str, Any] | None) -> str:
    if not d:
        return "-"
    keys = ("save_user", "save_answer", "fetch") if "save_user" in d else ("save", "fetch")
    return " / ".join(_f(d[k]["median"]) for k in keys)


def ratios(r: dict[str, Any]) -> list[str]:
    sizes = r["params"]["sizes"]
    lines = [
        "### Ratios per turn against each baseline "
        "(baseline / squad_memory; >1: squad_memory is faster)",
        "",
    ]
    rows = []
    for sid in SM:
        if sid not in r["systems"] or "W1" not in r["systems"][sid]:
            continue
        orm = "orm-postgresql" if "postgresql" in sid else "orm-sqlite"
        for base, name in (*BASELINES, (orm, "bare Django ORM")):
            cells = []
            for n in sizes:
                mine = r["systems"][sid]["W1"].get(str(n))
                other = r["systems"].get(base, {}).get("W1", {}).get(str(n))
                cells.append(
                    other["turn"]["median"] / mine["turn"]["median"] if mine and other else None
                )
            rows.append([_label(r, sid), name, *cells])
    lines += _table(["squad_memory", "baseline", *[f"N={n:,}" for n in sizes]], rows)
    return [*lines, "", *floor_ratios(r)]


def floor_ratios(r: dict[str, Any]) -> list[str]:
    """Every system's turn / the floors' turns on the database it is held against."""
    sizes = r["params"]["sizes"]
    lines = [
        "### Ratio to the floor (system turn / floor turn; 1 = the floor)",
        "",
        "The floor is the least any Django app pays to serve agent-squad's async API: the "
        "same turn on the same rows, as bare statements through Django's connection "
        "(`django.db.connection.cursor()`, Django's autocommit) with one `sync_to_async` "
        "hop per call, in a copy of squad_memory's message table made from the live schema "
        "(same columns, constraints and indexes, the search index included): two "
        f"single-row INSERTs, each committed, then one SELECT of the slot's newest "
        f"{2 * TRIGGER_AT} rows decoded into dicts. In brackets, for information, the plain "
        "driver doing the same with no Django and no thread hop: psycopg (PostgreSQL "
        "systems) or sqlite3 in WAL with `synchronous=NORMAL` (every other system), on a "
        "copy of its own. Every other system is held against SQLite's floors.",
        "",
    ]
    django, driver = to_floor(r), to_floor(r, DRIVER_FLOORS)
    rows = [
        [
            _label(r, sid),
            f"{FLOORS[database_of(sid)]} ({DRIVER_FLOORS[database_of(sid)]})",
            *[f"{_f(per[str(n)])} ({_f(driver[sid][str(n)])})" for n in sizes],
        ]
        for sid, per in django.items()
    ]
    return [*lines, *_table(["system", "floor", *[f"N={n:,}" for n in sizes]], rows), ""]


def w2(r: dict[str, Any]) -> list[str]:
    sizes = r["params"]["sizes"]
    lines = [
        "## W2: fetch_chat on an active buffer as N grows",
        "",
        "ms, median (p90). The floors select the newest 40 rows, the bare ORM one row; "
        "LangChain loads its memory variables.",
        "",
    ]
    rows = []
    for sid, v in r["systems"].items():
        if "W2" in v:
            cells = [
                f"{_f(v['W2'][str(n)]['median'], 3)} ({_f(v['W2'][str(n)]['p90'], 3)})"
                if str(n) in v["W2"]
                else "-"
                for n in sizes
            ]
            big, small = v["W2"].get(str(max(sizes))), v["W2"].get(str(min(sizes)))
            rows.append(
                [_label(r, sid), *cells, big["median"] / small["median"] if big and small else None]
            )
    return lines + _table(["system", *[f"N={n:,}" for n in sizes], "ratio"], rows) + [""]


def w3(r: dict[str, Any]) -> list[str]:
    p = r["params"]
    lines = [
        "## W3: critical-path latency per turn",
        "",
        f"{p['latency_turns']} turns from an empty slot, summarizer sleeping {p['slow_sleep']} s, "
        f"trigger_at 20, keep_last 2; an untimed pause of {p['think_s']} s between turns "
        "stands for the agent answering. ms.",
        "",
    ]
    rows = []
    for sid, v in r["systems"].items():
        if "W3" in v:
            t = v["W3"]["turn"]
            rows.append(
                [
                    _label(r, sid),
                    t["p50"],
                    t["p99"],
                    t["max"],
                    t["p99"] / t["p50"],
                    v["W3"]["slow_turns"],
                    v["W3"]["wall_s"],
                ]
            )
    head = ["system", "p50", "p99", "max", "p99 / p50", "turns > 0.5 s", "wall (s)"]
    return lines + _table(head, rows) + ["", "![W3](w3_latency.png)", ""]


def write(results: dict[str, Any], out: Path) -> None:
    from bench import report_more

    lines = header(results) + systems(results)
    if any("W1" in v for v in results["systems"].values()):
        lines += w1(results) + w2(results)
    if any("W3" in v for v in results["systems"].values()):
        lines += w3(results)
    lines += report_more.rest(results)
    lines += report_more.targets_section(evaluate(results))
    lines += report_more.method(results)
    (out / "README.md").write_text("\n".join(lines) + "\n")
    plots.draw(results, out)

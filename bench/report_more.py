"""README sections for workloads 4 to 6, the targets, and the method."""

from __future__ import annotations

from typing import Any

from bench.report import _f, _table


def rest(r: dict[str, Any]) -> list[str]:
    return w4(r) + saves(r) + w5(r) + w6(r)


def w4(r: dict[str, Any]) -> list[str]:
    if "W4" not in r:
        return []
    lines = [
        "## W4: SQL statements per operation (squad_memory)",
        "",
        "Counted with `CaptureQueriesContext`, BEGIN/COMMIT/savepoints left out; "
        "inline mode, sync API.",
        "",
    ]
    columns = [(db, n) for db, per in r["W4"].items() for n in per]
    ops = list(next(iter(next(iter(r["W4"].values())).values())))
    rows = [[op, *[r["W4"][db][n].get(op) for db, n in columns]] for op in ops]
    head = ["operation", *[f"{db} N={int(n):,}" for db, n in columns]]
    return lines + _table(head, rows) + [""]


def saves(r: dict[str, Any]) -> list[str]:
    if "sync" not in r:
        return []
    lines = [
        "## A save through the wrapper against a bare ORM insert",
        "",
        "Sync API, same process and connection, alternating, on an active buffer "
        "(ms, median / p90).",
        "",
    ]
    rows = []
    for db, s in r["sync"].items():
        rows.append(
            [
                db,
                f"{s['n']:,}",
                _mp(s["wrapper_save"]),
                _mp(s["orm_insert"]),
                s["wrapper_save"]["median"] / s["orm_insert"]["median"],
                _mp(s["wrapper_fetch"]),
                _mp(s["orm_select"]),
                s["wrapper_fetch"]["median"] / s["orm_select"]["median"],
            ]
        )
    head = [
        "database",
        "N",
        "wrapper save",
        "ORM insert",
        "ratio",
        "wrapper fetch",
        "ORM select 1 row",
        "ratio",
    ]
    return lines + _table(head, rows) + [""]


def _mp(d: dict[str, Any]) -> str:
    return f"{_f(d['median'], 3)} / {_f(d['p90'], 3)}"


def w5(r: dict[str, Any]) -> list[str]:
    if "W5" not in r:
        return []
    lines = [
        "## W5: throughput with several writer processes (PostgreSQL)",
        "",
        f"Messages stored per second, all writers together, over {r['params']['duration_s']} s. "
        "Each writer is a process with its own connection saving message pairs with "
        "`save_chat_messages_sync` (inline mode, summarizer sleep 0); the bare ORM inserts rows "
        "one by one. The PgBouncer row: the same writers connected through a PgBouncer "
        "(transaction pooling, `DISABLE_SERVER_SIDE_CURSORS`) the run starts on a free port.",
        "",
    ]
    counts = sorted({int(w) for per in r["W5"].values() for w in per})
    rows = []
    for target, per in r["W5"].items():
        base = per.get(str(counts[0]))
        rows.append(
            [
                target,
                *[per.get(str(w)) for w in counts],
                *[per[str(w)] / base if base else None for w in counts[1:]],
            ]
        )
    head = [
        "writers on",
        *[f"{w} writer(s)" for w in counts],
        *[f"x{w} / x{counts[0]}" for w in counts[1:]],
    ]
    bouncer = r.get("W5_pgbouncer", {}).get("error")
    failed = []
    if bouncer:
        failed = [f"**Through PgBouncer the writers failed:** `{bouncer[-600:]}`", ""]
    return [*lines, *_table(head, rows), "", *failed, "![W5](w5_throughput.png)", ""]


def w6(r: dict[str, Any]) -> list[str]:
    if "W6" not in r:
        return []
    w = r["W6"]
    lines = [
        "## W6: memory of a process serving many active slots",
        "",
        f"{w['squad_memory']['slots']:,} active slots of 42 messages. squad_memory keeps them in "
        f"{w['database']}; the measured process fetches every slot's buffer and runs a whole turn "
        "on every tenth slot. agent-squad's wrapper over InMemory builds them in the process, "
        "activates every buffer, then runs the same fetches and turns. Each in its own process; "
        "resident set size in MB.",
        "",
    ]
    rows = []
    named = (
        ("squad_memory inline", w["squad_memory"]),
        ("agent-squad wrapper (InMemory)", w["agent_squad"]),
    )
    for name, d in named:
        grown = d["peak_rss_mb"] - d["rss_before_mb"]
        rows.append([name, d["rss_before_mb"], d["peak_rss_mb"], d["rss_after_mb"], grown])
    head = ["system", "RSS before", "peak RSS", "RSS after", "peak - before"]
    sm, ag = w["squad_memory"], w["agent_squad"]
    ratio = ag["peak_rss_mb"] / sm["peak_rss_mb"] if sm["peak_rss_mb"] else None
    growth = (ag["peak_rss_mb"] - ag["rss_before_mb"], sm["peak_rss_mb"] - sm["rss_before_mb"])
    return [
        *lines,
        *_table(head, rows),
        "",
        f"Peak RSS, agent-squad / squad_memory: {_f(ratio)}x; growth while serving the slots: "
        f"{_f(growth[0])} MB against {_f(growth[1])} MB.",
        "",
        *log_bytes(w),
    ]


def log_bytes(w: dict[str, Any]) -> list[str]:
    """The compression log's size against the raw history's, after one compression a slot."""
    fill = w.get("fill", {})
    if not fill.get("raw_bytes"):
        return []
    mb = 1024 * 1024
    rows = [
        ["compression log", fill["log_rows"], fill["log_bytes"] / mb, fill.get("log_table_bytes")],
        ["raw messages", fill["raw_rows"], fill["raw_bytes"] / mb, fill.get("raw_table_bytes")],
    ]
    rows = [[*row[:3], row[3] / mb if row[3] else None] for row in rows]
    return [
        "### Compression log against raw messages",
        "",
        f"Each slot filled in bulk, then activated by one `fetch_chat` (one compression each, "
        f"{_f(fill['activate_s'])} s for all in {fill.get('activators', 1)} process(es) at "
        "once). Bytes: every column's value as text, summed over the run's rows; the table "
        "size is the whole table on disk (all runs, indexes, TOAST).",
        "",
        *_table(["", "rows", "MB (the run's rows)", "table size MB"], rows),
        "",
        f"Log bytes / raw bytes: {_f(fill['log_bytes'] / fill['raw_bytes'])}.",
        "",
    ]


def targets_section(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["## Targets", ""]
    table = []
    for row in rows:
        verdict = "-" if row["met"] is None else ("met" if row["met"] else "**not met**")
        table.append([row["target"], row["subject"], row["ratio"], verdict, row["how"]])
    return lines + _table(["target", "measured on", "ratio", "verdict", "ratio is"], table) + [""]


def method(r: dict[str, Any]) -> list[str]:
    p = r["params"]
    return [
        "## Method",
        "",
        "- Every system runs the same conversation with the same fake summarizer "
        "(`bench/summarizer.py`): deterministic, keeps the last `keep_last` pairs and folds "
        "the rest into one summary message, after a configurable sleep (0 s except in W3). "
        "LangChain gets it as a `FakeListLLM` subclass that sleeps the same time and counts "
        "tokens as characters / 4 (no tokenizer).",
        "- trigger_at 20 pairs, keep_last 2 everywhere; LangChain's `max_token_limit` is the "
        "token count of 40 messages of the conversation. No `max_history_size` is passed "
        "(with the orchestrator's default of 100, agent-squad's InMemory store would keep "
        "only 100 messages).",
        "- Histories are pre-filled in bulk (ORM `bulk_create`, `executemany` into libsql's "
        "and the floors' tables, LangChain's `add_messages`), then the buffer is activated "
        "by one fetch (one compression), before timing. Each system and N runs one untimed "
        "warm-up turn.",
        f"- W1: {p['turns']} timed turns per N, in cycles of one block of {p.get('block')} "
        "turns at each N in turn; each system and N capped at "
        f"{p['cap_s']:.0f} s of turns (a capped row says how many turns it got). "
        f"W2: {p['fetches']} `fetch_chat` calls per N after W1 at every N, once nothing is "
        "pending, taken in turn across the N (100, 1,000, 10,000, 100, ...) so that a drift "
        "of the machine touches every N alike.",
        "- squad_memory and agent-squad are driven through the async `ChatStorage` contract, "
        "as agent-squad's orchestrator does: each of squad_memory's async methods is one "
        "`sync_to_async` hop of its sync twin, every statement through Django's connection. "
        "Django's floor makes one `sync_to_async` hop per call (one statement each) through "
        "Django's cursor, the bare ORM one per ORM call; the plain-driver floor calls its driver "
        "directly (no thread hop). Each system runs in a fresh process; Celery mode uses a "
        "real `python -m celery -A project worker` (concurrency 1) on Redis.",
        "- SQLite files (squad_memory, the floors, libsql, LangChain) live on the same disk; "
        "PostgreSQL runs with its default durability (fsync, synchronous_commit on), so "
        "commit flushes weigh on every database-backed figure. Django's PostgreSQL "
        "connection (squad_memory's, Django's floor's and the ORM's) runs with "
        "`server_side_binding` and `prepare_threshold` 5, psycopg's default, which the "
        "plain-driver floor's psycopg connection has too; SQLite's Django connection runs "
        "in WAL with `synchronous=NORMAL` (the demo project's settings), as the plain "
        "driver's does; the PgBouncer rounds run with Django's defaults (client-side "
        "binding, no prepared statements). Other processes were running "
        "on the machine: see the load average above.",
        "- To iterate on the turn's speed: `.venv/bin/python -m bench --turn-profile` "
        "(under a minute) prints, on SQLite and PostgreSQL, the median ms of each step of "
        "a turn (save user, save answer, fetch) for squad_memory, Django's floor and the "
        "plain driver, run in one lockstep round at N=100 and 10,000, and squad_memory's "
        "ratio to Django's floor per step and per turn; `--cprofile` adds a cProfile of "
        "squad_memory's turn (through the sync twins) with the share of time in "
        "squad_memory, Django, the driver and the rest. Set `BENCH_DATABASE_URL` for its "
        "PostgreSQL database as for a run.",
        "",
    ]

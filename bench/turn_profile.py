"""``python -m bench --turn-profile [--cprofile]``: where one turn's time goes, in under a
minute, for whoever works on squad_memory's data path.

On SQLite and on PostgreSQL, squad_memory (inline) runs beside Django's floor and the
plain driver's in one lockstep round (:mod:`bench.lockstep`; blocks of 20 turns, the
system in the middle), at N=100 and N=10,000; it prints the median ms of each step
of the turn (save user, save answer, fetch) for each, and squad_memory's ratio to
Django's floor per step and per turn (the turn's: the median of the blocks' ratios).

``--quick`` runs it small (a smoke test). ``--cprofile`` adds, for each database, a
cProfile of squad_memory's turn taken through the sync twins in a process of its own
(``cProfile`` sees one thread; the async methods are one ``sync_to_async`` hop of
these twins, whose cost the step table shows as Django's floor against the plain
driver): the share of the time spent in squad_memory, Django, the driver and the
rest, and the functions with the most time of their own.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import time
from typing import Any

from bench.lockstep import block_ratios

PARAMS: dict[str, Any] = {
    "sizes": [100, 10_000],
    "turns": 200,
    "block": 20,
    "cap_s": 20.0,
    "fetches": 0,
    "profile_turns": 300,
}
#: ``--turn-profile --quick``: a smoke run of the same (sizes too small to judge).
QUICK: dict[str, Any] = dict(PARAMS, sizes=[100, 300], turns=10, block=5, profile_turns=20)
#: The lockstep group: (child system, column title); squad_memory in the middle.
GROUP = (
    ("floor-django", "Django floor"),
    ("sm-inline", "squad_memory"),
    ("floor-driver", "driver"),
)
STEPS = ("save_user", "save_answer", "fetch", "turn")


def run(runner: Any) -> dict[str, Any]:
    """One lockstep round per database; ``{database: [each member's W1 result]}``."""
    found: dict[str, Any] = {}
    for database in ("sqlite", "postgresql"):
        if database not in runner.databases:
            continue
        specs = [
            ({"kind": "system", "system": child, "workloads": ["W1"]}, database)
            for child, _ in GROUP
        ]
        found[database] = [result["W1"] for result in runner.lockstep(specs)]
    return found


def lines(found: dict[str, Any]) -> list[str]:
    """The step table: median ms per step, and squad_memory / Django's floor."""
    out: list[str] = []
    titles = [title for _, title in GROUP]
    for database, results in found.items():
        floor, mine, _ = results
        out.append(f"{database}: median ms per step ({', '.join(titles)}; squad_memory / floor)")
        for n in mine:
            out.append(f"  N={int(n):,}")
            for step in STEPS:
                cells = [r[n][step]["median"] for r in results]
                if step == "turn":
                    paired = block_ratios(mine[n], floor[n])
                    ratio = statistics.median(paired) if paired else cells[1] / cells[0]
                else:
                    ratio = cells[1] / cells[0]
                figures = "  ".join(f"{c:8.3f}" for c in cells)
                out.append(f"    {step:<12}{figures}   {ratio:5.2f}x")
    return out


# -- cProfile of the turn (child side) ----------------------------------------------------
AREAS = (
    ("squad_memory", "/squad_memory/"),
    ("django", "/django/"),
    ("psycopg", "/psycopg"),
    ("asgiref", "/asgiref/"),
    ("agent_squad", "/agent_squad/"),
    ("json", "/json/"),
)


def _area(filename: str, name: str) -> str:
    for area, marker in AREAS:
        if marker in filename:
            return area
    if filename == "~" and any(word in name for word in ("sqlite3", "SQLite", "psycopg")):
        return "driver (C)"
    return "other"


def cprofile(run_id: str, turns: int) -> dict[str, Any]:
    """Profile ``turns`` turns of squad_memory inline at N=100 through the sync twins."""
    from bench import conversation
    from bench.sm import FAST, SquadMemory
    from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage

    system = SquadMemory("inline")
    slot = (run_id, "profile", "agent")
    system._prefill(slot, 100)
    storage = SummarizingChatStorage(DjangoChatStorage(), FAST, 20, 2, mode="inline")
    storage.fetch_chat_sync(*slot)  # activation, and warm-up
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    for i in range(1, turns + 1):
        storage.save_chat_message_sync(*slot, conversation.user(i))
        storage.save_chat_message_sync(*slot, conversation.answer(i))
        storage.fetch_chat_sync(*slot)
    profiler.disable()
    elapsed = time.perf_counter() - started
    stats = pstats.Stats(profiler)
    areas: dict[str, float] = {}
    total = 0.0
    for (filename, _, name), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        areas[_area(filename, name)] = areas.get(_area(filename, name), 0.0) + tottime
        total += tottime
    text, ours = io.StringIO(), io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
    pstats.Stats(profiler, stream=ours).sort_stats("cumulative").print_stats("squad_memory", 25)
    return {
        "turns": turns,
        "ms_per_turn_profiled": elapsed * 1000 / turns,
        "areas": {k: v / total for k, v in sorted(areas.items(), key=lambda kv: -kv[1])},
        "top": text.getvalue(),
        "ours": ours.getvalue(),
    }


# -- what the one cache of the data path saves (child side) -------------------------------
def caches(run_id: str, turns: int) -> dict[str, Any]:
    """What the slot loader's cache (the converters and statement text, built once per
    database) saves a turn against Django's own tool for rows of raw SQL, a
    ``RawQuerySet`` that computes them on every query. A turn loads a slot three times
    (two saves and a fetch); each load is timed both ways, interleaved, on the same
    statement, and set against a sync turn timed in the same process."""
    from bench import conversation
    from bench.sm import FAST, SquadMemory
    from squad_memory.models import Slot, append
    from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage

    system = SquadMemory("inline")
    slot = (run_id, "caches", "agent")
    system._prefill(slot, 100)
    storage = SummarizingChatStorage(DjangoChatStorage(), FAST, 20, 2, mode="inline")
    storage.fetch_chat_sync(*slot)
    alias = Slot.objects.write_db()
    vendor = append.connections[alias].vendor
    sql = append._read_sql(alias, vendor, "buffer")
    raw_sql = sql.replace(" FROM ", " AS tail FROM ", 1)  # the aggregate's column, named
    params = [120, "", *slot]
    turn, cached, raw = [], [], []
    for i in range(1, max(turns, 20) + 1):
        started = time.perf_counter()
        storage.save_chat_message_sync(*slot, conversation.user(i))
        storage.save_chat_message_sync(*slot, conversation.answer(i))
        storage.fetch_chat_sync(*slot)
        turn.append(time.perf_counter() - started)
        started = time.perf_counter()
        Slot.objects.read(slot, newest=120)
        cached.append(time.perf_counter() - started)
        started = time.perf_counter()
        list(Slot.objects.raw(raw_sql, params))
        raw.append(time.perf_counter() - started)
    saved = 3 * (statistics.median(raw) - statistics.median(cached))
    return {
        "turn_ms": statistics.median(turn) * 1000,
        "load_ms": statistics.median(cached) * 1000,
        "raw_load_ms": statistics.median(raw) * 1000,
        "saved_ms_per_turn": saved * 1000,
        "share_of_turn": saved / statistics.median(turn),
    }


def cache_lines(database: str, found: dict[str, Any]) -> list[str]:
    return [
        f"{database}: the slot loader's cache saves {found['saved_ms_per_turn']:.3f} ms of a "
        f"{found['turn_ms']:.3f} ms sync turn ({found['share_of_turn']:.0%}): a load (slot and "
        f"buffer, one statement) takes {found['load_ms']:.3f} ms, "
        f"{found['raw_load_ms']:.3f} ms through a RawQuerySet"
    ]


def profile_lines(database: str, found: dict[str, Any]) -> list[str]:
    areas = ", ".join(f"{area} {share:.0%}" for area, share in found["areas"].items())
    head = (
        f"{database}: cProfile of {found['turns']} sync turns at N=100 "
        f"({found['ms_per_turn_profiled']:.3f} ms a turn under the profiler): {areas}"
    )
    return [
        head,
        "  the functions with the most time of their own:",
        *_table(found["top"]),
        "  squad_memory's functions by cumulative time:",
        *_table(found.get("ours", "")),
    ]


def _table(text: str) -> list[str]:
    """pstats' table without its header lines."""
    rows = [line for line in text.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(rows) if "ncalls" in line), len(rows))
    return rows[start:]

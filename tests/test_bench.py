"""The benchmark suite still runs: ``python -m bench --quick`` produces a figure for every system.

Timings are not asserted (they depend on the machine); presence and shape are.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import services
from bench.config import QUICK, SYSTEMS
from tests.conftest import extra, require

extra("celery", "celery")  # the benchmark runs the Celery system too

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("bench")
    env = {
        k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--out",
            str(out / "results"),
            "--work",
            str(out / "work"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    results: dict[str, Any] = json.loads((out / "results" / "results.json").read_text())
    results["_out"] = out / "results"
    return results


def _expected_systems() -> list[tuple[str, tuple[str, ...]]]:
    pg = services.postgres()
    broker = services.redis() or services.celery_app()
    require(pg is None, f"the benchmark's PostgreSQL systems need it: {pg}")
    require(
        broker is None, f"the benchmark's Celery mode needs a broker and the Celery app: {broker}"
    )
    return [(sid, takes) for sid, _, _, takes in SYSTEMS]


def _is_figure(value: Any) -> bool:
    return isinstance(value, float) and value >= 0


def test_every_system_has_a_figure_per_workload(quick_run: dict[str, Any]) -> None:
    expected = _expected_systems()
    for sid, takes in expected:
        got = quick_run["systems"][sid]
        for n in QUICK["sizes"]:
            assert _is_figure(got["W1"][str(n)]["turn"]["median"]), (sid, n)
            assert got["W1"][str(n)]["turn"]["n"] >= 1, (sid, n)
            assert _is_figure(got["W2"][str(n)]["median"]), (sid, n)
        if "W3" in takes:
            assert len(got["W3"]["series_ms"]) == QUICK["latency_turns"], sid
            assert _is_figure(got["W3"]["turn"]["p99"]), sid


def test_query_counts_throughput_and_memory_are_reported(quick_run: dict[str, Any]) -> None:
    _expected_systems()
    for database in ("sqlite", "postgresql"):
        counts = quick_run["W4"][database]
        assert set(counts) == {str(n) for n in QUICK["query_sizes"]}
        assert all(isinstance(c, int) and c >= 1 for per in counts.values() for c in per.values())
        assert _is_figure(quick_run["sync"][database]["wrapper_save"]["median"])
    for target in QUICK["throughput_targets"]:
        per = quick_run["W5"][target]
        assert set(per) == {str(w) for w in QUICK["writers"]}
        assert all(_is_figure(v) and v > 0 for v in per.values()), target
    memory = quick_run["W6"]
    assert memory["squad_memory"]["slots"] == memory["agent_squad"]["slots"] == QUICK["slots"]
    assert memory["agent_squad"]["buffers"] == QUICK["slots"]


def test_results_readme_and_plots_are_written(quick_run: dict[str, Any]) -> None:
    out: Path = quick_run["_out"]
    readme = (out / "README.md").read_text()
    for heading in (
        "## Machine",
        "## W1",
        "## W2",
        "## W3",
        "## W4",
        "## W5",
        "## W6",
        "## Targets",
    ):
        assert heading in readme
    assert "python -m bench --quick" in readme
    for plot in ("w1_turn.png", "w3_latency.png", "w5_throughput.png"):
        assert (out / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", plot


#: (system, floor, index of the round in the floor's merged rounds) for every system run in
#: lockstep beside a floor in the quick run's one lockstep round; the PostgreSQL floor of
#: Django runs in two groups (inline, then Celery), so its second run is the Celery one's.
PAIRED = (
    ("sm-inline-sqlite", "floor-django-sqlite", 1),
    ("sm-inline-sqlite", "floor-driver-sqlite", 1),
    ("sm-inline-postgresql", "floor-django-postgresql", 1),
    ("sm-inline-postgresql", "floor-driver-postgresql", 1),
    ("sm-celery-postgresql", "floor-django-postgresql", 2),
)


def test_floor_ratios_log_bytes_and_pgbouncer_are_reported(quick_run: dict[str, Any]) -> None:
    from bench import pgbouncer
    from bench.ratios import DRIVER_FLOORS, FLOORS, flatness, to_floor
    from bench.rounds import ROUND_GROUPS
    from bench.targets import PGBOUNCER_TARGET, evaluate

    _expected_systems()
    ratios = {"django": to_floor(quick_run), "driver": to_floor(quick_run, DRIVER_FLOORS)}
    for sid in ("sm-inline-sqlite", "sm-inline-postgresql", "as-libsql", "floor-driver-sqlite"):
        assert all(_is_figure(r) for r in ratios["django"][sid].values()), sid
        assert all(_is_figure(r) for r in ratios["driver"][sid].values()), sid
    for floor in FLOORS.values():
        assert all(r == 1.0 for r in ratios["django"][floor].values())
    rounds = QUICK["floor_rounds"]
    assert rounds == 2  # PAIRED's round indices are those of one lockstep round
    runs = {
        sid: sum(sid in g for g in ROUND_GROUPS) * (rounds - 1) + 1
        for g in ROUND_GROUPS
        for sid in g
    }
    assert runs["floor-django-postgresql"] == 3 and runs["floor-driver-postgresql"] == 2
    for sid, count in runs.items():
        for n, figures in quick_run["systems"][sid]["W1"].items():  # merged rounds
            assert len(figures["turn"]["rounds"]) == count, (sid, n)
            assert min(figures["turn"]["rounds"]) <= figures["turn"]["median"]
            assert figures["turn"]["median"] <= max(figures["turn"]["rounds"])
            # The first round ran alone; the others in lockstep, with a median per block.
            assert figures["blocks"][0] is None and figures["spans"][0] is None, (sid, n)
            for blocks in figures["blocks"][1:]:
                assert len(blocks) == QUICK["turns"] // QUICK["block"], (sid, n)
    # Each system's block i ran right before or after each floor's block i, never at once.
    for sid, floor, index in PAIRED:
        which = "django" if floor in FLOORS.values() else "driver"
        for n, ratio in ratios[which][sid].items():
            mine, theirs = (quick_run["systems"][s]["W1"][n] for s in (sid, floor))
            spans = [(*span, "s", i) for i, span in enumerate(mine["spans"][1])]
            spans += [(*span, "f", i) for i, span in enumerate(theirs["spans"][index])]
            spans.sort()
            for a, b in itertools.pairwise(spans):
                assert a[1] <= b[0], (sid, n, "two blocks at once")
            where = {(who, i): k for k, (_, _, who, i) in enumerate(spans)}
            for i in range(len(mine["spans"][1])):
                assert abs(where["s", i] - where["f", i]) == 1, (sid, n, i)
            # The ratio is the median of those blocks' ratios.
            paired = zip(mine["blocks"][1], theirs["blocks"][index], strict=True)
            assert mine["block_ratios"][floor] == [a / b for a, b in paired], (sid, n)
            assert ratio == statistics.median(mine["block_ratios"][floor]), (sid, n)
    # W1 runs its blocks in cycles across the N (100, 300, 100, 300, ...): each N's turns
    # at the largest N are held against the smallest N's of the same cycle.
    small, large = (str(n) for n in QUICK["sizes"])
    mine = quick_run["systems"]["sm-inline-sqlite"]["W1"]
    order = sorted((span[0], n) for n in (small, large) for span in mine[n]["spans"][1])
    assert [n for _, n in order] == [small, large] * (QUICK["turns"] // QUICK["block"])
    for sid in ("sm-inline-sqlite", "sm-inline-postgresql", "floor-django-sqlite"):
        got = quick_run["systems"][sid]["W1"]
        assert got[small]["flat_ratios"] == [1.0] * len(got[large]["flat_ratios"]), sid
        assert len(got[large]["flat_ratios"]) == runs[sid] * (QUICK["turns"] // QUICK["block"])
        assert flatness(quick_run, sid, *QUICK["sizes"]) == statistics.median(
            got[large]["flat_ratios"]
        )
    fill = quick_run["W6"]["fill"]
    assert fill["raw_rows"] == QUICK["slots"] * 42 and fill["raw_bytes"] > 0
    assert fill["log_rows"] >= QUICK["slots"] and fill["log_bytes"] > 0
    judged = {row["target"] for row in evaluate(quick_run)}
    for words in ("Django's floor", "libsql", "bare ORM insert", "log bytes", "within 1.3x"):
        assert any(words in target for target in judged), words
    readme = (quick_run["_out"] / "README.md").read_text()
    assert "### Ratio to the floor" in readme and "### Compression log" in readme
    assert "plain driver" in readme and "in lockstep" in readme
    require(pgbouncer.binary() is not None, "the W5 PgBouncer rounds need pgbouncer installed")
    assert quick_run["W5_pgbouncer"]["error"] is None, quick_run["W5_pgbouncer"]
    per = quick_run["W5"][PGBOUNCER_TARGET]
    assert set(per) == {str(w) for w in QUICK["writers"]} and all(v > 0 for v in per.values())

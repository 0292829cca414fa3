"""The benchmark still runs: ``python -m bench --quick`` gives a figure for every system and
workload, and writes the results page and its plots.

Timings are not asserted (they depend on the machine); presence and shape are.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import extra, require

extra("celery", "celery")  # the benchmark runs the Celery system too

ROOT = Path(__file__).resolve().parent.parent
BENCH_DATABASE_URL = os.environ.get(
    "TEST_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/squad_memory_test_bench"
)
BENCH_REDIS_URL = os.environ.get("TEST_BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")

# One run on one xdist worker: two runs at once would empty each other's database and
# broker. Session-scoped: other modules' tests may run between this module's.
pytestmark = [pytest.mark.services, pytest.mark.xdist_group("bench")]


def services_missing() -> str | None:
    """Why the benchmark's PostgreSQL or Redis cannot be reached; None if both can."""
    import psycopg
    import redis

    try:
        psycopg.connect(
            BENCH_DATABASE_URL.rsplit("/", 1)[0] + "/postgres", connect_timeout=3
        ).close()
        redis.Redis.from_url(BENCH_REDIS_URL, socket_connect_timeout=2).ping()
    except (psycopg.Error, redis.RedisError) as exc:
        return str(exc)
    return None


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pool = importlib.util.find_spec("psycopg_pool")  # Django's PostgreSQL pool, in W4
    require(pool is not None, "W4 needs psycopg's pool: pip install 'psycopg[pool]'")
    missing = services_missing()
    require(missing is None, f"the benchmark needs PostgreSQL and Redis: {missing}")
    out = tmp_path_factory.mktemp("bench")
    env = {
        k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")
    }
    # Databases of the tests' own, never a benchmark's of the developer (a run empties them).
    env["BENCH_DATABASE_URL"] = BENCH_DATABASE_URL
    env["BENCH_BROKER_URL"] = BENCH_REDIS_URL
    # W5 runs on its own (python -m bench worker): a full run keeps its section.
    (out / "results").mkdir()
    shutil.copy(ROOT / "bench" / "results" / "worker.json", out / "results" / "worker.json")
    args = ["--quick", "--out", str(out / "results"), "--work", str(out / "work")]
    proc = subprocess.run(
        [sys.executable, "-m", "bench", *args],
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


SYSTEMS = {
    "sm-inline-sqlite",
    "sm-inline-postgresql",
    "sm-celery-postgresql",
    "sm-onethread-sqlite",
    "sm-onethread-postgresql",
    "floor-django-sqlite",
    "floor-django-postgresql",
    "floor-contract-sqlite",
    "floor-contract-postgresql",
    "sm-inline-postgresql_prepared",  # W1 alone, with psycopg's prepared statements
    "floor-django-postgresql_prepared",
    "floor-contract-postgresql_prepared",
    "as-inmemory",
    "as-libsql",
    "langchain",
}


def test_every_system_has_a_turn_at_every_size(quick_run: dict[str, Any]) -> None:
    from bench.__main__ import QUICK

    assert set(quick_run["systems"]) == SYSTEMS
    for sid, got in quick_run["systems"].items():
        for n in QUICK["sizes"]:
            one = got["W1"][str(n)]
            assert one["turn"]["n"] >= 1 and one["turn"]["median"] > 0, (sid, n)
            assert one["turn"]["n"] == QUICK["turns"] or one["capped"], (sid, n)
    assert set(quick_run["W2"]) == {
        "sm-inline-sqlite",
        "sm-inline-postgresql",
        "sm-celery-postgresql",
        "as-inmemory",
    }
    for sid, got in quick_run["W2"].items():
        assert len(got["series_ms"]) == QUICK["slow_turns"], sid
    for db in ("sqlite", "postgresql"):
        counts = quick_run["W3"][db]
        assert counts["fetch_chat, active buffer"] == 1, db
        assert all(isinstance(c, int) and c >= 1 for c in counts.values()), db


def test_the_concurrency_runs_report_throughput_latency_and_connections(
    quick_run: dict[str, Any],
) -> None:
    from bench.__main__ import CONCURRENCY, QUICK

    assert list(quick_run["W4"]) == [label for label, *_ in CONCURRENCY]
    rtt = quick_run["round_trip_ms"]  # the proxy holds each reply 1.5 ms
    assert rtt["proxied"] >= rtt["local"] + 1, rtt
    for label, run in quick_run["W4"].items():
        assert set(run["by_count"]) == {str(k) for k in QUICK["counts"]}, label
        for k, got in run["by_count"].items():
            assert got["turn"]["n"] == int(k) * run["turns"], (label, k)
            assert got["messages_per_s"] > 0 and got["connections"] >= 1, (label, k)
    slow = quick_run["W4"]["inline, 1 s summarizer, database 2 ms away"]["by_count"]
    assert all(got["summaries"] >= int(k) for k, got in slow.items())  # one per conversation
    many, one = slow[str(QUICK["counts"][-1])], slow[str(QUICK["counts"][0])]
    assert many["fetches_beside_summaries"] >= 1  # fetches overlapping another's summary
    # ... of which those that ran no summary of their own are the "others' fetch"
    assert many["fetch_during_summaries"]["n"] <= many["fetches_beside_summaries"]
    assert one["fetches_beside_summaries"] == one["fetch_during_summaries"]["n"] == 0


def test_the_results_page_and_plots_are_written(quick_run: dict[str, Any]) -> None:
    out: Path = quick_run["_out"]
    page = (out / "README.md").read_text()
    for heading in ("## Goals", "## W1", "### Ratios per turn", "## W2", "## W3", "## W4"):
        assert heading in page, heading
    assert (
        page.index("## W4") < page.index("## W5: one agent-squad worker") < page.index("## Method")
    )
    assert "python -m bench --quick" in page and "contract floor (postgresql)" in page
    assert "squad_memory inline (PostgreSQL, prepared statements)" in page
    assert "the contract floor (postgresql, prepared statements)" in page  # a goal
    for plot in ("w1_turn.png", "w2_latency.png", "w4_concurrency.png"):
        assert (out / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", plot


# -- the scale workload (bench/scale.py), at a few hundred messages -------------------------
def test_the_scale_databases_have_the_shapes_asked_for() -> None:
    from bench.scale import SIZES, Shape

    big = Shape(3_000_000, 5_000, 40_000, 60_000, 200_000, 100, 5_000, 20_000)
    assert Shape.of(SIZES["big"]) == big
    assert Shape.of(SIZES["small"]) == Shape(20_000, 33, 267, 400, 1_333, 100, 33, 132)


@pytest.fixture
def scale_loaded() -> Any:
    from bench import scale

    shape = scale.Shape.of(400)
    scale.load(shape)
    return shape


@pytest.mark.postgres
def test_the_scale_loader_stores_what_the_saves_would(scale_loaded: Any) -> None:
    from django.db import connection
    from django.db.models import Count, Max, Sum

    from squad_memory.messages import extract_text
    from squad_memory.models import Limits, Message, Slot
    from squad_memory.rules import count_tokens

    shape, limits = scale_loaded, Limits.from_settings()
    slots = Slot.objects.annotate(n=Count("messages"), top=Max("messages__seq"))
    assert slots.count() == shape.slots and Message.objects.count() == shape.messages
    assert slots.get(pk=1).last_seq == shape.big
    assert len({(s.user_id, s.session_id) for s in slots}) == shape.sessions
    for slot in slots:  # gapless, roles alternating, the counters of the rows
        assert slot.n == slot.top == slot.last_seq, slot
        assert slot.last_role == ("assistant" if slot.last_seq % 2 == 0 else "user"), slot
        after = slot.messages.filter(seq__gt=slot.covered_seq).aggregate(t=Sum("tokens"))["t"]
        assert slot.buffer_tokens == slot.summary_tokens + (after or 0), slot
        assert not slot.needs_compression(limits) and not slot.is_over_limit(limits), slot
        assert slot.active == (slot.covered_seq > 0) == slot.compressions.exists(), slot
    for row in Message.objects.all():
        assert row.role == ("user" if row.seq % 2 else "assistant"), row
        assert row.text == extract_text(row.content), row
        assert row.tokens == count_tokens({"role": row.role, "content": row.content}), row
    with connection.cursor() as cursor:  # the migrations' indexes, made again after the load
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename LIKE 'squad_memory_%'")
        names = {name for (name,) in cursor.fetchall()}
    assert {"squad_memory_message_seq", "squad_memory_message_text_fts"} <= names
    assert {"squad_memory_message_ts", "squad_memory_comp_slot"} <= names
    assert {"squad_memory_slot_activity", "squad_memory_comp_started"} <= names


ENSURE = """
import json, django
django.setup()
from django.core.management import call_command
from django.db import connection
from bench.scale import Shape, ensure
shape, found = Shape.of(400), {}
found["first"] = ensure(shape)
call_command("migrate", "squad_memory", "0009", verbosity=0)  # as if built before 0010
found["second"], found["third"] = ensure(shape), ensure(shape)
with connection.cursor() as cursor:
    cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename LIKE 'squad_memory_%'")
    found["indexes"] = sorted(name for (name,) in cursor.fetchall())
print(json.dumps(found))
"""


@pytest.mark.own_database
def test_a_scale_database_there_already_is_migrated_not_built_again() -> None:
    """A database built before a migration gets it (the scale run measures today's schema)."""
    import psycopg

    from bench.scale import built

    missing = services_missing()
    require(missing is None, f"the benchmark needs PostgreSQL and Redis: {missing}")
    server, name = BENCH_DATABASE_URL.rsplit("/", 1)
    name += "_scale"
    env = dict(os.environ, DATABASE_URL=f"{server}/{name}", DJANGO_SETTINGS_MODULE="bench.settings")
    try:
        proc = subprocess.run(
            [sys.executable, "-c", ENSURE], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    found = json.loads(proc.stdout.splitlines()[-1])
    assert "cumulative" in found["first"] and built(found["first"]).startswith("built in ")
    assert found["second"]["migrated"][0] == "squad_memory.0010_compression_started_index"
    assert "squad_memory_comp_started" in found["indexes"]
    assert "0010_compression_started_index" in built(found["second"])
    assert found["third"]["migrated"] == []
    assert built(found["third"]) == "there already, its migrations up to date"


@pytest.mark.postgres
def test_the_scale_report_has_every_call_with_its_statements(scale_loaded: Any) -> None:
    from bench import scale

    found = {"calls": scale.measure(scale_loaded, runs=1), "deep_page": 6, "build": None}
    found["shape"] = {"messages": scale_loaded.messages}
    assert len(found["calls"]) == 17
    for name, got in found["calls"].items():
        assert got["status"] in (200, None) and got["statements"] >= 1, name
    assert found["calls"]["fetch_chat: the long slot"]["statements"] == 1
    rows = scale.goals(found, found)
    assert [row["call"] for row in rows] == list(found["calls"])
    assert all(row["big / small"] == 1 for row in rows)
    run = dict(small=found, big=found, rows=rows, when="now", command="c", load_average="0")
    page = scale.page(run)
    assert page.count("\n| ") == 1 + 17 and "Goals met:" in page


# -- W5: one agent-squad worker over HTTP (bench/worker.py) ---------------------------------
@pytest.mark.django_db
@pytest.mark.parametrize("storage", ["squad_memory", "in-memory"])
def test_the_worker_app_serves_the_driver_s_users(
    storage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    import httpx

    from bench import worker
    from squad_memory.models import Message, Slot

    monkeypatch.setenv("BENCH_WORKER_STORAGE", storage)
    app, p = worker.app(), {"users": 3, "turns": 2, "cap_s": 60.0}

    async def drive() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://worker") as client:
            return await worker.drive(client, "smoke", p)

    found = asyncio.run(drive())
    assert found["users"] == 3 and found["turn"]["n"] == 3 * 2 and found["turns_per_s"] > 0
    stored = 2 * 3 * (2 + 1)  # each user's untimed turn too, a question and an answer each
    assert Message.objects.count() == (stored if storage == "squad_memory" else 0)
    users = set(Slot.objects.values_list("user_id", flat=True))
    assert users == ({f"smoke-{u}" for u in range(3)} if storage == "squad_memory" else set())


def test_python_m_bench_worker_quick_measures_both_storages(tmp_path: Path) -> None:
    missing = services_missing()
    require(missing is None, f"the benchmark needs PostgreSQL: {missing}")
    env = {
        k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")
    }
    env["BENCH_WORKER_DATABASE_URL"] = BENCH_DATABASE_URL + "_worker"  # the tests' own
    (tmp_path / "README.md").write_text("# Benchmark results\n\n## W4\n\n## Method\n\n- m\n")
    args = ["worker", "--quick", "--out", str(tmp_path), "--work", str(tmp_path / "work")]
    for _ in range(2):  # the second run's section replaces the first's
        proc = subprocess.run(
            [sys.executable, "-m", "bench", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    from bench.worker import QUICK

    found = json.loads((tmp_path / "worker.json").read_text())
    assert list(found["runs"]) == ["squad_memory", "in-memory"]
    for storage, got in found["runs"].items():
        assert got["turn"]["n"] == QUICK["users"] * QUICK["turns"], storage
        assert got["turns_per_s"] > 0 and got["turn"]["p99"] > 0, storage
        assert got["users"] == QUICK["users"], storage
        for cpu in ("cpu_ms_per_turn", "postgres_cpu_ms_per_turn", "driver_cpu_ms_per_turn"):
            assert got[cpu] >= 0, (storage, cpu)
    assert found["runs"]["squad_memory"]["connections"] >= 1  # the worker's, on the bench's
    assert found["runs"]["in-memory"]["connections"] == 0
    assert set(found["goals"]) == {"turns_per_s", "p99", "met"}
    page = (tmp_path / "README.md").read_text()
    assert page.count("## W5: one agent-squad worker over HTTP") == 1
    assert page.index("## W4") < page.index("## W5") < page.index("## Method")
    assert (
        "| squad_memory inline (PostgreSQL) | 3 | 9 |" in page and "python -m bench worker" in page
    )


def test_the_worker_app_answers_500_when_the_storage_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    import httpx

    from bench import worker

    monkeypatch.setenv("BENCH_WORKER_STORAGE", "squad_memory")  # and no database access here
    app = worker.app()

    async def drive() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://worker") as client:
            await worker.drive(client, "failing", {"users": 1, "turns": 1, "cap_s": 60.0})

    with pytest.raises(httpx.HTTPStatusError, match="500 Internal Server Error"):
        asyncio.run(drive())

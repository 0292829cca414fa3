"""``python -m bench worker [--quick] [--out DIR]``: one agent-squad worker's capacity.

The deployment agent-squad users run: a Starlette app under uvicorn (one process) holding
one ``AgentSquad`` (the demo's offline classifier and two offline agents,
``project.demo.play.build``), driven over HTTP by many users at once (an httpx async
client, each user waiting for its answer before its next turn). Once with squad_memory's
storage (``squad_memory.get_storage()``: ``SummarizingChatStorage`` over
``DjangoChatStorage`` in inline mode with the demo's offline summarizer, on the PostgreSQL
database ``BENCH_WORKER_DATABASE_URL`` with persistent connections, health checks and the
default ``DATABASE_THREADS``), once with agent-squad's ``InMemoryChatStorage``. Writes
``worker.json`` and its section of the results page.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

ROOT = Path(__file__).resolve().parent.parent
PG_URL = os.environ.get(
    "BENCH_WORKER_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/sm_worker_bench"
)
FULL = {"users": 50, "turns": 40, "cap_s": 60.0}  # turns per user, seconds per storage
QUICK = {"users": 3, "turns": 3, "cap_s": 20.0}
STORAGES = {"squad_memory": "squad_memory inline (PostgreSQL)", "in-memory": "InMemory"}
GOALS = {"turns_per_s": 0.7, "p99": 1.5}  # squad_memory's over in-memory's: at least, at most
HEADING = "## W5: one agent-squad worker over HTTP"


# -- the worker -------------------------------------------------------------------------
def app() -> Starlette:
    """The worker's ASGI app (``uvicorn --factory bench.worker:app``): ``POST /turn`` with
    ``{"user", "session", "text"}`` routes one request through the orchestrator. The
    storage is ``BENCH_WORKER_STORAGE``'s (squad_memory's unless ``in-memory``)."""
    import django

    django.setup()
    from agent_squad.storage import InMemoryChatStorage

    from project.demo import play

    memory = os.environ.get("BENCH_WORKER_STORAGE") == "in-memory"
    squad = play.build(play.load(), InMemoryChatStorage() if memory else None)

    async def turn(request: Request) -> JSONResponse:
        body = await request.json()
        answer = await squad.route_request(body["text"], body["user"], body["session"])
        agent = answer.metadata.agent_id if answer.metadata else None
        text = answer.output.content[0]["text"]
        # The orchestrator answers an error (a storage's too) as a reply of no agent.
        status = 500 if agent in (None, "no_agent_selected") else 200
        return JSONResponse({"agent": agent, "text": text}, status_code=status)

    return Starlette(routes=[Route("/turn", turn, methods=["POST"])])


# -- the users --------------------------------------------------------------------------
async def drive(client: httpx.AsyncClient, run: str, p: dict[str, Any]) -> dict[str, Any]:
    """``p["users"]`` users at once, each up to ``p["turns"]`` turns one after the other,
    for ``p["cap_s"]`` seconds at most, after one untimed turn each (the worker's
    connections open); turns per second and the turn's latency."""
    from bench.workloads import stats
    from project.demo import play

    questions = [t["user"] for t in play.load()["turns"]]
    latencies: list[float] = []

    async def ask(u: int, i: int) -> float:
        said = {"user": f"{run}-{u}", "session": run, "text": questions[(u + i) % len(questions)]}
        started = time.perf_counter()
        (await client.post("/turn", json=said)).raise_for_status()
        return time.perf_counter() - started

    async def user(u: int, deadline: float) -> None:
        for i in range(1, p["turns"] + 1):
            if time.perf_counter() < deadline:
                latencies.append(await ask(u, i))

    await asyncio.gather(*(ask(u, 0) for u in range(p["users"])))
    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(user(u, started + p["cap_s"]) for u in range(p["users"])))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    found = {"users": p["users"], "wall_s": wall, "turns_per_s": len(latencies) / wall}
    driver = cpu * 1000 / max(len(latencies), 1)  # this process's: the sampler's too
    return found | {"turn": stats(latencies), "driver_cpu_ms_per_turn": driver}


# -- a measurement ----------------------------------------------------------------------
def env(**extra: str) -> dict[str, str]:
    """The worker's environment: the benchmark's settings on :data:`PG_URL`, persistent
    connections with health checks (``DATABASE_CONN_MAX_AGE``, which ``bench.settings``
    keeps open for good), its connections named ``bench-worker``."""
    return (
        dict(os.environ)
        | extra
        | {
            "DJANGO_SETTINGS_MODULE": "bench.settings",
            "DATABASE_URL": PG_URL,
            "DATABASE_CONN_MAX_AGE": "60",
            "BENCH_APPLICATION_NAME": "bench-worker",
            "PYTHONWARNINGS": "ignore",
        }
    )


def prepare() -> None:
    """A fresh, migrated :data:`PG_URL` database."""
    base, _, name = PG_URL.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True, connect_timeout=3) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    migrate = [sys.executable, "-m", "django", "migrate", "--noinput", "-v", "0"]
    subprocess.run(migrate, cwd=ROOT, env=env(), check=True)


def serve(storage: str, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A uvicorn worker (one process) of ``storage`` on a free port, once it listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    args = ["--factory", "--port", str(port), "--log-level", "warning", "--no-access-log"]
    args += ["--timeout-keep-alive", "120"]  # no idle connection closed under a waiting user
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "bench.worker:app", *args],
            cwd=ROOT,
            env=env(BENCH_WORKER_STORAGE=storage),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return proc, port
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the {storage} worker did not listen on {port}:\n{log.read_text()}")


def measure(storage: str, p: dict[str, Any], work: Path) -> dict[str, Any]:
    """:func:`drive` against a fresh worker of ``storage``, its server connections sampled."""
    from bench.workloads import Connections

    proc, port = serve(storage, work / f"worker-{storage}.log")
    sampler = Connections("bench-worker")
    sampler.start()
    try:
        limits = httpx.Limits(max_connections=p["users"])
        base = f"http://127.0.0.1:{port}"
        client = httpx.AsyncClient(base_url=base, limits=limits, timeout=60)

        async def run() -> dict[str, Any]:
            async with client:
                return await drive(client, f"{storage}-{int(time.time())}", p)

        cpu = _cpu_s(proc.pid)
        found = asyncio.run(run())
        per_turn = 1000 / (found["turn"]["n"] + p["users"])  # ms per second, by turn served
        found["cpu_ms_per_turn"] = (_cpu_s(proc.pid) - cpu) * per_turn
        found["postgres_cpu_ms_per_turn"] = sum(map(_cpu_s, _backends())) * per_turn
    finally:
        sampler.stop.set()
        sampler.join()
        proc.terminate()
        proc.wait(30)
    return {"label": STORAGES[storage], **found, "connections": sampler.peak}


def _backends() -> list[int]:
    """The process ids of the worker's server connections (their CPU is the worker's
    statements': they opened in its first turns)."""
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        query = "SELECT pid FROM pg_stat_activity WHERE application_name = 'bench-worker'"
        return [row[0] for row in conn.execute(query).fetchall()]


def _cpu_s(pid: int) -> float:
    """The CPU seconds (user and system) process ``pid`` has used so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the results ------------------------------------------------------------------------
def section(r: dict[str, Any]) -> str:
    """W5's section of the results page."""
    from bench.report import f, table

    rows = [
        {
            "storage": got["label"],
            "users": got["users"],
            "turns": got["turn"]["n"],
            "turns/s": got["turns_per_s"],
            "turn p50": got["turn"]["p50"],
            "turn p99": got["turn"]["p99"],
            "CPU ms/turn: worker": got["cpu_ms_per_turn"],
            "PostgreSQL": got["postgres_cpu_ms_per_turn"],
            "driver": got["driver_cpu_ms_per_turn"],
            "server connections": got["connections"],
        }
        for got in r["runs"].values()
    ]
    g, p = r["goals"], r["params"]
    verdict = "met" if g["met"] else "**not met**"
    return (
        f"{HEADING} (PostgreSQL)\n\nA Starlette app under uvicorn (one process) with one "
        "`AgentSquad` (the demo's offline classifier and two offline agents), "
        f"{p['users']} users at once over HTTP (httpx), each up to {p['turns']} turns "
        f"(at most {p['cap_s']:g} s), after one untimed turn each; `{r['command']}`, "
        f"{r['when']}, load average {r['load_average']:.2f} (a machine shared with other "
        "work: read the ratios). squad_memory: inline mode, persistent connections with "
        f"health checks, {r['database_threads']} database threads. "
        "Latencies in ms; CPU per turn served (the untimed ones too) of the worker "
        "process and of its PostgreSQL connections' backends, and of the driver in the "
        "timed turns (the users' httpx client, in a process of its own); server "
        "connections: the most the worker held "
        "(`pg_stat_activity`, sampled every 20 ms).\n\n"
        f"{table(rows)}\n\nGoal: squad_memory's worker serves at least "
        f"{GOALS['turns_per_s']:g}x the in-memory worker's turns/s with its p99 within "
        f"{GOALS['p99']:g}x: {f(g['turns_per_s'])}x and {f(g['p99'])}x, {verdict}.\n"
    )


def into_page(out: Path) -> None:
    """Put ``out/worker.json``'s section into ``out/README.md``, before its Method."""
    page, r = out / "README.md", json.loads((out / "worker.json").read_text())
    text = page.read_text() if page.exists() else "# Benchmark results\n"
    if HEADING in text:  # a previous measurement's, up to the next section
        head, _, rest = text.partition(HEADING)
        text = head + rest[rest.find("\n## ") + 1 :] if "\n## " in rest else head
    head, method, tail = text.partition("## Method")
    page.write_text(f"{head}{section(r)}\n{method}{tail}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench worker", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 users, 3 turns: a smoke run")
    parser.add_argument("--out", type=Path, help="results directory")
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / ".work")
    args = parser.parse_args(argv)
    os.environ.update(env())  # the driver's settings are the worker's
    import django

    django.setup()
    from squad_memory.conf import app_settings

    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request

    p, work = QUICK if args.quick else FULL, args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    out = args.out or (work / "quick" if args.quick else ROOT / "bench" / "results")
    prepare()
    r: dict[str, Any] = {"params": p, "load_average": os.getloadavg()[0]}
    r["command"] = " ".join(["python -m bench worker", *argv])
    r["runs"] = {storage: measure(storage, p, work) for storage in STORAGES}
    sm, mem = r["runs"]["squad_memory"], r["runs"]["in-memory"]
    ratios = {
        "turns_per_s": sm["turns_per_s"] / mem["turns_per_s"],
        "p99": sm["turn"]["p99"] / mem["turn"]["p99"],
    }
    met = ratios["turns_per_s"] >= GOALS["turns_per_s"] and ratios["p99"] <= GOALS["p99"]
    r["goals"] = ratios | {"met": met}
    r["database_threads"] = app_settings.database_threads
    r["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out.mkdir(parents=True, exist_ok=True)
    (out / "worker.json").write_text(json.dumps(r, indent=1))
    into_page(out)
    print(section(r), flush=True)
    return 0

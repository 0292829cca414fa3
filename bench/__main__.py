"""``python -m bench [--quick] [--out DIR]``: run the benchmarks, write the results page
(``python -m bench worker``: W5, one agent-squad worker over HTTP, ``bench/worker.py``;
``python -m bench http``: the API over HTTP at 40 and 400 clients, ``bench/http_load.py``).

A full run writes ``bench/results/`` (README.md, results.json, PNG plots); a quick run
writes to ``bench/.work/quick``. Each step runs in a fresh process on one database
(``python -m bench --step SPEC.json``): SQLite in ``bench/.work/`` and the PostgreSQL
database of ``BENCH_DATABASE_URL``; Celery mode uses the Redis of ``BENCH_BROKER_URL``.
``python -m bench scale`` runs the scale workload instead (:mod:`bench.scale`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import django
import psycopg
import redis

from bench.proxy import proxy

ROOT = Path(__file__).resolve().parent.parent
PG_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/sm_bench")
REDIS_URL = os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/2")
FULL: dict[str, Any] = {
    "sizes": [100, 1_000, 10_000],  # W1: stored history N
    "turns": 200,  # W1: timed turns per system and N
    "block": 5,  # W1: turns of one system at one N before the next
    "cap_s": 5.0,  # W1: seconds of turns per system and N at most
    "slow_turns": 100,  # W2
    "slow_sleep": 1.0,  # W2, W4: the slow summarizer's sleep (s)
    "statements_n": 10_000,  # W3
    "counts": [1, 10, 40],  # W4: conversations at once
    "conv_turns": 25,  # W4: turns per conversation
    "slow_conv_turns": 8,  # W4 with the slow summarizer (trigger_at 4, keep_last 1)
    "delay_s": 0.0015,  # W4: the proxy's delay of each reply
}
QUICK: dict[str, Any] = {
    **FULL,
    "sizes": [100, 300],
    "turns": 4,
    "cap_s": 2.0,
    "slow_turns": 22,
    "slow_sleep": 0.05,
    "statements_n": 60,
    "counts": [1, 4],
    "conv_turns": 3,
    "slow_conv_turns": 6,
}
#: W4's runs: (label, mode, slow summarizer, through the proxy, Django's pool)
CONCURRENCY = [
    ("inline, database local", "inline", False, False, False),
    ("inline, database 2 ms away", "inline", False, True, False),
    ("inline, database 2 ms away, Django's pool", "inline", False, True, True),
    ("inline, 1 s summarizer, database 2 ms away", "inline", True, True, False),
    ("tasks, 1 s summarizer, database 2 ms away", "tasks", True, True, False),
]
#: The workers of Celery mode and of tasks mode (``python`` and these arguments)
CELERY_WORKER = (
    "-m celery -A project worker -l info -c 1 --without-gossip --without-mingle --without-heartbeat"
)
DB_WORKER = "manage.py db_worker --no-reload --queue-name *"


class Run:
    """The run's sizes, its databases and the results so far."""

    def __init__(self, quick: bool, work: Path) -> None:
        self.p, self.quick, self.work = QUICK if quick else FULL, quick, work
        self.id, self.steps = f"r{int(time.time())}", itertools.count()
        self.urls = {"sqlite": f"sqlite:///{work / 'bench.sqlite3'}", "postgresql": PG_URL}
        self.results: dict[str, Any] = {"params": self.p, "quick": quick}
        self.logs: list[Path] = []  # the helper processes' output, newest last

    def env(self, url: str, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            DJANGO_SETTINGS_MODULE="bench.settings",
            DATABASE_URL=url,
            SQUAD_MEMORY_VAR_DIR=str(self.work),
            CELERY_BROKER_URL=REDIS_URL,
            BENCH_SLOW_SLEEP=str(self.p["slow_sleep"]),
            PYTHONWARNINGS="ignore",
        )
        return env | extra

    def prepare(self) -> None:
        """A fresh SQLite file and PostgreSQL database, migrated; an empty Redis database."""
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "bench.sqlite3").unlink(missing_ok=True)
        base, _, name = PG_URL.rpartition("/")
        with psycopg.connect(f"{base}/postgres", autocommit=True, connect_timeout=3) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            c.execute(f'CREATE DATABASE "{name}"')
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).flushdb()  # the run's own
        cmd = [sys.executable, "-m", "django", "migrate", "--noinput", "-v", "0"]
        migrating = [subprocess.Popen(cmd, cwd=ROOT, env=self.env(u)) for u in self.urls.values()]
        if any(proc.wait() for proc in migrating):
            raise RuntimeError("migrate failed on a benchmark database; see above")

    def step(self, name: str, url: str, env: dict[str, str], **spec: Any) -> Any:
        """Run one step in a fresh process on the database at ``url``; its JSON result."""
        tag = f"{name}-{next(self.steps)}"
        spec.update(
            work=str(self.work),
            params=self.p,
            run=f"{self.id}-{tag}",
            out=str(self.work / f"{tag}.out.json"),
        )
        path = self.work / f"{tag}.spec.json"
        path.write_text(json.dumps(spec))
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "bench", "--step", str(path)],
            cwd=ROOT,
            env=self.env(url, BENCH_APPLICATION_NAME=f"bench-{tag}", **env),
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            logs = "".join(f"\n{log}:\n{log.read_text()[-3000:]}" for log in self.logs[-2:])
            raise RuntimeError(f"benchmark step {tag} failed:\n{proc.stderr[-4000:]}{logs}")
        print(f"  {tag}: {time.perf_counter() - started:.1f} s", flush=True)
        return json.loads(Path(spec["out"]).read_text())

    @contextlib.contextmanager
    def process(self, args: str, **env: str) -> Iterator[None]:
        """``python ARGS`` on the PostgreSQL database for the duration of a block, its output
        in a log of the work folder (quoted if a step fails)."""
        log = self.work / f"{args.split()[1]}-{next(self.steps)}.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [sys.executable, *args.split()],
                cwd=ROOT,
                env=self.env(PG_URL, **env),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.logs.append(log)
        try:
            yield  # the steps wait for the compressions they queue (SquadMemory.settle)
        finally:
            proc.terminate()
            proc.wait(30)

    def each(self, work: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        """``work`` of each item, one after the other; all at once in a quick run (whose
        figures are not to be judged), so that it takes seconds."""
        if not self.quick:
            return [work(item) for item in items]
        with ThreadPoolExecutor(len(items)) as pool:
            return list(pool.map(work, items))

    def turns(self) -> None:
        """W1, W2, W3 on each database; W1 on PostgreSQL with prepared statements."""
        self.results["systems"], self.results["W2"], self.results["W3"] = {}, {}, {}

        def one(db: str) -> tuple[str, Any]:
            worker = self.process(CELERY_WORKER)  # Celery mode's, on PostgreSQL
            with worker if db == "postgresql" else contextlib.nullcontext():
                return db, self.step(f"turns-{db}", self.urls[db], {})

        for db, found in self.each(one, list(self.urls)):
            self.results["systems"].update(found["systems"])
            self.results["W2"].update(found["W2"])
            self.results["W3"][db] = found["W3"]
        # W1 again on PostgreSQL with psycopg preparing the statements (Django's OPTIONS).
        found = self.step("turns-prepared", PG_URL, {"BENCH_PREPARED": "1"})
        self.results["systems"].update(found["systems"])

    def concurrency(self) -> None:
        """W4 on PostgreSQL, each run in a process of its own."""

        def one(run: tuple[str, str, bool, bool, bool]) -> tuple[str, Any]:
            label, mode, slow, proxied, pool = run
            spec = dict(mode=mode, slow=slow, pool=pool, trigger=[4, 1] if slow else [20, 2])
            spec["turns"] = self.p["slow_conv_turns" if slow else "conv_turns"]
            worker = self.process(DB_WORKER, BENCH_APPLICATION_NAME="bench-worker")
            with worker if mode == "tasks" else contextlib.nullcontext():
                url, pooled = far if proxied else PG_URL, "1" if pool else "0"
                found = self.step("concurrency", url, {"BENCH_POOL": pooled}, concurrency=spec)
                return label, dict(spec, by_count=found)

        parts = urlsplit(PG_URL)
        target = parts.hostname or "127.0.0.1", parts.port or 5432
        with proxy(*target, self.p["delay_s"]) as port:
            far = urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{port}"))
            self.results["round_trip_ms"] = {"local": _ping(PG_URL), "proxied": _ping(far)}
            self.results["W4"] = dict(self.each(one, CONCURRENCY))


def _ping(url: str) -> float:
    """The median ms of a ``SELECT 1`` round trip to the database at ``url``."""
    with psycopg.connect(url) as conn:
        times = []
        for _ in range(200):
            started = time.perf_counter()
            conn.execute("SELECT 1").fetchone()
            times.append(time.perf_counter() - started)
    return sorted(times)[100] * 1000


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["scale"]:  # pages and calls on big databases (bench/scale.py)
        from bench import scale

        return scale.main(argv[1:])
    if argv[:1] == ["worker"]:  # python -m bench worker: W5, on its own
        from bench import worker

        return worker.main(argv[1:])
    if argv == ["http"]:  # the API over HTTP (bench/http_load.py)
        from bench import http_load

        return http_load.main()
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--out", type=Path, help="results directory")
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / ".work")
    parser.add_argument("--step", type=Path, help="one step of a run (a run starts them)")
    args = parser.parse_args(argv)
    if args.step:  # in a fresh process, on the database of DATABASE_URL
        spec = json.loads(args.step.read_text())
        django.setup()
        from bench import workloads

        Path(spec["out"]).write_text(json.dumps(asyncio.run(workloads.step(spec))))
        return 0
    out = args.out or (args.work / "quick" if args.quick else ROOT / "bench" / "results")
    started = time.perf_counter()
    run = Run(args.quick, args.work.resolve())
    run.results["load_average"] = os.getloadavg()
    run.prepare()
    run.turns()
    run.concurrency()
    run.results.update(
        command=" ".join(["python -m bench", *map(shlex.quote, argv)]),
        elapsed_s=time.perf_counter() - started,
        load_average_end=os.getloadavg(),
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(run.results, indent=1))
    from bench import report

    report.write(run.results, out)
    print(f"Done in {run.results['elapsed_s']:.0f} s; results in {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The services the benchmark uses: its PostgreSQL database, Redis and a Celery worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PG_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/sm_bench")
#: The broker of the Celery runs (its database is flushed when a worker starts):
#: ``BENCH_BROKER_URL``, else the tests' own Redis database (``TEST_REDIS_URL``).
REDIS_URL = (
    os.environ.get("BENCH_BROKER_URL")
    or os.environ.get("TEST_REDIS_URL")
    or "redis://127.0.0.1:6379/2"
)


def postgres() -> str | None:
    """None when the benchmark database is reachable (created if absent), else why not."""
    import psycopg

    base, _, name = PG_URL.rpartition("/")
    try:
        with psycopg.connect(f"{base}/postgres", autocommit=True, connect_timeout=3) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
                conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        return f"PostgreSQL at {base} is not reachable: {exc}".strip()
    return None


def truncate() -> None:
    """Empty squad_memory's tables in the benchmark's own database (full runs start clean)."""
    import psycopg

    with psycopg.connect(
        PG_URL.replace("postgres://", "postgresql://", 1), autocommit=True
    ) as conn:
        conn.execute(
            "TRUNCATE squad_memory_message, squad_memory_compression, squad_memory_slot "
            "RESTART IDENTITY CASCADE"
        )


def redis() -> str | None:
    """None when the broker answers, else why not."""
    import redis as redis_lib

    try:
        redis_lib.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis_lib.RedisError as exc:
        return f"Redis at {REDIS_URL} is not reachable: {exc}"
    return None


def celery_app() -> str | None:
    """None when the project's Celery app and the compression task exist."""
    for path in ("project/celery.py", "squad_memory/tasks.py"):
        if not (ROOT / path).exists():
            return f"{path} is missing, so Celery mode cannot run"
    return None


def migrate(*envs: dict[str, str]) -> None:
    """Run the migrations on each database at once."""
    cmd = [sys.executable, "-m", "django", "migrate", "--noinput", "-v", "0"]
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env) for env in envs]
    if any(proc.wait() != 0 for proc in procs):
        raise RuntimeError("migrate failed on a benchmark database; see the output above")


class Worker:
    """A real ``python -m celery -A project worker`` process on the benchmark's broker."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log = env, log
        self.proc: subprocess.Popen[Any] | None = None

    def __enter__(self) -> Worker:
        import redis as redis_lib

        redis_lib.Redis.from_url(REDIS_URL).flushdb()  # the benchmark's own database only
        cmd = [  # this interpreter's Celery, whatever a venv's ``celery`` script points to
            sys.executable,
            "-m",
            "celery",
            "-A",
            "project",
            "worker",
            "-l",
            "info",
            "-c",
            "1",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        self.handle = self.log.open("w")
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=self.env, stdout=self.handle, stderr=subprocess.STDOUT
        )
        self._wait_ready(60)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "ready." in self.log.read_text(errors="replace"):
                return
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.2)
        self.__exit__()
        raise RuntimeError(f"the Celery worker did not start; see {self.log}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.handle.close()

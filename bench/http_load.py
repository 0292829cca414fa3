"""``python -m bench http``: the API over HTTP on one uvicorn worker (the demo project's
``project.asgi``, DEBUG off, throttles off) on the PostgreSQL database of
``BENCH_DATABASE_URL`` with ``_http`` appended. Each of 40, then 400 clients posts a turn
(``POST /api/slots/messages/``, one message) in a loop for ``BENCH_HTTP_SECONDS`` (20),
every fifth time also reading the sessions list and its slot's buffer. A run gives the
messages stored a second, the posts' p50 and p99, the answers that were not 2xx, and the
most server connections of the database seen (polled every 0.1 s), for the project as
shipped (``AdmissionMiddleware``, ``DATABASE_THREADS`` 20), with it on Django's pool of 20,
without it, and without it on Django's pool of 40. Results go to ``bench/results/http_load.md``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parent.parent
URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/sm_bench") + "_http"
SECONDS = float(os.environ.get("BENCH_HTTP_SECONDS", "20"))
RESULTS = ROOT / "bench" / "results" / "http_load.md"
#: (label, environment of the server)
SERVERS = [
    ("AdmissionMiddleware, DATABASE_THREADS 20", {}),
    (
        "AdmissionMiddleware, DATABASE_THREADS 20, Django's pool (max_size 20)",
        {"DATABASE_POOL": "20"},
    ),
    ("without it", {"SQUAD_MEMORY_ADMISSION": "0"}),
    (
        "without it, Django's pool (max_size 40)",
        {"SQUAD_MEMORY_ADMISSION": "0", "DATABASE_POOL": "40"},
    ),
]
TOKEN = "0123456789abcdef0123456789abcdef01234567"


def env(**extra: str) -> dict[str, str]:
    """The demo project's settings for a benchmark: DEBUG off, throttles off."""
    settings = dict(DJANGO_SETTINGS_MODULE="project.settings", DATABASE_URL=URL, DJANGO_DEBUG="0")
    settings.update(DJANGO_SECRET_KEY="bench-" * 10, DJANGO_SECURE_SSL_REDIRECT="0")
    settings.update(API_THROTTLE_USER="none", API_THROTTLE_ANON="none", PYTHONWARNINGS="ignore")
    return os.environ | settings | extra


def prepare() -> None:
    """A fresh database, migrated, with a user whose token is :data:`TOKEN`."""
    base, _, name = URL.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v", "0"], cwd=ROOT, env=env(), check=True)
    user = (
        "from django.contrib.auth.models import User; from rest_framework.authtoken.models "
        f"import Token; user = User.objects.create(username='b', is_superuser=True); "
        f"Token.objects.create(key='{TOKEN}', user=user)"
    )
    subprocess.run([*manage, "shell", "-c", user], cwd=ROOT, env=env(), check=True)


@contextlib.contextmanager
def uvicorn(port: int, **extra: str) -> Iterator[str]:
    """One uvicorn worker serving the demo project at the URL it yields."""
    cmd = [sys.executable, "-m", "uvicorn", "project.asgi:application", "--port", str(port)]
    args = ["--workers", "1", "--no-access-log", "--log-level", "warning", "--backlog", "4096"]
    server = subprocess.Popen([*cmd, *args], cwd=ROOT, env=env(**extra))
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                break
            assert server.poll() is None and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(30)


async def client(http: httpx.AsyncClient, n: int, until: float, out: dict[str, list]) -> None:
    """Post turns (one message each, roles alternating) to session ``c<n>`` until ``until``;
    a post that failed is posted again with its Idempotency-Key (it may have been stored)."""
    stored = 0
    while time.monotonic() < until:
        message = {"role": ("user", "assistant")[stored % 2], "content": [{"text": f"{stored}"}]}
        body = {"session_id": f"c{n}", "agent_id": "a", "message": message}
        started = time.monotonic()
        answer = await call(
            http,
            "POST",
            "/api/slots/messages/",
            json=body,
            headers={"Idempotency-Key": f"c{n}-{stored}"},
        )
        out["post"].append(time.monotonic() - started)
        out["status"].append(answer.status_code if answer else 0)
        if answer and answer.status_code == 201:
            stored += 1
            slot = answer.json()["slot"]["id"]
            for path in ("/api/sessions/", f"/api/slots/{slot}/buffer/") if stored % 5 == 0 else ():
                got = await call(http, "GET", path)
                out["status"].append(got.status_code if got else 0)


async def call(http: httpx.AsyncClient, method: str, path: str, **kw: Any) -> httpx.Response | None:
    """The answer, or None if the connection failed."""
    try:
        return await http.request(method, path, **kw)
    except httpx.TransportError:
        return None


async def load(base: str, clients: int) -> dict[str, Any]:
    """``clients`` clients for :data:`SECONDS`, the server's connections polled meanwhile."""
    out: dict[str, list] = {"post": [], "status": [], "connections": [0]}
    headers = {"Authorization": f"Token {TOKEN}"}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(
        base_url=base, headers=headers, limits=limits, timeout=120
    ) as http:
        base_db, _, name = URL.rpartition("/")
        async with await psycopg.AsyncConnection.connect(
            f"{base_db}/postgres", autocommit=True
        ) as db:
            until = time.monotonic() + SECONDS
            started = time.monotonic()
            tasks = [asyncio.create_task(client(http, n, until, out)) for n in range(clients)]
            while not all(task.done() for task in tasks):
                row = await (
                    await db.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [name]
                    )
                ).fetchone()
                out["connections"].append(row[0] if row else 0)
                await asyncio.sleep(0.1)
            elapsed = time.monotonic() - started
    posts = sorted(out["post"])
    stored = sum(1 for status in out["status"] if status == 201)
    return {
        "msg/s": stored / elapsed,
        "p50 (s)": posts[len(posts) // 2],
        "p99 (s)": posts[int(len(posts) * 0.99)],
        "errors": errors(out["status"]),
        "peak connections": max(out["connections"]),
    }


def main() -> int:
    prepare()
    rows = []
    for port, (label, extra) in enumerate(SERVERS, start=18431):
        for clients in (40, 400):
            with uvicorn(port, **extra) as base:
                found = asyncio.run(load(base, clients))
            print(label, clients, found, flush=True)
            rows.append(
                f"| {label} | {clients} | "
                + " | ".join(
                    f"{value:,.2f}" if isinstance(value, float) else str(value)
                    for value in found.values()
                )
                + " |"
            )
    RESULTS.write_text(
        "# The API over HTTP on one uvicorn worker\n\n"
        f"PostgreSQL (max_connections {max_connections()}); Python {sys.version.split()[0]}; "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end; "
        f"{SECONDS:g} s per row, each client posting one message at a time and every fifth "
        "turn reading the sessions list and its buffer; errors: answers not 2xx, by status "
        "(0: the connection failed); peak connections: the database's server connections, "
        "polled every 0.1 s.\n\n"
        "| server | clients | msg/s | p50 (s) | p99 (s) | errors | peak connections |\n"
        "|---|---:|---:|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n\n"
        "Reproduce: `.venv/bin/python -m bench http`.\n"
    )
    print(f"Results in {RESULTS}")
    return 0


def errors(statuses: list[int]) -> str:
    """The answers that were not 2xx, by status (0: the connection failed)."""
    failed = collections.Counter(status for status in statuses if not 200 <= status < 300)
    return ", ".join(f"{n} ({status})" for status, n in sorted(failed.items())) or "0"


def max_connections() -> str:
    with psycopg.connect(URL) as conn:
        row = conn.execute("SHOW max_connections").fetchone()
        return str(row[0]) if row else "?"

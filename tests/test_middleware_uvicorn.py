"""The demo project under a real uvicorn worker on PostgreSQL, many more clients than
``DATABASE_THREADS``: with AdmissionMiddleware no request fails, every acknowledged message
is stored once, and the server never holds more connections than the bound (without the
middleware it holds one per request in flight)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import extra
from tests.processes import database_url

extra("rest_framework", "api")
httpx = pytest.importorskip("httpx")
psycopg = pytest.importorskip("psycopg")
pytest.importorskip("uvicorn", reason="needs uvicorn (requirements-dev.txt)")

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parent.parent
THREADS = 3
#: Backends pg_stat_activity may still list after the server closed their connections: a
#: backend leaves the list once it has exited, a moment after its client said goodbye.
EXITING = 2
CLIENTS = 40
TURNS = 4
#: The server's connections are told from the test's own by this name.
APPLICATION = "squad-memory-uvicorn-test"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def token(transactional_db: None) -> str:
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    user = User.objects.create(username="load", is_superuser=True)
    return str(Token.objects.create(user=user).key)


@pytest.fixture
def server(token: str) -> Iterator[str]:
    """One uvicorn worker serving ``project.asgi`` on the test database."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SQUAD_MEMORY", "DATABASE"))}
    env.update(
        DJANGO_SETTINGS_MODULE="project.settings",
        DATABASE_URL=f"{database_url()}?application_name={APPLICATION}",
        SQUAD_MEMORY_DATABASE_THREADS=str(THREADS),
        API_THROTTLE_USER="none",
        PYTHONWARNINGS="ignore",
    )
    command = [sys.executable, "-m", "uvicorn", "project.asgi:application", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--workers", "1", "--no-access-log", "--log-level", "warning"],
        cwd=ROOT,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert process.poll() is None, "uvicorn exited"
            assert time.monotonic() < deadline, "uvicorn did not start within 60 s"
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


async def converse(http: Any, n: int, acknowledged: list[int], statuses: list[int]) -> None:
    """``TURNS`` turns of session ``c<n>``, each followed by the reads a frontend polls."""
    for turn in range(TURNS):
        message = {"role": ("user", "assistant")[turn % 2], "content": [{"text": f"t{turn}"}]}
        body = {"session_id": f"c{n}", "agent_id": "a", "message": message}
        answer = await http.post("/api/slots/messages/", json=body)
        statuses.append(answer.status_code)
        if answer.status_code != 201:
            return
        acknowledged.append(n)
        slot = answer.json()["slot"]["id"]
        for path in ("/api/sessions/", f"/api/slots/{slot}/buffer/"):
            statuses.append((await http.get(path)).status_code)


async def load(base: str, token: str) -> tuple[list[int], list[int], list[int]]:
    """Every client's turns at once; the server's connections counted meanwhile."""
    acknowledged: list[int] = []
    statuses: list[int] = []
    counts: list[int] = []
    headers = {"Authorization": f"Token {token}"}
    limits = httpx.Limits(max_connections=CLIENTS)
    async with (
        httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=60) as http,
        await psycopg.AsyncConnection.connect(database_url(), autocommit=True) as db,
    ):
        clients = [
            asyncio.create_task(converse(http, n, acknowledged, statuses)) for n in range(CLIENTS)
        ]
        while not all(client.done() for client in clients):
            found = await db.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [APPLICATION]
            )
            row = await found.fetchone()
            counts.append(row[0] if row else 0)
            await asyncio.sleep(0.02)
        await asyncio.gather(*clients)
    return acknowledged, statuses, counts


@pytest.mark.django_db(transaction=True)  # the server, another process, reads the user's token
def test_many_clients_on_one_worker_get_no_error_and_at_most_database_threads_connections(
    server: str, token: str
) -> None:
    from squad_memory.models import Message

    acknowledged, statuses, counts = asyncio.run(load(server, token))

    assert set(statuses) == {200, 201}
    assert len(acknowledged) == CLIENTS * TURNS
    stored = Message.objects.values_list("slot__session_id", "seq").order_by(
        "slot__session_id", "seq"
    )
    assert sorted(stored) == sorted(
        (f"c{n}", seq) for n in range(CLIENTS) for seq in range(1, TURNS + 1)
    )
    assert 0 < max(counts) <= THREADS + EXITING, counts  # without the middleware: ~CLIENTS

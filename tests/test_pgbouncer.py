"""The save path, a compression and concurrent writers through PgBouncer (transaction pooling).

Each test starts its own ``pgbouncer`` (Debian's package) in front of the test
database and runs squad_memory in client processes connected through it, with
``tests.pgbouncer_settings`` (``DISABLE_SERVER_SIDE_CURSORS``). What they stored is
then read back directly, through the public storage API only.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
from tests import summarizers
from tests.conftest import require, texts
from tests.pgbouncer_server import PgBouncer, binary

# Transactional: the clients are other processes, through PgBouncer, which see committed rows.
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.services,
    pytest.mark.django_db(transaction=True),
    pytest.mark.prepared,
]

ROOT = Path(__file__).resolve().parent.parent


def database_url() -> str:
    s = connection.settings_dict
    return f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


@pytest.fixture
def bouncer() -> Iterator[PgBouncer]:
    require(
        binary() is not None,
        "pgbouncer is not installed (apt-get install -y pgbouncer): PgBouncer tests did not run",
    )
    with PgBouncer(database_url()) as running:
        yield running


def client_env(bouncer: PgBouncer, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DATABASE_URL": bouncer.url,
        "DJANGO_SETTINGS_MODULE": "tests.pgbouncer_settings",
        "SQUAD_MEMORY_SUMMARIZER": "tests.summarizers.fold",
        "SQUAD_MEMORY_MODE": "inline",
        "SQUAD_MEMORY_TRIGGER_AT": "3",
        "SQUAD_MEMORY_KEEP_LAST": "1",
    }
    env.update(extra)
    return env


def unfold(buffer: list[str]) -> list[str]:
    """The raw texts a fold buffer stands for: its (nested) summary's names, then the tail."""
    if not buffer or not buffer[0].startswith("S("):
        return buffer
    names = buffer[0].replace("S(", "").replace(")", "")
    return [n for n in names.split("+") if n] + buffer[1:]


def test_save_path_and_compression_work_through_pgbouncer(bouncer: PgBouncer) -> None:
    turns = 8
    proc = subprocess.run(
        [sys.executable, "-m", "tests.pgbouncer_client", "solo", str(turns)],
        cwd=ROOT,
        env=client_env(bouncer),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    name = connection.settings_dict["NAME"]
    assert f"db={name}" in bouncer.log, "the client did not connect through PgBouncer"
    expected = [t for i in range(turns + 1) for t in (f"q{i}", f"a{i}")]  # "skipped" was not stored
    assert texts(DjangoChatStorage().fetch_chat_sync("u", "s", "solo")) == expected
    seen_by_client = json.loads(proc.stdout.strip().splitlines()[-1])
    direct = SummarizingChatStorage(DjangoChatStorage(), summarizers.fold, 3, 1)
    buffer = texts(direct.fetch_chat_sync("u", "s", "solo"))
    assert buffer == seen_by_client
    assert buffer[0].startswith("S("), "no compression ran through PgBouncer"
    assert len(buffer) < len(expected)
    assert unfold(buffer) == expected


def test_concurrent_writers_through_pgbouncer_lose_nothing_and_keep_order(
    bouncer: PgBouncer,
) -> None:
    writers = {"b1": "batch", "b2": "batch", "s1": "single", "s2": "single", "s3": "single"}
    count = 60
    env = client_env(bouncer, TRIGGER_AT="5")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.writer_process", name, mode, str(count)],
            cwd=ROOT,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, mode in writers.items()
    ]
    codes = [p.wait(timeout=240) for p in procs]
    errors = [p.stderr.read()[-3000:] for p in procs if p.stderr is not None]
    assert codes == [0] * len(procs), errors

    history = DjangoChatStorage().fetch_chat_sync("u", "s", "shared")
    raw = texts(history)
    assert len(raw) == len(set(raw)), "a message was stored twice"
    for prev, message in itertools.pairwise(history):
        if texts([message])[0].startswith("s"):  # single saves obey the role rule
            assert prev.role != message.role, f"{texts([message])} repeats the previous role"
    for name, mode in writers.items():
        mine = [int(t.split(":")[1]) for t in raw if t.startswith(f"{name}:")]
        assert mine == sorted(mine), f"{name}'s messages are out of order"
        if mode == "batch":
            assert mine == list(range(count)), f"{name} lost batch messages"
    buffer = texts(
        SummarizingChatStorage(DjangoChatStorage(), summarizers.fold, 5, 2).fetch_chat_sync(
            "u", "s", "shared"
        )
    )
    assert buffer[0].startswith("S("), "no compression ran through PgBouncer"
    assert unfold(buffer) == raw, "the compressions did not chain over the raw history in order"

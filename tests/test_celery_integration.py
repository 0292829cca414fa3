"""Celery mode end to end: real ``celery worker`` processes, Redis, PostgreSQL.

Writers and workers are separate processes on the test database (hence
``transaction=True``). Summarizers come from ``tests.celery_summarizers``.
Skipped with a reason without PostgreSQL or Redis; failed under ``CI=true``.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from squad_memory.compression import log
from squad_memory.models import Compression, Message, Slot
from tests.celery_fixtures import FLUSHED_REDIS_URL
from tests.celery_writer import SLOT
from tests.conftest import buffer_of, require
from tests.processes import database_url, wait_for

# Transactional: the workers and writers are other processes, which see committed rows only.
# One xdist worker runs them all: they flush one Redis database and start one Redis port.
pytestmark = [
    pytest.mark.services,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.xdist_group("celery-broker"),
]

BROKER = FLUSHED_REDIS_URL
OWN_REDIS_PORT = int(os.environ.get("TEST_OWN_REDIS_PORT", "6390"))
ROOT = Path(settings.BASE_DIR)


def _redis_ok(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


class Processes:
    """Starts workers and writers on the test database; kills what is left at teardown."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.started = tmp, []
        self.markers = tmp / "markers"
        self.markers.mkdir()
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "CELERY_BROKER_URL": BROKER,
            "SQUAD_MEMORY_MODE": "celery",
            "SQUAD_MEMORY_SUMMARIZER": "tests.celery_summarizers.slow",
            "SQUAD_MEMORY_KEEP_LAST": "1",
            "SM_MARKER_DIR": str(self.markers),
            "PYTHONPATH": str(ROOT),
        }

    def worker(
        self, name: str, concurrency: int = 1, *options: str, **env: str
    ) -> subprocess.Popen[bytes]:
        log = self.tmp / f"{name}.log"
        args = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "project",
            "worker",
            "--pool=prefork",
            f"--concurrency={concurrency}",
            "--loglevel=INFO",
            "-n",
            f"{name}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            *options,
        ]
        proc = self._start(args, log, env)
        deadline = time.monotonic() + 30
        while "ready." not in log.read_text():
            assert proc.poll() is None, f"the worker exited:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"the worker did not start:\n{log.read_text()}"
            time.sleep(0.1)
        return proc

    def writer(self, writer: str, pairs: int, **env: str) -> subprocess.Popen[bytes]:
        args = [sys.executable, "-m", "tests.celery_writer", writer, str(pairs)]
        return self._start(args, self.tmp / f"writer-{writer}.log", env, stdout=subprocess.PIPE)

    def command(self, *args: str, **env: str) -> str:
        proc = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            capture_output=True,
            env={**self.env, **env},
            timeout=60,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def _start(
        self, args: list[str], log: Path, env: dict[str, str], stdout: Any = None
    ) -> subprocess.Popen[bytes]:
        handle = log.open("wb")
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env={**self.env, **env},
            start_new_session=True,
            stdout=stdout or handle,
            stderr=handle,
        )
        self.started.append(proc)
        return proc

    def kill_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    require(_redis_ok(BROKER), f"needs Redis at {BROKER} as the Celery broker")
    import redis

    redis.Redis.from_url(BROKER).flushdb()
    processes = Processes(tmp_path)
    try:
        yield processes
    finally:
        processes.kill_all()


def _unacked() -> int:
    import redis

    return int(redis.Redis.from_url(BROKER).hlen("unacked"))


def the_slot() -> Slot:
    return Slot.objects.for_key(*SLOT).get()


def drained(trigger_at: int) -> bool:
    s = Slot.objects.for_key(*SLOT).first()
    return s is not None and not s.pending_token and s.buffer_length <= 2 * trigger_at


def applied() -> list[Compression]:
    return list(Compression.objects.filter(outcome="applied").order_by("started_at", "id"))


def raw_texts() -> list[str]:
    return [m.content[0]["text"] for m in Message.objects.filter(slot=the_slot()).order_by("seq")]


def assert_buffer_is_summary_then_tail() -> None:
    s, last = the_slot(), applied()[-1]
    assert (s.summary, s.covered_seq) == (log.output_of(last), last.to_seq)
    tail = Message.objects.filter(slot=s, seq__gt=s.covered_seq).order_by("seq")
    expected = [(m["role"], m["content"]) for m in s.summary] + [(m.role, m.content) for m in tail]
    assert [(r["role"], r["content"]) for r in buffer_of(s)] == expected
    # Every message the summaries cover is named in the latest one: nothing fell out.
    named = set(re.findall(r"w\d+-\d+-[ua]", json.dumps(s.summary)))
    assert set(raw_texts()[: s.covered_seq]) <= named


def test_concurrent_writers_one_worker_compressing(procs: Processes) -> None:
    trigger_at, writers, pairs = 10, 4, 60
    procs.worker("busy", concurrency=2, SM_SUMMARIZER_SLEEP="0.5")
    # Each writer waits for the queued compression every 20 pairs: at least 3 compressions,
    # however fast the writers are (a clock alone gave 2 on a quick machine).
    env = {"SM_TRIGGER_AT": str(trigger_at), "SM_PAUSE": "0.01", "SM_SETTLE_EVERY": "20"}
    running = [procs.writer(str(w), pairs, **env) for w in range(writers)]
    for proc in running:
        proc.communicate(timeout=120)
        assert proc.returncode == 0
    wait_for(lambda: drained(trigger_at), 30, "the compressions to catch up")

    texts = raw_texts()
    assert len(texts) == len(set(texts)) == writers * pairs * 2 == the_slot().last_seq
    for w in range(writers):
        mine = [t for t in texts if t.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{n}-{r}" for n in range(pairs) for r in "ua"]
    done = applied()
    assert len(done) >= 3
    for before, after in itertools.pairwise(done):
        assert after.started_at >= before.finished_at, "two compressions overlapped"
        assert after.from_seq == before.to_seq + 1 and log.input_of(after)[
            : len(log.output_of(before) or [])
        ] == log.output_of(before)
    assert_buffer_is_summary_then_tail()


@pytest.mark.parametrize("victim", ["whole worker", "pool process"])
def test_killed_worker_loses_nothing_and_compresses_once(procs: Processes, victim: str) -> None:
    env = {"SM_SUMMARIZER_SLEEP": "3", "CELERY_VISIBILITY_TIMEOUT": "3"}
    first = procs.worker("first", **env)
    writer = procs.writer("0", 6, SM_TRIGGER_AT="2")
    assert writer.wait(30) == 0
    wait_for(lambda: any(procs.markers.iterdir()), 15, "the summarizer to start")
    if victim == "whole worker":
        os.killpg(first.pid, signal.SIGKILL)  # main process and pool: nobody acknowledges
        first.wait(10)
        assert the_slot().pending_token and Compression.objects.count() == 0
        assert _unacked() == 1, "the broker should hold the task, delivered but not acknowledged"
        time.sleep(3.5)  # past the visibility timeout: a new worker takes the task back
        procs.worker("second", **env)
    else:
        (marker,) = procs.markers.iterdir()
        os.kill(int(marker.name.split("-")[1]), signal.SIGKILL)  # the worker requeues the task
    wait_for(lambda: bool(applied()), 30, "the redelivered compression")
    time.sleep(0.5)
    (row,) = Compression.objects.all()
    assert (row.outcome, row.from_seq, row.to_seq) == ("applied", 1, 12)
    assert len(list(procs.markers.iterdir())) == 2  # the killed call, and the redelivered one
    assert raw_texts() == [f"w0-{n}-{r}" for n in range(6) for r in "ua"]
    assert the_slot().pending_token == ""
    assert_buffer_is_summary_then_tail()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    """Start (and restart) a throwaway redis-server of this test on its own port."""
    require(
        subprocess.run(["which", "redis-server"], capture_output=True).returncode == 0,
        "needs the redis-server executable to stop and restart a broker",
    )
    url = f"redis://127.0.0.1:{OWN_REDIS_PORT}/0"
    require(not _redis_ok(url), f"port {OWN_REDIS_PORT} is taken; the test needs its own Redis")
    servers: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        server = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(OWN_REDIS_PORT),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(tmp_path),
            ],
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        servers.append(server)
        wait_for(lambda: _redis_ok(url), 10, "redis-server to start")
        return server

    try:
        yield start
    finally:
        for server in servers:
            if server.poll() is None:
                server.kill()
                server.wait(10)


def test_broker_down_saves_succeed_and_the_sweep_catches_up(
    procs: Processes, own_redis: Callable[[], subprocess.Popen[bytes]]
) -> None:
    broker = f"redis://127.0.0.1:{OWN_REDIS_PORT}/0"
    env = {"CELERY_BROKER_URL": broker, "SM_TRIGGER_AT": "2", "SQUAD_MEMORY_TRIGGER_AT": "2"}
    server = own_redis()
    procs.worker("survivor", SM_SUMMARIZER_SLEEP="0.2", **env)
    server.terminate()
    server.wait(10)

    writer = procs.writer("0", 6, **env)
    out, _ = writer.communicate(timeout=60)
    assert writer.returncode == 0
    timings = json.loads(out)
    assert timings["max_save"] < 1.0 and timings["max_fetch"] < 1.0
    s = the_slot()
    assert s.active and s.pending_token == "" and s.buffer_length == 12
    assert Compression.objects.count() == 0
    assert "Could not enqueue the compression" in (procs.tmp / "writer-0.log").read_text()

    own_redis()
    assert "1 slot(s) over the threshold" in procs.command("squad_memory_sweep", **env)
    wait_for(lambda: drained(2), 40, "the worker to reconnect and compress")
    assert raw_texts() == [f"w0-{n}-{r}" for n in range(6) for r in "ua"]
    assert len(applied()) == 1
    assert_buffer_is_summary_then_tail()


# -- a broker that accepts and never answers ---------------------------------------------------
@pytest.fixture
def silent_broker() -> Iterator[int]:
    """A local listener that accepts TCP connections and never sends a byte."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    server.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(2)
    for sock in held:
        sock.close()
    server.close()


@pytest.mark.parametrize("scheme", ["redis", "amqp"])
def test_a_broker_that_never_answers_does_not_hold_the_save(
    silent_broker: int, scheme: str, settings: Any, caplog: Any
) -> None:
    from celery import Celery, current_app

    from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
    from tests.conftest import msg

    settings.SQUAD_MEMORY = {"PUBLISH_TIMEOUT": 1.0}
    previous = current_app._get_current_object()
    url = (
        f"redis://127.0.0.1:{silent_broker}/0"
        if scheme == "redis"
        else (f"amqp://guest:guest@127.0.0.1:{silent_broker}//")
    )
    app = Celery("squad-memory-silent", broker=url, set_as_current=False)
    app.conf.update(task_ignore_result=True)
    app.set_current()
    try:
        store = SummarizingChatStorage(
            DjangoChatStorage(), "tests.celery_summarizers.fold", 2, 1, mode="celery"
        )
        for i in range(3):
            store.save_chat_messages_sync(*SLOT, [msg("user", f"u{i}"), msg("assistant", f"a{i}")])
        # Each returns although the broker never answers: the publish gives up after
        # PUBLISH_TIMEOUT (logged below, twice).
        store.fetch_chat_sync(*SLOT)  # activates: its claim cannot be published
        store.save_chat_message_sync(*SLOT, msg("user", "u3"))  # crosses again: same
    finally:
        previous.set_current()
    slot = Slot.objects.get()
    assert slot.pending_since is None and slot.last_seq == 7  # released; the message stored
    assert caplog.text.count("Could not enqueue the compression") == 2
    assert "TimeoutError" in caplog.text


def test_tasks_calling_the_async_api_survive_a_dropped_connection(procs: Processes) -> None:
    """A worker's tasks call ``asyncio.run(storage.save_chat_message(...))`` on persistent
    connections; the database drops them all; the next tasks store every message."""
    from django.db import connection

    from tests.celery_async_tasks import SLOT

    procs.worker("async", 1, "-I", "tests.celery_async_tasks", DATABASE_CONN_MAX_AGE="none")

    def stored() -> int:
        return Message.objects.filter(slot__agent_id=SLOT[2]).count()

    def send(first: int, count: int) -> None:
        args = [sys.executable, "-m", "tests.celery_async_tasks", str(first), str(count)]
        subprocess.run(args, cwd=ROOT, env=procs.env, check=True, timeout=60)

    send(0, 20)
    wait_for(lambda: stored() == 20, 60, "the first 20 tasks")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        assert cursor.fetchone()[0] >= 1  # the worker's connection
    send(20, 20)
    wait_for(lambda: stored() == 40, 60, "the 20 tasks after the drop")
    rows = Message.objects.filter(slot__agent_id=SLOT[2]).order_by("seq")
    assert [(m.seq, m.text) for m in rows] == [(i + 1, f"m{i}") for i in range(40)]

"""Tasks mode end to end: real ``manage.py db_worker`` processes of django-tasks-db, no broker,
on SQLite (a database file of the test's own) and on PostgreSQL (the test database).

Writers, workers and the sweep are separate processes; the summarizer
(``tests.celery_summarizers.slow``) leaves a marker named after the process that ran it,
so a test sees where each compression ran.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from tests.conftest import extra, require
from tests.processes import database_url, wait_for

extra("django_tasks_db", "tasks")

ROOT = Path(settings.BASE_DIR)
# Transactional: the workers are other processes, which see committed rows only.
pytestmark = pytest.mark.django_db(transaction=True)


class Site:
    """Processes of one project on one database: workers, writers, the sweep, a probe."""

    def __init__(self, tmp: Path, url: str) -> None:
        self.tmp, self.workers = tmp, []
        self.markers = tmp / "markers"
        self.markers.mkdir()
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("SQUAD_MEMORY")},
            "DJANGO_SETTINGS_MODULE": "tests.tasks_settings",
            "DATABASE_URL": url,
            "SQUAD_MEMORY_MODE": "tasks",
            "SQUAD_MEMORY_SUMMARIZER": "tests.celery_summarizers.slow",
            "SQUAD_MEMORY_TRIGGER_AT": "2",
            "SQUAD_MEMORY_KEEP_LAST": "1",
            "SM_MARKER_DIR": str(self.markers),
            "SM_CLAIM_LEASE": "2",
            "PYTHONPATH": str(ROOT),
        }

    def run(self, *args: str, **env: str) -> str:
        done = subprocess.run(
            [sys.executable, *args],
            cwd=ROOT,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    def worker(self, name: str, **env: str) -> subprocess.Popen[bytes]:
        log = self.tmp / f"{name}.log"
        args = ["manage.py", "db_worker", "--no-reload", "--no-startup-delay", "--interval", "0.1"]
        proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env={**self.env, **env},
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.workers.append(proc)
        wait_for(lambda: "Starting worker" in log.read_text(), 30, f"{name} to start")
        return proc

    def save(self, writer: str, pairs: int, **env: str) -> dict[str, Any]:
        return json.loads(self.run("-m", "tests.tasks_site", "save", writer, str(pairs), **env))

    def state(self) -> dict[str, Any]:
        return json.loads(self.run("-m", "tests.tasks_site", "state"))

    def ran_in(self) -> list[int]:
        """The pid of the process of each summarizer call so far."""
        return sorted(int(marker.name.split("-")[1]) for marker in self.markers.iterdir())

    def kill_all(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


@pytest.fixture(
    params=[
        pytest.param("sqlite", marks=pytest.mark.own_database),
        pytest.param("postgresql", marks=pytest.mark.postgres),
    ]
)
def site(request: Any, tmp_path: Path) -> Iterator[Site]:
    if request.param == "sqlite":
        made = Site(tmp_path, f"sqlite:///{tmp_path / 'db.sqlite3'}")
        made.run("manage.py", "migrate", "--verbosity", "0")
    else:
        require(connection.vendor == "postgresql", "needs PostgreSQL (DATABASE_URL=postgres://...)")
        made = Site(tmp_path, database_url())
    try:
        yield made
    finally:
        made.kill_all()


def applied(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in state["compressions"] if c["outcome"] == "applied"]


def test_the_saves_enqueue_and_only_the_worker_compresses(site: Site) -> None:
    worker = site.worker("worker", SM_SUMMARIZER_SLEEP="0.3")
    writer = site.save("0", 12, SM_PAUSE="0.1")
    assert writer["max_save"] < 1.0 and writer["max_fetch"] < 1.0
    wait_for(lambda: not site.state()["slot"]["pending"], 60, "the worker to catch up")
    state = site.state()
    assert state["texts"] == [f"w0-{n}-{r}" for n in range(12) for r in "ua"]
    done = applied(state)
    assert len(done) >= 2 and len(done) == len(state["compressions"])
    for before, after in itertools.pairwise(done):
        assert after["started"] >= before["finished"], "two compressions overlapped"
        assert after["from_seq"] == before["to_seq"] + 1
    assert state["slot"]["covered_seq"] == done[-1]["to_seq"]
    assert set(site.ran_in()) == {worker.pid}  # never the writer's process
    assert set(state["tasks"]) == {"SUCCESSFUL"}


def test_a_worker_killed_mid_compression_leaves_no_stuck_claim(site: Site) -> None:
    first = site.worker("first", SM_SUMMARIZER_SLEEP="5")
    writer = site.save("0", 6)
    wait_for(lambda: bool(site.ran_in()), 30, "the worker to start summarizing")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(10)
    state = site.state()
    assert state["slot"]["pending"] and state["compressions"] == []
    assert state["tasks"] == ["RUNNING"]  # django-tasks-db never takes it back
    second = site.worker("second", SM_SUMMARIZER_SLEEP="0.2")
    assert state["slot"]["lease_left"] <= 2.0  # the claim runs out with CLAIM_LEASE
    wait_for(lambda: site.state()["slot"]["lease_left"] < 0, 10, "the claim's lease to run out")
    assert "1 slot(s)" in site.run("manage.py", "squad_memory_sweep")
    wait_for(lambda: bool(applied(site.state())), 30, "the sweep's compression")
    state = site.state()
    assert [(c["outcome"], c["from_seq"], c["to_seq"]) for c in state["compressions"]] == [
        ("applied", 1, 12)
    ]
    assert not state["slot"]["pending"] and state["tasks"] == ["RUNNING", "SUCCESSFUL"]
    assert state["texts"] == [f"w0-{n}-{r}" for n in range(6) for r in "ua"]
    assert site.ran_in() == sorted([first.pid, second.pid])
    assert writer["pid"] not in site.ran_in()


# -- `make demo`: a worker beside the server -------------------------------------------------------


def make_demo(tmp: Path, *args: str, url: str | None = None) -> subprocess.Popen[str]:
    """``make demo`` as a user runs it, on a database of its own (SQLite in ``tmp`` unless
    ``url``), in this virtualenv."""
    require(shutil.which("make") is not None, "needs make to run the demo's Makefile target")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SQUAD_MEMORY", "DATABASE"))}
    env.update(PYTHONUNBUFFERED="1", DATABASE_URL=url or f"sqlite:///{tmp / 'db.sqlite3'}")
    venv = Path(sys.prefix)
    command = ["make", "-o", f"{venv}/.installed-demo", "demo", f"VENV={venv}"]
    command += [f"SQUAD_MEMORY_VAR_DIR={tmp}", *args]
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def query(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute(sql).fetchall()


def demo_output(demo: subprocess.Popen[str]) -> list[str]:
    """The demo's output lines so far, read on a thread (the server goes on printing)."""
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(demo.stdout or []), daemon=True).start()
    return lines


#: What a project saves after the worker came back: one slot over the threshold, activated.
SAVE_AFTER = """
import squad_memory
s = squad_memory.get_storage()
for i in range(25):
    s.save_chat_messages_sync("after", "restart", "a", [
        {"role": "user", "content": [{"text": f"u{i}"}]},
        {"role": "assistant", "content": [{"text": f"a{i}"}]}])
s.fetch_chat_sync("after", "restart", "a")
"""
COMPRESSED_AFTER = (
    "SELECT c.outcome FROM squad_memory_compression c JOIN squad_memory_slot s "
    "ON s.id = c.slot_id WHERE s.user_id = 'after'"
)


def save_after(tmp: Path, url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SQUAD", "DATABASE"))}
    env.update(DATABASE_URL=url, SQUAD_MEMORY_MODE="tasks", SQUAD_MEMORY_VAR_DIR=str(tmp))
    command = [sys.executable, "manage.py", "shell", "-c", SAVE_AFTER]
    subprocess.run(command, cwd=ROOT, env=env, check=True, timeout=120)


@pytest.mark.own_database  # make demo's SQLite file
def test_make_demo_compresses_in_a_worker_beside_the_server_and_starts_it_again(
    tmp_path: Path,
) -> None:
    """The worker compresses beside the server; a worker that exits (killed here; a database
    restart may make it exit) is started again a second later, and compresses what is saved
    afterwards."""
    port = free_port()
    demo = make_demo(tmp_path, f"DEMO_ARGS=--addrport 127.0.0.1:{port}")
    lines = demo_output(demo)
    started = re.compile(r"db_worker \(pid (\d+)\), no broker")
    try:
        wait_for(lambda: any("Quit the server" in line for line in lines), 120, "the demo")
        output = "".join(lines)
        assert "Mode: tasks" in output and "db_worker (pid" in output, output
        db = tmp_path / "db.sqlite3"
        # Before serving, the demo shows the worker's first compression (waiting for it when
        # the worker has not finished it yet: the wait itself is test_demo's).
        assert "A summary took over" in output and "No summary yet" not in output, output
        base = f"http://127.0.0.1:{port}"
        see = re.search(rf"See it: {base}/admin/squad_memory/slot/(\d+)/change/$", output, re.M)
        assert see, output
        shown = f"SELECT agent_id FROM squad_memory_slot WHERE id = {int(see[1])}"
        assert query(db, shown) == [("travel-agent",)]
        done = "SELECT trigger, outcome FROM squad_memory_compression"
        wait_for(lambda: bool(query(db, done)), 30, "the worker to compress")
        assert set(query(db, done)) == {("tasks", "applied")}  # run by the task, not the save
        tasks = query(db, "SELECT status FROM django_tasks_database_dbtaskresult")
        assert tasks and {s for (s,) in tasks} <= {"SUCCESSFUL", "RUNNING", "READY"}
        urllib.request.urlopen(f"http://127.0.0.1:{port}/admin/login/", timeout=10).close()

        (first,) = [int(pid) for pid in started.findall("".join(lines))]
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: len(started.findall("".join(lines))) == 2, 30, "a second worker")
        second = int(started.findall("".join(lines))[-1])
        assert second != first and _running(second) and not _running(first)
        assert f"db_worker (pid {first}) exited with 137; starting it again" in "".join(lines)
        save_after(tmp_path, f"sqlite:///{db}")
        compressed = lambda: query(db, COMPRESSED_AFTER) == [("applied",)]  # noqa: E731
        wait_for(compressed, 30, "the second worker to compress")
    finally:
        os.killpg(demo.pid, signal.SIGTERM)  # what closing the terminal sends
        demo.wait(20)
    wait_for(lambda: not _alive(demo.pid), 10, "the server and the worker to stop")
    assert not _running(second)


class Cluster:
    """A PostgreSQL cluster of this test's own, on a free port under /tmp (never the shared
    server): started, restarted the way an operator does (``pg_ctl restart -m fast``), removed."""

    def __init__(self) -> None:
        found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
        initdb = shutil.which("initdb") or (str(found[-1]) if found else None)
        require(initdb is not None, "needs PostgreSQL's server binaries (initdb, pg_ctl)")
        assert initdb is not None
        self.bin = Path(initdb).parent
        root = os.geteuid() == 0  # initdb refuses root: the cluster runs as postgres
        self.as_user = ["runuser", "-u", "postgres", "--"] if root else []
        self.base = Path(tempfile.mkdtemp(prefix="sm-cluster-", dir="/tmp"))
        if root:
            shutil.chown(self.base, "postgres")
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/demo"
        self.pg_ctl("initdb", "-o", "-U postgres --auth=trust -E UTF8 --no-sync")
        options = f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync=off"
        self.pg_ctl("start", "-o", options)
        self.psql("CREATE DATABASE demo")

    def pg_ctl(self, *args: str) -> None:
        """``pg_ctl`` on the cluster; the server logs to a file (never to this pipe)."""
        command = [*self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.base / "data")]
        command += ["-w", "-l", str(self.base / "log"), *args]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def psql(self, sql: str, database: str = "postgres") -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.url.rsplit("/", 1)[0] + f"/{database}", autocommit=True) as c:
            cursor = c.execute(sql)
            return cursor.fetchall() if cursor.description else []

    def remove(self) -> None:
        self.pg_ctl("stop", "-m", "immediate")
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    extra("psycopg", "postgres")
    made = Cluster()
    try:
        yield made
    finally:
        made.remove()


@pytest.mark.own_database  # make demo's SQLite file, a PostgreSQL cluster of its own
def test_make_demo_keeps_compressing_across_a_postgresql_restart(
    tmp_path: Path, cluster: Cluster
) -> None:
    """After ``pg_ctl restart -m fast``, what is saved is compressed: by the same db_worker if
    it reconnected, or by the one started again if it exited (django-tasks-db's worker exits
    when the restart meets it mid-task, on some versions also when idle)."""
    demo = make_demo(tmp_path, f"DEMO_ARGS=--addrport 127.0.0.1:{free_port()}", url=cluster.url)
    lines = demo_output(demo)
    try:
        wait_for(lambda: any("Quit the server" in line for line in lines), 180, "the demo")
        cluster.pg_ctl("restart", "-m", "fast")
        save_after(tmp_path, cluster.url)
        wait_for(
            lambda: cluster.psql(COMPRESSED_AFTER, "demo") == [("applied",)],
            60,
            f"a worker to compress after the restart: {''.join(lines)[-2000:]}",
        )
    finally:
        os.killpg(demo.pid, signal.SIGTERM)
        demo.wait(20)


@pytest.mark.own_database  # make demo's SQLite file
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "term"])
def test_make_demo_ends_with_its_worker_and_does_not_say_it_restarts_it(
    tmp_path: Path, stop: signal.Signals
) -> None:
    """Ctrl-C (SIGINT to the terminal's foreground group: make, the shells, the server and
    the worker) or TERM ends the demo, its worker and the loop that restarts it, quietly."""
    demo = make_demo(tmp_path, f"DEMO_ARGS=--addrport 127.0.0.1:{free_port()}")
    lines = demo_output(demo)
    started = re.compile(r"db_worker \(pid (\d+)\), no broker")
    try:
        wait_for(lambda: any("Quit the server" in line for line in lines), 120, "the demo")
        (worker,) = [int(pid) for pid in started.findall("".join(lines))]
        os.killpg(demo.pid, stop)
        demo.wait(20)
        wait_for(lambda: not _alive(demo.pid), 10, "the server and the worker to stop")
    finally:
        if _alive(demo.pid):
            os.killpg(demo.pid, signal.SIGKILL)
    output = "".join(lines)
    assert "starting it again" not in output and "exited with" not in output, output
    assert len(started.findall(output)) == 1 and not _running(worker)


@pytest.mark.own_database  # make demo's SQLite file
def test_make_demo_checks_its_port_before_anything_else(tmp_path: Path) -> None:
    """With its port taken, make demo says so, and which variable moves it, before it
    migrates, starts a worker or prints an address, a token or a curl line."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        demo = make_demo(tmp_path, f"DEMO_ARGS=--addrport 127.0.0.1:{port}")
        output, _ = demo.communicate(timeout=120)
    assert demo.returncode != 0, output
    assert f"Cannot serve on 127.0.0.1:{port}" in output, output
    assert f'DEMO_ARGS="--addrport {port + 1}"' in output
    for later in ("Database", "db_worker", "Admin", "API token", "curl", "http://"):
        assert later not in output, output
    assert not (tmp_path / "db.sqlite3").exists()  # not migrated


@pytest.mark.own_database  # make demo's SQLite file
def test_make_demo_runs_inline_one_setting_away(tmp_path: Path) -> None:
    demo = make_demo(tmp_path, "SQUAD_MEMORY_MODE=inline", "DEMO_ARGS=--no-serve")
    output, _ = demo.communicate(timeout=180)
    assert demo.returncode == 0, output
    assert "Mode: inline" in output and "db_worker" not in output
    triggers = query(
        tmp_path / "db.sqlite3", "SELECT DISTINCT trigger FROM squad_memory_compression"
    )
    assert triggers and ("tasks",) not in triggers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _running(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True

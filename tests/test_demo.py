"""The demo command, run as a user runs it: a fresh SQLite database, then a real server."""

from __future__ import annotations

import asyncio
import http.cookiejar
import io
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import extra

extra("rest_framework", "api")  # the demo serves the REST API

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "project" / "demo" / "fixtures" / "conversation.json"
PASSWORD = re.compile(r"password \(shown once\): (\S+)")


def demo_env(var_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SQUAD_MEMORY", "DATABASE"))}
    env.update(
        SQUAD_MEMORY_VAR_DIR=str(var_dir),
        DATABASE_URL=f"sqlite:///{var_dir}/db.sqlite3",
        PYTHONUNBUFFERED="1",
        DJANGO_SETTINGS_MODULE="project.settings",
    )
    return env


def run_demo(var_dir: Path, *args: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", "demo", "--no-serve", *args],
        cwd=ROOT,
        env={**demo_env(var_dir), **env},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """The demo run on a fresh database and left serving; yields (base URL, output, var dir)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--addrport", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=demo_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output = read_until_serving(process, port)
        yield f"http://127.0.0.1:{port}", output, tmp_path
    finally:
        process.terminate()
        process.wait(timeout=20)


def read_until_serving(process: subprocess.Popen[str], port: int) -> str:
    lines: list[str] = []
    deadline = time.monotonic() + 180
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line and process.poll() is not None:
            pytest.fail("the demo exited early:\n" + "".join(lines))
        lines.append(line)
        if "Post a message:" in line:  # the last line before the server starts
            break
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return "".join(lines)
        time.sleep(0.2)
    pytest.fail("the demo server did not start:\n" + "".join(lines))


class Browser:
    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str) -> tuple[int, str]:
        try:
            with self.opener.open(self.base + path, timeout=30) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def login(self, username: str, password: str) -> None:
        landed = self.submit_login("/admin/login/?next=/admin/", username, password)
        assert landed.endswith("/admin/"), "admin login failed"

    def submit_login(self, page: str, username: str, password: str) -> str:
        """Fill in the login form at ``page`` (its ``next`` in the query) as a browser
        does; the URL the browser lands on."""
        status, _ = self.get(page)
        assert status == 200, page
        token = next(c.value for c in self.jar if c.name == "csrftoken")
        form = {"username": username, "password": password, "csrfmiddlewaretoken": token}
        request = urllib.request.Request(
            self.base + page,
            data=urllib.parse.urlencode(form).encode(),
            headers={"Referer": self.base + page},
        )
        with self.opener.open(request, timeout=30) as reply:
            return str(reply.geturl())


def test_demo_sets_up_plays_and_serves(served: tuple[str, str, Path]) -> None:
    base, output, var_dir = served
    match = PASSWORD.search(output)
    assert match, output
    assert "Played 50 turns through AgentSquad" in output
    assert f"{base}/admin/" in output and f"{base}/api/docs/" in output

    browser = Browser(base)
    status, _ = browser.get("/admin/squad_memory/slot/")
    assert status == 200 and "login" in browser.opener.open(base + "/admin/").geturl()
    browser.login("admin", match.group(1))
    status, page = browser.get("/admin/squad_memory/slot/")
    assert status == 200 and "travel-agent" in page and "tech-agent" in page
    status, body = browser.get("/api/slots/")
    assert status == 200 and isinstance(json.loads(body), (dict, list))
    status, _ = browser.get("/api/docs/")
    assert status == 200
    # The API's login link it prints lands on the API (not on /accounts/profile/, a 404).
    login = re.search(r"\(log in at (\S+), or use the token below\)", output)
    assert login and login[1] == f"{base}/api-auth/login/?next=/api/", output
    landed = Browser(base).submit_login(login[1].removeprefix(base), "admin", match.group(1))
    assert landed == f"{base}/api/"
    # The summary taking over, and the slot page it names, which shows it.
    took_over = TOOK_OVER.search(output)
    assert took_over, output
    see = re.search(
        rf"See it: {re.escape(base)}(/admin/squad_memory/slot/\d+/change/)$", output, re.M
    )
    assert see, output
    status, page = browser.get(see[1])
    assert status == 200 and "travel-agent" in page and "Summary, covering raw messages" in page

    script = json.loads(FIXTURE.read_text())
    with sqlite3.connect(var_dir / "db.sqlite3") as db:
        for agent in ("travel-agent", "tech-agent"):
            rows = db.execute(
                "SELECT m.content FROM squad_memory_message m JOIN squad_memory_slot s "
                "ON m.slot_id = s.id WHERE s.agent_id = ? AND m.role = 'user' ORDER BY m.seq",
                (agent,),
            ).fetchall()
            expected = [t["user"] for t in script["turns"] if t["agent"] == agent]
            assert [json.loads(r[0])[0]["text"] for r in rows] == expected  # routed right
        summary, active = db.execute(
            "SELECT summary, active FROM squad_memory_slot WHERE agent_id = 'travel-agent'"
        ).fetchone()
        assert active and json.loads(summary)[0]["content"][0]["text"].startswith(
            "[Summary] (extractive, offline)"
        )
        outcomes = db.execute("SELECT outcome FROM squad_memory_compression").fetchall()
        assert ("applied",) in outcomes

    # The two API commands it prints work as printed: the sessions list, then a post.
    listed = subprocess.run(["bash", "-c", API_COMMAND["list"].search(output)[1]], **SHELL)
    sessions = json.loads(listed.stdout)["results"]
    assert [(s["user_id"], s["session_id"]) for s in sessions] == [("demo-user", "demo-session")]
    posted = subprocess.run(["bash", "-c", API_COMMAND["post"].search(output)[1]], **SHELL)
    stored = json.loads(posted.stdout)
    assert not stored["skipped"] and stored["stored"][0]["role"] == "user", posted.stdout

    again = run_demo(var_dir, "--reset-password")
    assert "already stored" in again and "--replay" in again
    new = PASSWORD.search(again)
    assert new and new.group(1) != match.group(1)
    Browser(base).login("admin", new.group(1))


TOOK_OVER = re.compile(r"^A summary took over at turn (\d+): from then on (\S+) was given", re.M)

API_COMMAND = {
    "list": re.compile(r"List the sessions: +(curl .+)$", re.M),
    "post": re.compile(r"Post a message: +(curl .+)$", re.M),
}
SHELL: dict[str, Any] = {"capture_output": True, "text": True, "timeout": 60, "check": True}
PRINTED = re.compile(r"Run `([^`]+)`|Export: +(.+)$", re.M)


def fresh_shell(command: str, var_dir: Path) -> subprocess.CompletedProcess[str]:
    """``command`` pasted into a new terminal in the checkout: no virtualenv, a bare PATH
    (where ``python`` has no Django, if there is one at all), none of the test's variables."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(var_dir), "LANG": "C.UTF-8"}
    return subprocess.run(
        ["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )


def test_the_demo_says_its_port_is_taken_before_anything_else(tmp_path: Path) -> None:
    """A port another process listens on is the first thing said, with how to move it: no
    migration, admin, token or curl line before the failure."""

    def demo(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "manage.py", "demo", "--addrport", f"127.0.0.1:{port}"]
        return subprocess.run(
            [*command, *args],
            cwd=ROOT,
            env=demo_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
        )

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = demo()
        checked = demo("--check-port")  # what make demo runs first
    for run in (done, checked):
        assert run.returncode != 0 and run.stdout == "", run.stdout
        assert f"Cannot serve on 127.0.0.1:{port}" in run.stderr, run.stderr
        assert f"--addrport {port + 1}" in run.stderr and "DEMO_ARGS" in run.stderr
    assert not (tmp_path / "db.sqlite3").exists()  # not migrated
    free = demo("--check-port")
    assert free.returncode == 0 and free.stdout == "", free.stderr
    assert not (tmp_path / "db.sqlite3").exists()  # checked the port, and nothing else


def test_the_commands_the_demo_prints_work_as_printed(tmp_path: Path) -> None:
    """Run twice on a port alone (``--addrport 9123`` serves on 127.0.0.1:9123, as runserver
    reads it): the second run says how to get a new password, with that address; the hint
    and the export command work as printed, in a fresh shell."""
    port = str(free_port())
    first = run_demo(tmp_path, "--addrport", port)
    again = run_demo(tmp_path, "--addrport", port)  # the admin exists now
    base = f"http://127.0.0.1:{port}"
    printed = [a or b for a, b in PRINTED.findall(first + again)]
    reset = next(c for c in printed if "--reset-password" in c)
    export = next(c for c in printed if "squad_memory_export" in c)
    assert reset.endswith(f"--addrport {port}"), reset
    assert f"`{reset}` to get a new one, then log in at {base}/admin/." in again
    assert "http://127.0.0.1:8000" not in again and f"http://{port}" not in again
    assert str(tmp_path) in export and "manage.py" in export and not export.startswith("python")

    done = fresh_shell(reset, tmp_path)
    assert done.returncode == 0, done.stderr
    new = PASSWORD.search(done.stdout)
    old = PASSWORD.search(first)
    assert new and old and new.group(1) != old.group(1)
    assert f"Admin:     {base}/admin/" in done.stdout and "http://127.0.0.1:8000" not in done.stdout
    assert "Quit the server" not in done.stdout  # --no-serve: it does not take the port

    done = fresh_shell(export, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == 100 and {line["session_id"] for line in lines} == {"demo-session"}


@pytest.fixture
def close_worker_connections() -> Iterator[None]:
    """Close the connection the async storage methods opened in their worker thread."""
    yield
    from asgiref.sync import sync_to_async
    from django.db import connections

    asyncio.run(sync_to_async(connections.close_all)())


@pytest.mark.django_db(transaction=True)  # the demo runs async code on other threads
@pytest.mark.usefixtures("close_worker_connections")
def test_demo_in_process_keeps_an_existing_password() -> None:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from squad_memory.models import Slot

    get_user_model().objects.create_superuser("admin", "", "chosen-by-the-user")
    out = io.StringIO()
    call_command("demo", "--no-serve", stdout=out)
    text = out.getvalue()
    assert "already exists; its password is unchanged" in text and not PASSWORD.search(text)
    assert get_user_model().objects.get().check_password("chosen-by-the-user")
    assert "Played 50 turns" in text
    assert Slot.objects.get(agent_id="travel-agent").active
    assert Slot.objects.get(agent_id="tech-agent").last_seq == 40
    out = io.StringIO()
    call_command("demo", "--no-serve", stdout=out)
    assert "already stored" in out.getvalue()


def first_turn_given_a_summary(var_dir: Path) -> tuple[int, str]:
    """The turn (from 1) whose scripted reply first says a summary was in its context."""
    with sqlite3.connect(var_dir / "db.sqlite3") as db:
        rows = db.execute(
            "SELECT s.agent_id, m.content FROM squad_memory_message m JOIN squad_memory_slot s "
            "ON m.slot_id = s.id WHERE m.role = 'assistant' ORDER BY m.id"
        ).fetchall()
    replies = [(agent, json.loads(content)[0]["text"]) for agent, content in rows]
    return next((n, a) for n, (a, text) in enumerate(replies, 1) if "incl. a summary" in text)


def test_the_demo_shows_the_turn_a_summary_took_over(tmp_path: Path) -> None:
    """Inline mode (the demo's default outside make): the saves compress, and the output
    names the first turn whose agent was given the summary, as the transcript shows it."""
    output = run_demo(tmp_path)
    took_over = TOOK_OVER.search(output)
    assert took_over, output
    assert (int(took_over[1]), took_over[2]) == first_turn_given_a_summary(tmp_path)
    with sqlite3.connect(tmp_path / "db.sqlite3") as db:
        query = "SELECT id FROM squad_memory_slot WHERE agent_id = ?"
        (pk,) = db.execute(query, (took_over[2],)).fetchone()
    assert f"See it: http://127.0.0.1:8000/admin/squad_memory/slot/{pk}/change/" in output


def test_with_no_worker_it_waits_a_bounded_time_then_says_where_to_look(tmp_path: Path) -> None:
    """Tasks mode with no db_worker running: the compression stays queued; the demo waits
    --wait seconds at most, then names the slot's admin page, on the address it serves."""
    port = free_port()
    started = time.monotonic()
    output = run_demo(tmp_path, "--addrport", str(port), "--wait", "1.5", SQUAD_MEMORY_MODE="tasks")
    assert time.monotonic() - started < 60
    assert "Waiting up to 1.5 s for the db_worker" in output, output
    with sqlite3.connect(tmp_path / "db.sqlite3") as db:
        pending = db.execute(
            "SELECT id, agent_id FROM squad_memory_slot WHERE pending_since IS NOT NULL"
        ).fetchall()
        assert not db.execute("SELECT 1 FROM squad_memory_compression").fetchall()
    ((pk, agent),) = pending
    page = f"http://127.0.0.1:{port}/admin/squad_memory/slot/{pk}/change/"  # runserver's reading
    assert f"No summary yet: {agent}'s buffer holds all its" in output
    assert "the db_worker has not finished compressing it yet" in output
    assert (
        f"admin page (the buffer beside the raw history, and the compression log): {page}" in output
    )
    assert not TOOK_OVER.search(output) and "A summary" not in output

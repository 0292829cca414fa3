"""``manage.py demo``: check the port, migrate, create an admin, play a conversation, show the
summary taking over, serve on 127.0.0.1:8000."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.management.commands.runserver import naiveip_re
from django.db import connection
from django.urls import reverse

from project.demo import play
from squad_memory.conf import app_settings
from squad_memory.models import Compression, Slot

#: The demo settings read these variables: a command printed for a new shell carries the
#: ones set here, so it works on the same database, broker and summarizer.
SETUP_PREFIXES = ("DATABASE_", "SQUAD_MEMORY_", "CELERY_")
SECRET_WORDS = ("KEY", "SECRET", "PASSWORD", "TOKEN")
WORKER = ("-m", "celery", "-A", "project", "worker", "-l", "info")
#: What runs a compression, by mode (tasks, celery) or by its log's trigger.
RUN_BY = {"tasks": "the db_worker", "celery": "a Celery worker", "save": "a save"}
#: Seconds between two looks for the worker's first compression.
POLL = 0.25


def shell_command(*args: str) -> str:
    """This interpreter running ``args``, as a line that works pasted into a new shell in
    this directory: a new shell's ``python`` may not have Django, nor this setup's variables
    (a secret one is printed as ``NAME="$NAME"``, to export there)."""
    names = sorted(n for n in os.environ if n.startswith(SETUP_PREFIXES))
    setup = [
        f'{n}="${n}"' if any(w in n for w in SECRET_WORDS) else f"{n}={shlex.quote(os.environ[n])}"
        for n in names
    ]
    return " ".join([*setup, shlex.join([_here(Path(sys.executable)), *args])])


def manage_command(*args: str) -> str:
    """``manage.py args``, as :func:`shell_command` prints it."""
    return shell_command(_here(Path(settings.BASE_DIR) / "manage.py"), *args)


def served_at(addrport: str) -> str:
    """The URL a browser on this machine opens for ``runserver addrport``, read as runserver
    reads it: a port alone is 127.0.0.1's; every interface (0, 0.0.0.0, [::]) is opened
    through 127.0.0.1 or localhost, the names the demo's ``ALLOWED_HOSTS`` accept."""
    match = re.match(naiveip_re, addrport)
    if match is None:
        raise CommandError(f"--addrport {addrport!r} is not a port or an address:port pair.")
    addr, port = match["addr"], match["port"]
    host = {None: "127.0.0.1", "0": "127.0.0.1", "0.0.0.0": "127.0.0.1", "[::]": "localhost"}
    return f"http://{host.get(addr, addr)}:{port}"


def port_problem(addrport: str) -> str | None:
    """Why runserver could not listen on ``addrport`` (another process listens there), or
    None. Asked before anything is set up, so a taken port is the first thing said."""
    match = re.match(naiveip_re, addrport)
    if match is None:
        return f"--addrport {addrport!r} is not a port or an address:port pair."
    addr = (match["addr"] or "127.0.0.1").strip("[]")
    port = int(match["port"])
    try:
        (family, kind, proto, _, address), *_ = socket.getaddrinfo(
            "0.0.0.0" if addr == "0" else addr, port, type=socket.SOCK_STREAM
        )
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as runserver's
            probe.bind(address)
    except OSError as exc:
        return (
            f"Cannot serve on {addrport}: {exc.strerror or exc} (another server, or a demo "
            f"still running?). Serve on another port: `manage.py demo --addrport {port + 1}`, "
            f'or with make: make demo DEMO_ARGS="--addrport {port + 1}".'
        )
    return None


def _here(path: Path) -> str:
    return os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)


class Command(BaseCommand):
    help = (
        "Run the squad_memory demo: migrate the database, create an admin user with a generated "
        "password, play a scripted conversation through a real AgentSquad orchestrator into "
        "squad_memory's storage, then serve the admin and the API."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--no-serve", action="store_true", help="set up and play, then exit")
        parser.add_argument("--addrport", default="127.0.0.1:8000", help="where to serve")
        parser.add_argument(
            "--check-port",
            action="store_true",
            help="only check that --addrport is free (unless --no-serve), then exit",
        )
        parser.add_argument("--username", default="admin", help="admin user name")
        parser.add_argument(
            "--reset-password",
            action="store_true",
            help="give an existing admin user a new generated password",
        )
        parser.add_argument(
            "--replay", action="store_true", help="play the conversation again, into a new session"
        )
        parser.add_argument(
            "--wait",
            type=float,
            default=30.0,
            metavar="SECONDS",
            help="in tasks and Celery mode, wait this long at most for the worker's first "
            "compression (0: do not wait)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        addrport = options["addrport"]
        base = served_at(addrport)
        if not options["no_serve"] and (problem := port_problem(addrport)):
            raise CommandError(problem)
        if options["check_port"]:
            return
        self._describe_setup()
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write("Database migrated.")
        self._admin(options["username"], options["reset_password"], addrport, base)
        session, turns = self._play(options["replay"])
        self._summary(session, turns, base, options["wait"])
        self._where_to_look(base, options["username"], session)
        if settings.API:
            self._api_commands(base, options["username"], session)
        if not options["no_serve"]:
            call_command("runserver", addrport, use_reloader=False)

    def _describe_setup(self) -> None:
        db = settings.DATABASES["default"]
        name = db["NAME"] if connection.vendor == "sqlite" else f"{db.get('HOST')}/{db['NAME']}"
        self.stdout.write(f"Database: {connection.vendor} ({name})")
        self.stdout.write(
            f"Mode: {app_settings.mode}; summarizer: {app_settings.raw('SUMMARIZER')}"
        )
        if app_settings.mode == "celery":
            self.stdout.write(
                f"Celery broker: {getattr(settings, 'CELERY_BROKER_URL', '?')}. Compressions run "
                f"in a worker: start one with `{shell_command(*WORKER)}`."
            )

    def _admin(self, username: str, reset: bool, addrport: str, base: str) -> None:
        status, password = play.ensure_admin(username, reset)
        if status == "exists":
            command = manage_command(
                "demo", "--reset-password", "--no-serve", "--addrport", addrport
            )
            self.stdout.write(
                f"Admin user {username!r} already exists; its password is unchanged. "
                f"Run `{command}` to get a new one, then log in at {base}/admin/."
            )
            return
        verb = "Created admin user" if status == "created" else "New password for"
        self.stdout.write(
            self.style.SUCCESS(f"{verb} {username!r}; password (shown once): {password}")
        )

    def _play(self, replay: bool) -> tuple[str, list[play.Turn]]:
        data = play.load()
        session = data["session_id"]
        if play.session_exists(data["user_id"], session):
            if not replay:
                self.stdout.write(
                    f"The demo conversation is already stored (session {session!r}); "
                    f"use --replay to play it again into a new session."
                )
                return session, []
            session = f"{session}-{int(time.time())}"
        started = time.monotonic()
        try:
            turns = play.play(data, session)
        except Exception as exc:
            raise CommandError(f"Playing the demo conversation failed: {exc}") from exc
        seconds = time.monotonic() - started
        self.stdout.write(
            f"Played {len(turns)} turns through AgentSquad in {seconds:.1f} s "
            f"(user {data['user_id']!r}, session {session!r})."
        )
        return session, turns

    def _summary(self, session: str, turns: list[play.Turn], base: str, wait: float) -> None:
        """Show the summary taking over: the first turn whose agent was given one, or the
        worker's first compression (waited for, ``wait`` seconds at most), or where to watch
        for it (the slot's admin page)."""
        user = play.load()["user_id"]
        first = play.first_compression(user, session)
        watch = play.slot_to_watch(user, session)
        worker = RUN_BY.get(app_settings.mode, "its worker")
        if first is None and watch is not None and watch.pending_since is not None and wait > 0:
            self.stdout.write(
                f"Waiting up to {wait:g} s for {worker} to compress {watch.agent_id}'s "
                "buffer (--wait 0 skips this) ..."
            )
            first = self._wait_for_compression(user, session, wait)
        for line in play.slot_report(user, session):
            self.stdout.write(line)
        if first is None:
            if watch is None:
                return
            page = base + reverse("admin:squad_memory_slot_change", args=[watch.pk])
            queued = (
                f"{worker} has not finished compressing it yet"
                if watch.pending_since is not None
                else "no compression has run yet"
            )
            self.stdout.write(
                f"No summary yet: {watch.agent_id}'s buffer holds all its "
                f"{watch.buffer_length} messages; {queued}. Watch the summary take over on its "
                f"admin page (the buffer beside the raw history, and the compression log): "
                f"{page}"
            )
            return
        summarized = play.first_summarized_turn(turns)
        agent = summarized[1].agent if summarized else None
        slot = Slot.objects.filter(user_id=user, session_id=session, agent_id=agent).first()
        slot = slot or Slot.objects.get(pk=first.slot_id)
        page = base + reverse("admin:squad_memory_slot_change", args=[slot.pk])
        instead = f"its summary and the newest messages, not all {slot.message_count} messages"
        if summarized is not None:
            number, turn = summarized
            note = turn.reply[turn.reply.rfind("(context:") :]
            took_over = (
                f"A summary took over at turn {number}: from then on {slot.agent_id} was given "
                f"its summary and the newest messages instead of the whole conversation {note}."
            )
        elif turns:
            by = RUN_BY.get(first.trigger, "a compression")
            took_over = (
                f"A summary took over after the last turn: {by} compressed {slot.agent_id}'s "
                f"buffer, so its next turn is given {instead}."
            )
        else:
            took_over = (
                f"A summary has taken over {slot.agent_id}'s buffer: its next turn is given "
                f"{instead}."
            )
        self.stdout.write(
            f"{took_over}\n"
            f"  {slot.agent_id} now: {slot.message_count} raw messages, a buffer of "
            f"{slot.buffer_length} ({slot.buffer_tokens} tokens): {slot.summary_length} "
            f"messages summarizing #1..#{slot.covered_seq}, "
            f"{slot.last_seq - slot.covered_seq} saved since.\n"
            f"  See it: {page}"
        )

    def _wait_for_compression(self, user: str, session: str, wait: float) -> Compression | None:
        deadline = time.monotonic() + wait
        while (first := play.first_compression(user, session)) is None:
            if time.monotonic() >= deadline:
                return None
            time.sleep(POLL)
        return first

    def _where_to_look(self, base: str, username: str, session: str) -> None:
        self.stdout.write(
            "\nWhere to look:\n"
            f"  Admin:     {base}/admin/  (user {username!r})\n"
            f"  Slots:     {base}{reverse('admin:squad_memory_slot_changelist')}\n"
            f"  API:       {base}/api/sessions/  (log in at {base}/api-auth/login/?next=/api/, "
            "or use the token below)\n"
            f"  API docs:  {base}/api/docs/\n"
            f"  Export:    {manage_command('squad_memory_export', '--session', session)}\n"
        )

    def _api_commands(self, base: str, username: str, session: str) -> None:
        """The admin's API token, and two API requests that work as printed: the sessions
        list (staff see every user's) and a post of a message into the demo's conversation."""
        from rest_framework.authtoken.models import Token

        token, _ = Token.objects.get_or_create(user=play.admin(username))
        data = play.load()
        agent = play.last_agent(data["user_id"], session)
        body = {
            "user_id": data["user_id"],
            "session_id": session,
            "agent_id": agent,
            "message": {"role": "user", "content": [{"text": "And what about the weekend?"}]},
        }
        curl = ["curl", "-s", "-H", f"Authorization: Token {token.key}"]
        api = f"{base}/api"
        listing = shlex.join([*curl, f"{api}/sessions/"])
        json_body = ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
        posting = shlex.join([*curl, "-X", "POST", *json_body, f"{api}/slots/messages/"])
        self.stdout.write(
            f"API token of {username!r}: {token.key}\n"
            f"  List the sessions: {listing}\n"
            f"  Post a message:    {posting}\n"
        )

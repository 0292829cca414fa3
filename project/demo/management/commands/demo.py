"""``manage.py demo``: migrate, create an admin, play a conversation, serve on 127.0.0.1:8000."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from project.demo import play
from squad_memory.conf import app_settings

#: The demo settings read these variables: a command printed for a new shell carries the
#: ones set here, so it works on the same database, broker and summarizer.
SETUP_PREFIXES = ("DATABASE_", "SQUAD_MEMORY_", "CELERY_")
SECRET_WORDS = ("KEY", "SECRET", "PASSWORD", "TOKEN")
WORKER = ("-m", "celery", "-A", "project", "worker", "-l", "info")


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
        parser.add_argument("--username", default="admin", help="admin user name")
        parser.add_argument(
            "--reset-password",
            action="store_true",
            help="give an existing admin user a new generated password",
        )
        parser.add_argument(
            "--replay", action="store_true", help="play the conversation again, into a new session"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self._describe_setup()
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write("Database migrated.")
        self._admin(options["username"], options["reset_password"])
        session = self._play(options["replay"])
        self._where_to_look(options["addrport"], options["username"], session)
        if settings.API:
            self._api_commands(options["addrport"], options["username"], session)
        if not options["no_serve"]:
            call_command("runserver", options["addrport"], use_reloader=False)

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

    def _admin(self, username: str, reset: bool) -> None:
        status, password = play.ensure_admin(username, reset)
        if status == "exists":
            command = manage_command("demo", "--reset-password", "--no-serve")
            self.stdout.write(
                f"Admin user {username!r} already exists; its password is unchanged. "
                f"Run `{command}` to get a new one."
            )
            return
        verb = "Created admin user" if status == "created" else "New password for"
        self.stdout.write(
            self.style.SUCCESS(f"{verb} {username!r}; password (shown once): {password}")
        )

    def _play(self, replay: bool) -> str:
        data = play.load()
        session = data["session_id"]
        if play.session_exists(data["user_id"], session):
            if not replay:
                self.stdout.write(
                    f"The demo conversation is already stored (session {session!r}); "
                    f"use --replay to play it again into a new session."
                )
                return session
            session = f"{session}-{int(time.time())}"
        started = time.monotonic()
        try:
            turns = play.play(data, session)
        except Exception as exc:
            raise CommandError(f"Playing the demo conversation failed: {exc}") from exc
        seconds = time.monotonic() - started
        self.stdout.write(
            f"Played {len(turns)} turns through AgentSquad in {seconds:.1f} s "
            f"(user {data['user_id']!r}, session {session!r}):"
        )
        for line in play.slot_report(data["user_id"], session):
            self.stdout.write(line)
        return session

    def _where_to_look(self, addrport: str, username: str, session: str) -> None:
        base = f"http://{addrport}"
        self.stdout.write(
            "\nWhere to look:\n"
            f"  Admin:     {base}/admin/  (user {username!r})\n"
            f"  Slots:     {base}/admin/squad_memory/slot/\n"
            f"  API:       {base}/api/sessions/  (log in at {base}/api-auth/login/, or use the "
            "token below)\n"
            f"  API docs:  {base}/api/docs/\n"
            f"  Export:    {manage_command('squad_memory_export', '--session', session)}\n"
        )

    def _api_commands(self, addrport: str, username: str, session: str) -> None:
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
        api = f"http://{addrport}/api"
        listing = shlex.join([*curl, f"{api}/sessions/"])
        json_body = ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
        posting = shlex.join([*curl, "-X", "POST", *json_body, f"{api}/slots/messages/"])
        self.stdout.write(
            f"API token of {username!r}: {token.key}\n"
            f"  List the sessions: {listing}\n"
            f"  Post a message:    {posting}\n"
        )

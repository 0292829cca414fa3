"""``manage.py squad_memory_forget``: erase a user's conversations."""

from __future__ import annotations

import getpass
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from squad_memory.operations.forgetting import BATCH_SIZE, ForgetReport, forget


class Command(BaseCommand):
    help = (
        "Delete every slot of a user (optionally one session or one agent) with its raw "
        "messages, summaries, compression log and stored idempotency keys, in batches. "
        "Slots of other users are never touched, whatever ids they share."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--user", required=True, help="The user_id to forget.")
        parser.add_argument("--session", default=None, help="Only this session_id.")
        parser.add_argument("--agent", default=None, help="Only this agent_id.")
        parser.add_argument(
            "--namespace", default=None, help="Only this namespace (default: every namespace)."
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )
        parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)

    def handle(self, *args: Any, **options: Any) -> None:
        report = forget(
            options["user"],
            options["session"],
            options["agent"],
            namespace=options["namespace"],
            dry_run=options["dry_run"],
            batch_size=options["batch_size"],
            actor=f"command squad_memory_forget (os user {_os_user()})",
            progress=lambda r: self.stderr.write(progress_line(r)),
        )
        write_counts(self, report)


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def progress_line(report: ForgetReport) -> str:
    verb = "counted" if report.dry_run else "deleted"
    return f"... {report.slots} slot(s), {report.messages} message(s) {verb}"


def write_counts(command: BaseCommand, report: ForgetReport) -> None:
    """Print the per-table counts of a deletion (the last lines of the output)."""
    command.stdout.write("Would delete (dry run):" if report.dry_run else "Deleted:")
    for table, count in report.tables().items():
        command.stdout.write(f"  {table}: {count}")

"""``manage.py squad_memory_purge``: apply the retention policy (``RETAIN_DAYS``)."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from squad_memory.exceptions import ConfigurationError
from squad_memory.management.commands.squad_memory_forget import progress_line, write_counts
from squad_memory.operations.forgetting import purge


class Command(BaseCommand):
    help = (
        "Delete the slots idle for longer than SQUAD_MEMORY['RETAIN_DAYS'] days, with their "
        "raw messages, summaries, compression log and stored Idempotency-Key answers, in "
        "batches. Does nothing when RETAIN_DAYS is unset (keep forever)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = purge(
                dry_run=options["dry_run"],
                actor="command squad_memory_purge",
                progress=lambda r: self.stderr.write(progress_line(r)),
            )
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from None
        if report is None:
            self.stdout.write("RETAIN_DAYS is not set: every conversation is kept.")
            return
        write_counts(self, report)

"""``manage.py squad_memory_purge``: apply the retention policy (``RETAIN_DAYS``)."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from squad_memory.conf import app_settings
from squad_memory.forgetting import purge_idle
from squad_memory.management.commands.squad_memory_forget import progress_line, write_counts


class Command(BaseCommand):
    help = (
        "Delete the slots idle for longer than SQUAD_MEMORY['RETAIN_DAYS'] days, with their "
        "raw messages, summaries and compression log, in batches. Does nothing when "
        "RETAIN_DAYS is unset (keep forever)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        days = app_settings.retain_days
        if days is None:
            self.stdout.write("RETAIN_DAYS is not set: every conversation is kept.")
            return
        report = purge_idle(
            days,
            dry_run=options["dry_run"],
            actor="command squad_memory_purge",
            progress=lambda r: self.stderr.write(progress_line(r)),
        )
        write_counts(self, report)

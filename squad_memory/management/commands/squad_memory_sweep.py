"""``manage.py squad_memory_sweep``: what a project runs every few minutes."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from squad_memory.exceptions import ConfigurationError
from squad_memory.operations.housekeeping import sweep


class Command(BaseCommand):
    help = (
        "Compress the slots left over the threshold with no compression pending (the broker "
        "was down, a worker died, an attempt failed: enqueued in Celery mode, run here in "
        "inline mode), delete expired Idempotency-Key answers, and apply RETAIN_DAYS. "
        "Nothing else deletes old data: schedule it every few minutes, from cron "
        "(*/5 * * * * cd /srv/app && python manage.py squad_memory_sweep) or as a Celery "
        "beat entry of the task squad_memory.tasks.sweep."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--activate",
            action="store_true",
            help="Also activate the buffer of inactive slots whose history is over the threshold.",
        )
        parser.add_argument(
            "--limit", type=int, default=None, help="Handle at most this many slots per kind."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = sweep(activate=options["activate"], limit=options["limit"])
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"{report.enqueued} slot(s) over the threshold compressed or enqueued; "
            f"{report.activated} inactive slot(s) activated; {report.waiting} compression(s) "
            f"still queued after PENDING_TIMEOUT; {report.pruned} finished task row(s) deleted."
        )

"""``manage.py squad_memory_sweep``: compress slots left over the threshold."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from squad_memory.sweeping import sweep


class Command(BaseCommand):
    help = (
        "Find slots whose buffer is over the threshold with no compression pending (the "
        "broker was down, a worker died, the last attempt failed) and compress them: "
        "enqueued for a worker in Celery mode, right here in inline mode."
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
        report = sweep(activate=options["activate"], limit=options["limit"])
        self.stdout.write(
            f"{report.enqueued} slot(s) over the threshold compressed or enqueued; "
            f"{report.activated} inactive slot(s) activated."
        )

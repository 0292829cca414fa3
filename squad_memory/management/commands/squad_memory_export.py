"""``manage.py squad_memory_export``: the raw history as JSONL (the import format)."""

from __future__ import annotations

import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from squad_memory.models import DJANGO_NAMESPACE
from squad_memory.operations import transfer


class Command(BaseCommand):
    help = (
        "Export the raw history (every stored message, trimmed ones included) as JSONL, in the "
        "format squad_memory_import reads, slot by slot in order."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("-o", "--output", help="file to write (default: stdout)")
        parser.add_argument("--user", dest="user_id", help="only this user_id")
        parser.add_argument("--session", dest="session_id", help="only this session_id")
        parser.add_argument("--agent", dest="agent_id", help="only this agent_id")
        parser.add_argument(
            "--namespace",
            default=DJANGO_NAMESPACE,
            help="slots of another store's namespace (default: the Django store)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        filters = {k: options[k] for k in ("user_id", "session_id", "agent_id", "namespace")}
        if options["output"]:
            with open(options["output"], "w", encoding="utf-8") as out:
                count = transfer.export(out, **filters)
            self.stderr.write(f"Exported {count} messages to {options['output']}.")
        else:
            try:
                transfer.export(self.stdout, **filters)
                self.stdout.flush()
            except BrokenPipeError:
                # The reader stopped early (``| head``): end quietly, like cat, and keep
                # Python from failing once more as it flushes stdout on the way out.
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                sys.exit(1)

"""``manage.py squad_memory_import FILE.jsonl``: bring existing conversations in."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from squad_memory.exceptions import ImportFileError
from squad_memory.operations import transfer


class Command(BaseCommand):
    help = (
        "Import conversations from a JSONL file, one message per line: "
        '{"user_id", "session_id", "agent_id", "role", "content"[, "timestamp", "citations"]}. '
        "Every line is validated first; with any bad line nothing is stored and the bad lines "
        "are listed with their numbers. Messages of a slot are appended in file order."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="path of the JSONL file")
        parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
        parser.add_argument(
            "--progress-every",
            type=int,
            default=1000,
            metavar="N",
            help="report progress every N lines (default 1000)",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=1000,
            metavar="N",
            help="messages inserted per statement (default 1000)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        progress = None if options["quiet"] else self._progress
        every = max(options["progress_every"], 1)
        try:
            report = transfer.import_file(
                options["file"], progress, every, max(options["batch_size"], 1)
            )
        except FileNotFoundError as exc:
            raise CommandError(f"No such file: {options['file']}") from exc
        except ImportFileError as exc:
            raise CommandError(str(exc)) from exc
        messages, slots = report.messages, len(report.slots)
        self.stdout.write(
            f"Imported {messages} message{'s' * (messages != 1)} "
            f"into {slots} slot{'s' * (slots != 1)}."
        )

    def _progress(self, text: str) -> None:
        self.stderr.write(text)
        self.stderr.flush()

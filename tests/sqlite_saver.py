"""Saves one message to a SQLite file database (``DATABASE_URL``) for tests/test_sqlite_locks.py.

usage: python -m tests.sqlite_saver <transaction_mode or ""> <timeout seconds>

Migrates, prints ``ready``, waits for a line on stdin (the test takes the write lock
meanwhile), saves, then prints ``saved <conversation length>``. Logs go to stderr.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    from django.conf import settings

    mode, timeout = sys.argv[1], float(sys.argv[2])
    options: dict[str, object] = {"timeout": timeout}  # no WAL: startproject's journal mode
    if mode:
        options["transaction_mode"] = mode
    settings.DATABASES["default"]["OPTIONS"] = options

    import django

    django.setup()
    from agent_squad.types import ConversationMessage
    from django.core.management import call_command

    from squad_memory.storage import DjangoChatStorage

    call_command("migrate", verbosity=0)
    print("ready", flush=True)
    sys.stdin.readline()
    out = DjangoChatStorage().save_chat_message_sync("u", "s", "a", ConversationMessage("user", [{"text": "hi"}]))
    print(f"saved {len(out)}", flush=True)


if __name__ == "__main__":
    main()

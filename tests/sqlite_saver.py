"""Saves one message to a SQLite file database (``DATABASE_URL``) for tests/test_sqlite_locks.py.

usage: python -m tests.sqlite_saver <transaction_mode or ""> <timeout seconds> [async]

Migrates, prints ``ready``, waits for a line on stdin (the test takes the write lock
meanwhile), saves, then prints ``saved <conversation length>``. Logs go to stderr.

With ``async``: the demo project's WAL options (transaction_mode and timeout as
given), a first message saved synchronously before ``ready`` (the slot exists), then the save through the async API in one
``asyncio.run``; it prints ``saved <conversation length> <time.time() when done>``,
and the ``squad_memory`` logger writes DEBUG lines to stderr.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    from django.conf import settings

    mode, timeout = sys.argv[1], float(sys.argv[2])
    on_loop = sys.argv[3:] == ["async"]
    options: dict[str, object] = {"timeout": timeout}  # no WAL: startproject's journal mode
    if on_loop:  # the demo's journal mode: WAL, as project/settings.py sets it
        options["init_command"] = settings.DATABASES["default"]["OPTIONS"]["init_command"]
    if mode:
        options["transaction_mode"] = mode
    settings.DATABASES["default"]["OPTIONS"] = options

    import django

    django.setup()
    from agent_squad.types import ConversationMessage
    from django.core.management import call_command

    from squad_memory.storage import DjangoChatStorage

    call_command("migrate", verbosity=0)
    store = DjangoChatStorage()
    if on_loop:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
        squad_logger = logging.getLogger("squad_memory")
        squad_logger.handlers = [handler]
        squad_logger.setLevel(logging.DEBUG)
        squad_logger.propagate = False
        store.save_chat_message_sync(
            "u", "s", "a", ConversationMessage("user", [{"text": "first"}])
        )
    print("ready", flush=True)
    sys.stdin.readline()
    if on_loop:
        message = ConversationMessage("assistant", [{"text": "second"}])
        out = asyncio.run(store.save_chat_message("u", "s", "a", message))
        print(f"saved {len(out)} {time.time()}", flush=True)
        return
    out = store.save_chat_message_sync("u", "s", "a", ConversationMessage("user", [{"text": "hi"}]))
    print(f"saved {len(out)}", flush=True)


if __name__ == "__main__":
    main()

"""A writer process for the concurrency tests: ``python -m tests.writer_process NAME MODE COUNT``.

Connects to the database named by DATABASE_URL and saves COUNT messages (tagged
with NAME) to one slot, as batch saves of pairs or as single saves.
"""

from __future__ import annotations

import os
import sys


def main(name: str, mode: str, count: int) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from agent_squad.types import ConversationMessage

    from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage

    store = SummarizingChatStorage(
        DjangoChatStorage(), "tests.summarizers.fold", int(os.environ.get("TRIGGER_AT", "5")), 2
    )
    roles = ("user", "assistant")
    if mode == "batch":
        for i in range(0, count, 2):
            store.save_chat_messages_sync("u", "s", "shared", [
                ConversationMessage(roles[0], [{"text": f"{name}:{i}"}]),
                ConversationMessage(roles[1], [{"text": f"{name}:{i + 1}"}]),
            ])
    else:
        for i in range(count):
            message = ConversationMessage(roles[i % 2], [{"text": f"{name}:{i}"}])
            store.save_chat_message_sync("u", "s", "shared", message)
            if i % 10 == 0:
                store.fetch_chat_sync("u", "s", "shared")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))

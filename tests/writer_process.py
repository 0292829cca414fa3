"""A writer process for the concurrency tests: ``python -m tests.writer_process NAME MODE COUNT``.

Connects to the database named by DATABASE_URL and saves COUNT messages (tagged
with NAME) to one slot, as batch saves of pairs or as single saves. The modes
"async-batch" and "async-single" do the same through the async API, inside one
``asyncio.run``. The modes "returns" and "async-returns" save pairs to the slot
``returns`` of a plain ``DjangoChatStorage`` and print each conversation a save returned
(one JSON list of texts a line).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

ROLES = ("user", "assistant")


def message(name: str, i: int) -> Any:
    from agent_squad.types import ConversationMessage

    return ConversationMessage(ROLES[i % 2], [{"text": f"{name}:{i}"}])


def write(store: Any, name: str, mode: str, count: int) -> None:
    if mode == "batch":
        for i in range(0, count, 2):
            store.save_chat_messages_sync(
                "u", "s", "shared", [message(name, i), message(name, i + 1)]
            )
    else:
        for i in range(count):
            store.save_chat_message_sync("u", "s", "shared", message(name, i))
            if i % 10 == 0:
                store.fetch_chat_sync("u", "s", "shared")


async def write_async(store: Any, name: str, mode: str, count: int) -> None:
    if mode == "async-batch":
        for i in range(0, count, 2):
            await store.save_chat_messages(
                "u", "s", "shared", [message(name, i), message(name, i + 1)]
            )
    else:
        for i in range(count):
            await store.save_chat_message("u", "s", "shared", message(name, i))
            if i % 10 == 0:
                await store.fetch_chat("u", "s", "shared")


def returned(store: Any, name: str, mode: str, count: int) -> None:
    for i in range(0, count, 2):
        pair = [message(name, i), message(name, i + 1)]
        if mode == "async-returns":
            answer = asyncio.run(store.save_chat_messages("u", "s", "returns", pair))
        else:
            answer = store.save_chat_messages_sync("u", "s", "returns", pair)
        print(json.dumps([m.content[0]["text"] for m in answer]), flush=True)


def main(name: str, mode: str, count: int) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage

    if mode.endswith("returns"):
        returned(DjangoChatStorage(), name, mode, count)
        return

    store = SummarizingChatStorage(
        DjangoChatStorage(), "tests.summarizers.fold", int(os.environ.get("TRIGGER_AT", "5")), 2
    )
    if mode.startswith("async-"):
        asyncio.run(write_async(store, name, mode, count))
    else:
        write(store, name, mode, count)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))

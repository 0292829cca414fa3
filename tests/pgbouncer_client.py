"""A client process for the PgBouncer tests: ``python -m tests.pgbouncer_client AGENT TURNS``.

Runs as a deployment behind PgBouncer would (DATABASE_URL names PgBouncer,
``tests.pgbouncer_settings``): TURNS turns of the sync API and one of the async
API through ``squad_memory.get_storage()``, one save the role rule skips, then
prints the last fetched buffer's texts as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys


def main(agent: str, turns: int) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.pgbouncer_settings")
    import django

    django.setup()
    from agent_squad.types import ConversationMessage

    import squad_memory

    storage = squad_memory.get_storage()

    def message(role: str, text: str) -> ConversationMessage:
        return ConversationMessage(role=role, content=[{"text": text}])

    for i in range(turns):
        storage.save_chat_message_sync("u", "s", agent, message("user", f"q{i}"))
        storage.save_chat_message_sync("u", "s", agent, message("assistant", f"a{i}"))
        storage.fetch_chat_sync("u", "s", agent)
    storage.save_chat_message_sync("u", "s", agent, message("assistant", "skipped"))

    async def one_async_turn() -> list[ConversationMessage]:
        await storage.save_chat_message("u", "s", agent, message("user", f"q{turns}"))
        await storage.save_chat_message("u", "s", agent, message("assistant", f"a{turns}"))
        return list(await storage.fetch_chat("u", "s", agent))

    fetched = asyncio.run(one_async_turn())
    print(json.dumps([m.content[0]["text"] for m in fetched]))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))

"""A Celery task that calls squad_memory's async API in ``asyncio.run``, as a project's
task may; a worker imports it with ``-I tests.celery_async_tasks``.

``python -m tests.celery_async_tasks FIRST COUNT`` sends the saves FIRST..FIRST+COUNT-1
(on the broker of ``CELERY_BROKER_URL``).
"""

from __future__ import annotations

import asyncio
import os
import sys

from celery import shared_task

SLOT = ("u", "s", "celery-async")


@shared_task(name="tests.celery_async_tasks.save")
def save(i: int) -> int:
    from agent_squad.types import ConversationMessage

    from squad_memory.storage import DjangoChatStorage

    message = ConversationMessage(("user", "assistant")[i % 2], [{"text": f"m{i}"}])
    return len(asyncio.run(DjangoChatStorage().save_chat_message(*SLOT, message)))


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from project.celery import app

    first, count = int(sys.argv[1]), int(sys.argv[2])
    with app.connection_for_write() as connection:
        for i in range(first, first + count):
            save.apply_async(args=[i], connection=connection)

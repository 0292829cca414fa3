"""The other processes of the tasks-mode worker tests, on the database of ``DATABASE_URL``.

- ``python -m tests.tasks_site save WRITER PAIRS``: saves PAIRS user/assistant pairs to one
  slot through a tasks-mode ``SummarizingChatStorage``, fetching after each turn as an
  agent does; prints its pid and the slowest save and fetch as JSON.
- ``python -m tests.tasks_site state``: prints the slot, its compression log and the
  tasks of django-tasks-db as JSON.

Settings: ``tests.tasks_settings`` (the demo's, with ``SM_CLAIM_LEASE``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

SLOT = ("writers", "session", "agent")
SUMMARIZER = "tests.celery_summarizers.slow"


def save(writer: str, pairs: int) -> dict[str, Any]:
    from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
    from tests.conftest import msg

    store = SummarizingChatStorage(DjangoChatStorage(), SUMMARIZER, 2, 1, mode="tasks")
    saves, fetches = [], []
    for n in range(pairs):
        started = time.monotonic()
        store.save_chat_messages_sync(
            *SLOT, [msg("user", f"w{writer}-{n}-u"), msg("assistant", f"w{writer}-{n}-a")]
        )
        saves.append(time.monotonic() - started)
        started = time.monotonic()
        store.fetch_chat_sync(*SLOT)
        fetches.append(time.monotonic() - started)
        time.sleep(float(os.environ.get("SM_PAUSE", "0")))
    return {"pid": os.getpid(), "max_save": max(saves), "max_fetch": max(fetches)}


def state() -> dict[str, Any]:
    from django.utils import timezone
    from django_tasks_db.models import DBTaskResult

    from squad_memory.models import Compression, Message, Slot

    slot = Slot.objects.for_key(*SLOT).first()
    if slot is None:
        return {"slot": None}
    rows = Compression.objects.filter(slot=slot).order_by("started_at", "id")
    return {
        "slot": {
            "pending": bool(slot.pending_token),
            "lease_left": (slot.lease_until - timezone.now()).total_seconds()
            if slot.lease_until
            else None,
            "covered_seq": slot.covered_seq,
            "last_seq": slot.last_seq,
            "summary": json.dumps(slot.summary),
        },
        "compressions": [
            {
                "outcome": c.outcome,
                "from_seq": c.from_seq,
                "to_seq": c.to_seq,
                "started": c.started_at.timestamp(),
                "finished": c.finished_at.timestamp() if c.finished_at else None,
            }
            for c in rows
        ],
        "texts": [m.content[0]["text"] for m in Message.objects.filter(slot=slot).order_by("seq")],
        "tasks": list(
            DBTaskResult.objects.order_by("enqueued_at").values_list("status", flat=True)
        ),
    }


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.tasks_settings")
    import django

    django.setup()
    out = save(sys.argv[2], int(sys.argv[3])) if sys.argv[1] == "save" else state()
    print(json.dumps(out))

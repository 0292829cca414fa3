"""A separate writer process for the Celery integration tests.

``python -m tests.celery_writer WRITER PAIRS`` saves PAIRS user/assistant pairs to
one slot through a Celery-mode ``SummarizingChatStorage``, fetching after each
turn like an agent does, and prints the slowest save and fetch as JSON. The
database, broker and threshold come from the environment (``DATABASE_URL``,
``CELERY_BROKER_URL``, ``SM_TRIGGER_AT``, ``SM_PAUSE``); with ``SM_SETTLE_EVERY=N``, after
every N pairs it waits (30 s at most) until no compression of the slot is queued, so that
compressions come between its saves however fast the machine writes.
"""

from __future__ import annotations

import json
import os
import sys
import time

SLOT = ("writers", "session", "agent")
SUMMARIZER = "tests.celery_summarizers.slow"


def main(writer: str, pairs: int) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from squad_memory.models import Slot
    from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
    from tests.conftest import msg

    trigger_at = int(os.environ.get("SM_TRIGGER_AT", "10"))
    store = SummarizingChatStorage(
        DjangoChatStorage(), SUMMARIZER, trigger_at=trigger_at, keep_last=1, mode="celery"
    )
    pause = float(os.environ.get("SM_PAUSE", "0"))
    settle_every = int(os.environ.get("SM_SETTLE_EVERY", "0"))
    saves, fetches = [], []
    for n in range(pairs):
        started = time.monotonic()
        turn = [msg("user", f"w{writer}-{n}-u"), msg("assistant", f"w{writer}-{n}-a")]
        store.save_chat_messages_sync(*SLOT, turn)
        saves.append(time.monotonic() - started)
        started = time.monotonic()
        store.fetch_chat_sync(*SLOT)
        fetches.append(time.monotonic() - started)
        time.sleep(pause)
        if settle_every and (n + 1) % settle_every == 0:
            deadline = time.monotonic() + 30
            queued = Slot.objects.for_key(*SLOT).exclude(pending_token="").exists
            while queued() and time.monotonic() < deadline:
                time.sleep(0.02)
    print(json.dumps({"max_save": max(saves), "max_fetch": max(fetches)}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))

"""The claim's lease: while a compression runs, a thread (for an async caller: a task of its
event loop, through a database thread) pushes ``lease_until`` forward every third of the lease
(while the token still holds the claim); if the process dies, a save or the sweep takes the
claim over within one lease, never while it still runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta

from django.db import connections
from django.utils import timezone

from squad_memory.models import Slot
from squad_memory.threads import database

logger = logging.getLogger("squad_memory")


def renew(slot_id: int, token: str, seconds: float) -> bool:
    """Push the lease of the claim ``token`` holds forward; False if the claim is gone."""
    until = timezone.now() + timedelta(seconds=seconds)
    slots = Slot.objects.using(Slot.objects.write_db()).filter(pk=slot_id, pending_token=token)
    return slots.update(lease_until=until) == 1


@contextmanager
def renewing(slot_id: int, token: str, seconds: float) -> Iterator[None]:
    """Renew the claim's lease every ``seconds / 3`` until the block ends."""
    stop = threading.Event()
    thread = threading.Thread(
        target=_renew_until,
        args=(slot_id, token, seconds, stop),
        daemon=True,
        name=f"squad-memory-lease-{slot_id}",
    )
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=max(seconds, 1.0))


def _renew_until(slot_id: int, token: str, seconds: float, stop: threading.Event) -> None:
    try:
        while not stop.wait(seconds / 3):
            if not renew(slot_id, token, seconds):
                return
    except Exception as exc:  # the database is away: the lease simply runs out
        logger.warning("Could not renew the claim lease of slot %s: %s", slot_id, exc)
    finally:
        connections.close_all()


@asynccontextmanager
async def arenewing(slot_id: int, token: str, seconds: float) -> AsyncIterator[None]:
    """:func:`renewing` for an async caller: a task of its loop renews the lease."""
    task = asyncio.create_task(_arenew_until(slot_id, token, seconds))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _arenew_until(slot_id: int, token: str, seconds: float) -> None:
    try:
        while True:
            await asyncio.sleep(seconds / 3)
            if not await database(renew, slot_id, token, seconds):
                return
    except Exception as exc:  # the database is away: the lease simply runs out
        logger.warning("Could not renew the claim lease of slot %s: %s", slot_id, exc)

"""A save that finds the database locked (SQLite: another process writes) is retried."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from django.db import OperationalError, connections

logger = logging.getLogger("squad_memory")

T = TypeVar("T")


#: Attempts of a save that finds the database locked (SQLite: another process writes).
LOCKED_ATTEMPTS = 5
#: Seconds before the first retry; doubled after each one.
LOCKED_BACKOFF = 0.05


def retry_locked(alias: str, write: Callable[[], T], key: Sequence[str]) -> T:
    """Run ``write`` (one whole transaction), retrying "database is locked" a few times.

    SQLite has one writer at a time; a second process holding the lock past the
    connection's ``timeout`` makes the transaction fail. Inside a caller's atomic
    block nothing is retried: that transaction is the caller's to retry.
    """
    if connections[alias].in_atomic_block:
        return write()
    for attempt in range(1, LOCKED_ATTEMPTS):
        try:
            return write()
        except OperationalError as exc:
            if "is locked" not in str(exc):
                raise
            delay = LOCKED_BACKOFF * 2 ** (attempt - 1)
            logger.warning(
                "Save to slot %s found the database locked (%s), attempt %s of %s; "
                "retrying in %.2f s.",
                "/".join(key),
                exc,
                attempt,
                LOCKED_ATTEMPTS,
                delay,
            )
            time.sleep(delay)
    return write()

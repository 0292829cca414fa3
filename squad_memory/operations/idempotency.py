"""Idempotent posts: a retry with the same ``Idempotency-Key`` gets the first answer.

:func:`once` records a write's answer under ``(user, key)`` in the write's transaction,
guarded by the unique constraint on that pair: a concurrent retry waits for the first
transaction and then finds its answer; a crash before the commit leaves nothing stored.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from squad_memory.conf import app_settings, number_problem
from squad_memory.exceptions import ConfigurationError, SquadMemoryError
from squad_memory.models import IdempotencyKey, Slot

logger = logging.getLogger(__name__)

#: Longest key accepted (the column's length).
MAX_KEY_LENGTH = 255


class IdempotencyKeyReused(SquadMemoryError, ValueError):
    """The key was already used for a different request; send a new key for a new request."""


@dataclass(frozen=True)
class Answer:
    """A write's answer: HTTP status and JSON body; ``replayed`` when it was stored before;
    ``slot``: the id of the slot it stored into (deleting the slot deletes the answer)."""

    status: int
    body: Any
    replayed: bool = False
    slot: int | None = None


def request_hash(method: str, path: str, data: Any) -> str:
    """SHA-256 of a request: its method, path and JSON body (key order ignored)."""
    body = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(f"{method} {path}\n{body}".encode()).hexdigest()


def cutoff(now: datetime | None = None) -> datetime:
    """Keys created before this have expired (:class:`ConfigurationError` for an
    ``IDEMPOTENCY_TTL`` out of range)."""
    if problem := number_problem("IDEMPOTENCY_TTL", app_settings.raw("IDEMPOTENCY_TTL")):
        raise ConfigurationError(problem)
    return (now or timezone.now()) - timedelta(seconds=app_settings.idempotency_ttl)


def _keys() -> QuerySet[IdempotencyKey]:
    """The stored keys, on the database squad_memory's models are written to."""
    return IdempotencyKey.objects.using(Slot.objects.write_db())


def once(user: str, key: str, digest: str, write: Callable[[], Answer]) -> Answer:
    """Run ``write`` once per ``(user, key)``, storing its answer with what it wrote in one
    transaction: a retry with the same request gets that answer and writes nothing; with
    another request, :class:`IdempotencyKeyReused`. A ``write`` that raises stores nothing
    (its key included), so it may be retried."""
    with transaction.atomic(using=Slot.objects.write_db()):
        if (stored := _claim(user, key, digest)) is not None:
            return _replay(stored, digest)
        answer = write()
        row = _keys().filter(user=user, key=key)
        row.update(status=answer.status, body=answer.body, slot_id=answer.slot)
    return answer


def _claim(user: str, key: str, digest: str) -> IdempotencyKey | None:
    """Insert the key (None), or the row that holds it already (waits for its transaction)."""
    for _ in range(2):
        try:
            with transaction.atomic(using=Slot.objects.write_db()):
                _keys().create(
                    user=user,
                    key=key,
                    request_hash=digest,
                    status=0,
                    body={},
                    created_at=timezone.now(),
                )
            return None
        except IntegrityError:
            stored = _keys().filter(user=user, key=key).first()
            if stored is not None and stored.created_at >= cutoff():
                return stored
            _keys().filter(user=user, key=key, created_at__lt=cutoff()).delete()
    raise IntegrityError(f"Idempotency key {key!r} could not be claimed; retry the request.")


def _replay(stored: IdempotencyKey, digest: str) -> Answer:
    if stored.request_hash != digest:
        raise IdempotencyKeyReused(
            "This Idempotency-Key was used for a different request; use a new key for a new "
            "request, or resend exactly the same body."
        )
    return Answer(stored.status, stored.body, replayed=True)


def purge_expired(now: datetime | None = None) -> int:
    """Delete the keys older than ``IDEMPOTENCY_TTL``; returns how many were deleted."""
    deleted, _ = _keys().filter(created_at__lt=cutoff(now)).delete()
    if deleted:
        logger.info("Deleted %s expired idempotency key(s).", deleted)
    return deleted

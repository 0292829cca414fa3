"""The answers kept for idempotent writes (the API's ``Idempotency-Key``, the storage's
``idempotency_key``), and :func:`once`, the one rule that uses them.

:func:`once` records a write's answer under ``(user, key)`` in the write's transaction,
guarded by the unique constraint on that pair: a concurrent retry waits for the first
transaction and then finds its answer; a crash before the commit leaves nothing stored.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, models, transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from squad_memory.conf import app_settings, number_problem
from squad_memory.exceptions import (
    ConfigurationError,
    IdempotencyKeyReused,
    InvalidIdempotencyKey,
)
from squad_memory.models.slots import Slot

logger = logging.getLogger(__name__)


class IdempotencyKey(models.Model):
    """The answer to a write sent with an idempotency key, replayed on its retries.

    One row per owner and key, written in the transaction that stores the messages: the
    API's owner is the requesting account's primary key, the storage's a name of the slot
    (:data:`STORAGE_OWNER` and a hash), so the two never share a key. The sweep deletes
    rows older than ``IDEMPOTENCY_TTL``; a row goes with its slot (the API's answer holds
    the messages' text), so a retry after that is a new request.
    """

    user = models.CharField(
        _("user"), max_length=255, help_text=_("Primary key of the requesting account.")
    )
    key = models.CharField(_("idempotency key"), max_length=255)
    request_hash = models.CharField(
        _("request hash"),
        max_length=64,
        help_text=_("SHA-256 of the request's method, path and body."),
    )
    status = models.PositiveSmallIntegerField(_("response status"))
    body = models.JSONField(_("response body"))
    created_at = models.DateTimeField(_("created"))
    slot = models.ForeignKey(
        "squad_memory.Slot",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("slot"),
        help_text=_("The slot the answered post stored into."),
    )

    class Meta:
        verbose_name = _("idempotency key")
        verbose_name_plural = _("idempotency keys")
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="squad_memory_idem_user_key"),
        ]
        indexes = [
            models.Index(fields=["created_at"], name="squad_memory_idem_created"),
        ]

    def __str__(self) -> str:
        return f"{self.user}:{self.key}"


#: Longest key accepted (the column's length).
MAX_KEY_LENGTH = 255
#: What a key may hold: printable ASCII, as HTTP header values do (a UUID is a good key).
KEY_CHARS = re.compile(f"[\\x20-\\x7e]{{1,{MAX_KEY_LENGTH}}}")
#: The start of the owner of the storage's keys: no account's primary key looks like it.
STORAGE_OWNER = "squad_memory.storage:"


def check_key(key: Any) -> str:
    """``key`` if it is a valid idempotency key, else :class:`InvalidIdempotencyKey`."""
    if not isinstance(key, str) or not KEY_CHARS.fullmatch(key):
        raise InvalidIdempotencyKey(
            f"idempotency_key must be 1 to {MAX_KEY_LENGTH} printable ASCII characters, got "
            f"{key!r}; use a new str(uuid.uuid4()) for each save, the same one for its retries."
        )
    return key


def storage_owner(namespace: str, slot_key: tuple[str, str, str]) -> str:
    """The owner of a storage save's keys: the slot, hashed to fit the column. A key names
    one save of one slot; the API's keys (an account's primary key) are never its."""
    name = json.dumps([namespace, *slot_key], ensure_ascii=True)
    return STORAGE_OWNER + hashlib.sha256(name.encode()).hexdigest()


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


def _keys() -> models.QuerySet[IdempotencyKey]:
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
    for _attempt in range(2):
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

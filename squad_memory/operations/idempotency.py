"""Idempotent posts: a retry with the same ``Idempotency-Key`` gets the first answer.

The rule lives with what it stores (:mod:`squad_memory.models.idempotency`), below the
storage, which applies it to ``idempotency_key`` saves; the API and the sweep use it from here.
"""

from __future__ import annotations

from squad_memory.exceptions import IdempotencyKeyReused
from squad_memory.models.idempotency import (
    MAX_KEY_LENGTH,
    Answer,
    cutoff,
    once,
    purge_expired,
    request_hash,
)

__all__ = [
    "MAX_KEY_LENGTH",
    "Answer",
    "IdempotencyKeyReused",
    "cutoff",
    "once",
    "purge_expired",
    "request_hash",
]

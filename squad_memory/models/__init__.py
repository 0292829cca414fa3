"""What squad_memory stores: slots, their raw messages, the compression log, and the
answers kept for Idempotency-Key retries."""

from __future__ import annotations

from squad_memory.models.append import Appended, SlotKey
from squad_memory.models.idempotency import IdempotencyKey
from squad_memory.models.log import Compression, Outcome
from squad_memory.models.messages import Message
from squad_memory.models.slots import DJANGO_NAMESPACE, Limits, Slot, SlotQuerySet, SlotState

__all__ = [
    "DJANGO_NAMESPACE",
    "Appended",
    "Compression",
    "IdempotencyKey",
    "Limits",
    "Message",
    "Outcome",
    "Slot",
    "SlotKey",
    "SlotQuerySet",
    "SlotState",
]

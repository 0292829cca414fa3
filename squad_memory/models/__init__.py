"""What squad_memory stores: slots, their raw history, the compression log, and the
answers kept for Idempotency-Key retries.

A *slot* is one conversation of one agent, keyed ``(user_id, session_id, agent_id)``.
Its row carries the sequence counter and the role of its last accepted message
(so a save never reads the history) and the summary buffer as a *pointer plus a
prefix*: the last compression's output and the sequence number it covers. The
buffer is that prefix followed by the slot's messages after the pointer.
"""

from __future__ import annotations

from squad_memory.models.log import Compression, IdempotencyKey
from squad_memory.models.slots import Message, Slot
from squad_memory.querysets import DJANGO_NAMESPACE, Outcome, SlotQuerySet, SlotState

__all__ = [
    "DJANGO_NAMESPACE",
    "Compression",
    "IdempotencyKey",
    "Message",
    "Outcome",
    "Slot",
    "SlotQuerySet",
    "SlotState",
]

"""The squad_memory admin: slots with their transcript and buffer, and the read-only logs."""

from __future__ import annotations

from squad_memory.admin.logs import CompressionAdmin, MessageAdmin
from squad_memory.admin.slots import SlotAdmin

__all__ = ["CompressionAdmin", "MessageAdmin", "SlotAdmin"]

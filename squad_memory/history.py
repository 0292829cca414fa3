"""The raw history: appending messages to a slot, and reading it back.

Every write takes the slot's row lock, applies the role rule against the slot's
``last_role``, inserts the accepted rows with the next sequence numbers and
bumps the counter, in one transaction. No write reads the history, so a save
costs the same at 10 and at 10,000 stored messages, and concurrent writers from
any number of processes keep a gapless, ordered sequence.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from squad_memory import sql
from squad_memory.messages import MessageDict, is_same_role, needs_compression, now_ms, trim_size
from squad_memory.models import Message, Slot
from squad_memory.search import extract_text

SlotKey = tuple[str, str, str]


@dataclass
class AppendResult:
    """What one save did: the slot as left by it, and whether it claimed a compression."""

    slot: Slot
    accepted: list[MessageDict]
    skipped: bool = False
    claim: str | None = None
    rows: list[Message] = field(default_factory=list)


def locked_slot(namespace: str, key: SlotKey) -> Slot:
    """The slot's row, locked until the end of the transaction; created if new."""
    user_id, session_id, agent_id = key
    slot = sql.lock_slot(namespace, user_id, session_id, agent_id)
    if slot is None:  # a new slot (get_or_create settles a race between two creators)
        slot, _ = Slot.objects.select_for_update().get_or_create(
            namespace=namespace, user_id=user_id, session_id=session_id, agent_id=agent_id
        )
    return slot


def pending_is_stale(slot: Slot, timeout: float) -> bool:
    if slot.pending_since is None:
        return True
    return slot.pending_since < timezone.now() - timedelta(seconds=timeout)


def try_claim(slot: Slot, timeout: float) -> str | None:
    """Mark the (locked) slot as having a compression pending; None if one already is."""
    if not pending_is_stale(slot, timeout):
        return None
    slot.pending_since = timezone.now()
    slot.pending_token = uuid.uuid4().hex
    return slot.pending_token


def append(
    namespace: str,
    key: SlotKey,
    messages: list[MessageDict],
    *,
    check_role: bool,
    max_history_size: int | None = None,
    store_rows: bool | None = None,
    trigger_at: int | None = None,
    pending_timeout: float = 600,
) -> AppendResult:
    """Append messages to a slot in one transaction.

    ``check_role`` applies the role rule (single saves). ``store_rows=None`` stores
    rows always; ``False`` only counts them (a foreign store keeps the history).
    With ``trigger_at``, an active buffer that grows past it claims a compression.
    """
    if not messages:  # nothing to store: no slot is created
        user_id, session_id, agent_id = key
        slot = Slot.objects.for_key(*key, namespace=namespace).first() or Slot(
            namespace=namespace, user_id=user_id, session_id=session_id, agent_id=agent_id
        )
        return AppendResult(slot=slot, accepted=[])
    with transaction.atomic():
        slot = locked_slot(namespace, key)
        if check_role and is_same_role(slot.last_role, messages[0]["role"]):
            return AppendResult(slot=slot, accepted=[], skipped=True)
        rows = _insert(slot, messages, store_rows)
        _advance(slot, len(messages), messages[-1]["role"], max_history_size)
        claim = None
        over = trigger_at is not None and slot.active
        if over and needs_compression(slot.buffer_length, slot.trigger_at or trigger_at or 0):
            claim = try_claim(slot, pending_timeout)
        slot.updated_at = timezone.now()
        sql.update_slot(slot, _SAVE_FIELDS)
        return AppendResult(slot=slot, accepted=messages, claim=claim, rows=rows)


_SAVE_FIELDS = [
    "last_seq",
    "last_role",
    "visible_from_seq",
    "pending_since",
    "pending_token",
    "updated_at",
]


def _insert(slot: Slot, messages: list[MessageDict], store_rows: bool | None) -> list[Message]:
    if store_rows is False and not slot.active:
        return []
    stamp = now_ms()
    rows = [
        Message(
            slot=slot,
            seq=slot.last_seq + i,
            role=m["role"],
            content=m["content"],
            citations=m.get("citations"),
            timestamp=m.get("timestamp") or stamp,  # importers keep the original time
            text=extract_text(m["content"]),
        )
        for i, m in enumerate(messages, start=1)
    ]
    sql.insert_messages(rows)
    return rows


def _advance(slot: Slot, count: int, last_role: str, max_history_size: int | None) -> None:
    slot.last_seq += count
    slot.last_role = last_role
    keep = trim_size(max_history_size)
    if keep:
        slot.visible_from_seq = max(slot.visible_from_seq, slot.last_seq - keep + 1)


def insert_rows(slot: Slot, messages: list[MessageDict]) -> None:
    """Store messages after the slot's last sequence number and advance it (lock held)."""
    _insert(slot, messages, None)
    slot.last_seq += len(messages)
    if messages:
        slot.last_role = messages[-1]["role"]


def _dicts(rows: Any) -> list[dict[str, Any]]:
    return cast(list[dict[str, Any]], list(rows))


def visible(namespace: str, key: SlotKey) -> list[dict[str, Any]]:
    """The slot's visible (untrimmed) messages, oldest first: what ``fetch_chat`` returns."""
    user_id, session_id, agent_id = key
    rows = Message.objects.filter(
        slot__namespace=namespace,
        slot__user_id=user_id,
        slot__session_id=session_id,
        slot__agent_id=agent_id,
        seq__gte=F("slot__visible_from_seq"),
    )
    return _dicts(rows.order_by("seq").values("role", "content", "citations"))


def rows_after(slot_id: int, after_seq: int, up_to: int | None = None) -> list[dict[str, Any]]:
    """Messages of a slot with ``after_seq < seq <= up_to``, oldest first."""
    return sql.messages_after(slot_id, after_seq, up_to)


def session_history(namespace: str, user_id: str, session_id: str) -> list[dict[str, Any]]:
    """Every visible message of every agent of a session, by timestamp (stable)."""
    rows = Message.objects.filter(
        slot__namespace=namespace,
        slot__user_id=user_id,
        slot__session_id=session_id,
        seq__gte=F("slot__visible_from_seq"),
    )
    return _dicts(
        rows.order_by("timestamp", "slot_id", "seq").values(
            "role", "content", "citations", "slot__agent_id"
        )
    )

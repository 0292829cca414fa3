"""The raw history: appending messages to a slot, and reading it back.

Every write takes the slot's row lock, applies the role rule against the slot's
``last_role``, inserts the accepted rows with the next sequence numbers and
bumps the counter, in one transaction. No write reads the history, so a save
costs the same at 10 and at 10,000 stored messages, and concurrent writers from
any number of processes keep a gapless, ordered sequence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from django.db import router, transaction
from django.db.models import F
from django.utils import timezone

from squad_memory import saving, sql, tails
from squad_memory.messages import MessageDict, is_same_role, trim_size
from squad_memory.models import Message, Slot
from squad_memory.retry import retry_locked
from squad_memory.rows import accepted_dict, build_rows, cached_row, number

SlotKey = tuple[str, str, str]

#: Called with the locked slot after a save's rows are in; returns a claim token or None.
ClaimHook = Callable[[Slot], "str | None"]

logger = logging.getLogger("squad_memory")


def db_alias() -> str:
    """The database every read a write depends on goes to (never a read replica)."""
    return router.db_for_write(Slot)


@dataclass
class AppendResult:
    """What one save did: the slot as left by it, and the claim it took, if any."""

    slot: Slot
    accepted: list[MessageDict]
    skipped: bool = False
    claim: str | None = None
    rows: list[Message] = field(default_factory=list)
    #: False after a one-statement save: no claim was considered under the row lock.
    locked: bool = True


def locked_slot(namespace: str, key: SlotKey) -> Slot:
    """The slot's row, locked until the end of the transaction; created if new."""
    user_id, session_id, agent_id = key
    slot = sql.lock_slot(namespace, user_id, session_id, agent_id)
    if slot is None:  # a new slot (get_or_create settles a race between two creators)
        slot, _ = (
            Slot.objects.using(db_alias())
            .select_for_update()
            .get_or_create(
                namespace=namespace, user_id=user_id, session_id=session_id, agent_id=agent_id
            )
        )
    return slot


def append(
    namespace: str,
    key: SlotKey,
    messages: list[MessageDict],
    *,
    check_role: bool,
    max_history_size: int | None = None,
    store_rows: bool | None = None,
    claim: ClaimHook | None = None,
) -> AppendResult:
    """Append messages to a slot in one transaction.

    ``check_role`` applies the role rule (single saves). ``store_rows=None`` stores
    rows always; ``False`` only while the buffer is active (a foreign store keeps the
    history). ``claim`` may claim a compression while the row is locked.
    """
    if not messages:  # nothing to store: no slot is created
        user_id, session_id, agent_id = key
        slot = Slot.objects.using(db_alias()).for_key(*key, namespace=namespace).first() or Slot(
            namespace=namespace, user_id=user_id, session_id=session_id, agent_id=agent_id
        )
        return AppendResult(slot=slot, accepted=[])
    built = None  # the rows, built (and their tokens counted) once for either path
    returning = store_rows is None and len(messages) <= saving.ONE_STATEMENT_MAX
    if returning and saving.returning_saves(db_alias()):
        built = build_rows(None, 0, messages)
        fast = retry_locked(
            db_alias(),
            lambda: _append_returning(key, namespace, built, check_role, max_history_size, claim),
            key,
        )
        if fast is not None:  # unless it says locked, the caller claims apart, if due
            return fast
    return retry_locked(
        db_alias(),
        lambda: _append_once(
            namespace, key, messages, check_role, max_history_size, store_rows, claim, built
        ),
        key,
    )


def _append_once(
    namespace: str,
    key: SlotKey,
    messages: list[MessageDict],
    check_role: bool,
    max_history_size: int | None,
    store_rows: bool | None,
    claim: ClaimHook | None,
    built: list[Message] | None = None,
) -> AppendResult:
    with transaction.atomic(using=db_alias()):
        slot = locked_slot(namespace, key)
        if check_role and is_same_role(slot.last_role, messages[0]["role"]):
            return AppendResult(slot=slot, accepted=[], skipped=True)
        rows = _insert(slot, messages, store_rows, built)
        slot.buffer_tokens += sum(row.tokens for row in rows)  # the running total (tokens.py)
        _advance(slot, len(messages), messages[-1]["role"], max_history_size)
        token = claim(slot) if claim is not None else None
        slot.updated_at = timezone.now()
        sql.update_slot(slot, _SAVE_FIELDS)
    if rows:  # committed now, unless a caller's transaction is still open
        remember(db_alias(), slot.pk, [cached_row(row) for row in rows])
    return AppendResult(slot=slot, accepted=messages, claim=token, rows=rows)


_SAVE_FIELDS = [
    "last_seq",
    "last_role",
    "visible_from_seq",
    "pending_since",
    "pending_token",
    "lease_until",
    "updated_at",
    "buffer_tokens",
]


def _append_returning(
    key: SlotKey,
    namespace: str,
    rows: list[Message],
    check_role: bool,
    max_history_size: int | None,
    claim: ClaimHook | None,
) -> AppendResult | None:
    """The same save as the general path with ``UPDATE ... RETURNING`` (one round trip on
    PostgreSQL, where the claim is taken apart; two statements on SQLite, which claims
    under the write lock it holds); None when it cannot tell (a new slot, a refused
    role): take that path."""
    alias = db_alias()
    claimed: list[str | None] = []

    def claim_locked(slot: Slot) -> None:
        token = claim(slot) if claim is not None else None
        if token is not None:
            sql.update_slot(slot, ["pending_since", "pending_token", "lease_until"])
        claimed.append(token)

    slot = saving.save_returning(
        (namespace, *key),
        rows,
        check_role=check_role,
        keep=trim_size(max_history_size),
        now=timezone.now(),
        locked=claim_locked,
    )
    if slot is None:
        return None
    appended = saved_returning(slot, rows)
    if claimed:
        appended.claim, appended.locked = claimed[0], True
    remember(alias, slot.pk, [cached_row(row) for row in rows])
    return appended


def saved_returning(slot: Slot, rows: list[Message]) -> AppendResult:
    """What a one-statement save did, from the slot row it returned (no lock is held)."""
    number(slot, rows, slot.last_seq - len(rows))
    accepted = [accepted_dict(row) for row in rows]
    return AppendResult(slot=slot, accepted=accepted, rows=rows, locked=False)


def _insert(
    slot: Slot,
    messages: list[MessageDict],
    store_rows: bool | None,
    built: list[Message] | None = None,
) -> list[Message]:
    if store_rows is False and not slot.active:
        return []
    rows = built or build_rows(slot, slot.last_seq, messages)
    number(slot, rows, slot.last_seq)
    sql.insert_messages(rows)
    return rows


def remember(alias: str, slot_id: int, rows: list[dict[str, Any]]) -> None:
    """Keep committed rows in the per-process tail cache: only outside any transaction,
    where what was written or read is known to be committed."""
    if not transaction.get_connection(alias).in_atomic_block:
        tails.put(alias, slot_id, rows)


def _advance(slot: Slot, count: int, last_role: str, max_history_size: int | None) -> None:
    slot.last_seq += count
    slot.last_role = last_role
    keep = trim_size(max_history_size)
    if keep:
        slot.visible_from_seq = max(slot.visible_from_seq, slot.last_seq - keep + 1)


def insert_rows(slot: Slot, messages: list[MessageDict]) -> None:
    """Store messages after the slot's last sequence number and advance it (lock held)."""
    rows = _insert(slot, messages, None)
    slot.buffer_tokens += sum(row.tokens for row in rows)
    slot.last_seq += len(messages)
    if messages:
        slot.last_role = messages[-1]["role"]


def _dicts(rows: Any) -> list[dict[str, Any]]:
    return cast(list[dict[str, Any]], list(rows))


#: "Visible" (not trimmed) as a query condition on messages: ``Slot.is_trimmed`` in SQL.
VISIBLE = {"seq__gte": F("slot__visible_from_seq")}


def visible(namespace: str, key: SlotKey) -> list[MessageDict]:
    """The slot's visible (untrimmed) messages, oldest first: what ``fetch_chat`` returns."""
    user_id, session_id, agent_id = key
    rows = Message.objects.filter(
        slot__namespace=namespace,
        slot__user_id=user_id,
        slot__session_id=session_id,
        slot__agent_id=agent_id,
        **VISIBLE,
    ).using(db_alias())
    return cast(
        list[MessageDict], list(rows.order_by("seq").values("role", "content", "citations"))
    )


def rows_after(
    slot_id: int, after_seq: int, up_to: int | None = None, *, newest: int | None = None
) -> list[dict[str, Any]]:
    """Messages of a slot with ``after_seq < seq <= up_to``, oldest first (``newest``: only
    that many of the newest)."""
    return sql.messages_after(slot_id, after_seq, up_to, newest=newest)


def session_history(namespace: str, user_id: str, session_id: str) -> list[dict[str, Any]]:
    """Every visible message of every agent of a session, by timestamp (stable)."""
    rows = Message.objects.filter(
        slot__namespace=namespace,
        slot__user_id=user_id,
        slot__session_id=session_id,
        **VISIBLE,
    ).using(db_alias())
    return _dicts(
        rows.order_by("timestamp", "slot_id", "seq").values(
            "role", "content", "citations", "slot__agent_id"
        )
    )

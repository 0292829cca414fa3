"""Claims: at most one compression per slot, taken on the slot's locked row."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import OuterRef, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from squad_memory.conf import app_settings
from squad_memory.history import db_alias, insert_rows
from squad_memory.messages import MessageDict
from squad_memory.models import Message, Slot


@dataclass(frozen=True)
class Claim:
    """A claimed compression: the slot, the claim's token, and the keep_last to use."""

    slot_id: int
    token: str
    keep_last: int
    #: The slot's row as the claimer just saw it (spares the run a read); compared by id.
    slot: Slot | None = field(default=None, compare=False, repr=False)


def due(slot: Slot, trigger_at: int, trigger_tokens: int | None = None) -> bool:
    """The trigger rule for a slot as last read: over its threshold, with no live claim."""
    over = slot.needs_compression(trigger_at, trigger_tokens)
    return over and slot.claim_is_free(app_settings.pending_timeout)


def claim_locked(
    slot: Slot,
    trigger_at: int | None,
    *,
    lease_seconds: float,
    trigger_tokens: int | None = None,
) -> str | None:
    """Claim a compression of a slot whose row the caller holds locked (and saves).

    ``trigger_at=None`` claims whatever the buffer's length (an operator's request).
    None when the buffer is short enough (in pairs and in tokens: the slot's trigger
    rule) or a live claim already exists.
    """
    free = slot.claim_is_free(app_settings.pending_timeout)
    if not free if trigger_at is None else not due(slot, trigger_at, trigger_tokens):
        return None
    now = timezone.now()
    slot.pending_since, slot.pending_token = now, uuid.uuid4().hex
    slot.lease_until = now + timedelta(seconds=lease_seconds)
    return slot.pending_token


def claim(
    slot_id: int,
    trigger_at: int,
    keep_last: int,
    *,
    lease_seconds: float,
    after_seq: int = 0,
    run_now: bool = False,
    trigger_tokens: int | None = None,
) -> Claim | None:
    """Claim a compression of an active slot over the threshold (the caller dispatches it).

    None when the buffer is short enough, a compression is already pending, or the
    slot holds no message after ``after_seq``. ``run_now``: the claim carries the slot
    row as locked, for a run that starts at once (it spares the run a read).
    """
    with transaction.atomic(using=db_alias()):
        slot = _locked(slot_id)
        if slot is None or not slot.active or slot.last_seq <= after_seq:
            return None
        token = claim_locked(
            slot, trigger_at, lease_seconds=lease_seconds, trigger_tokens=trigger_tokens
        )
        if token is None:
            return None
        slot.save(update_fields=["pending_since", "pending_token", "lease_until", "updated_at"])
    keep = slot.keep_last_for(trigger_at, keep_last)
    return Claim(slot.pk, token, keep, slot if run_now else None)


def activate(
    slot_id: int,
    trigger_at: int | None,
    keep_last: int,
    *,
    lease_seconds: float,
    seed: list[MessageDict] | None = None,
    expect_last_seq: int | None = None,
    default_trigger: int = 20,
    trigger_tokens: int | None = None,
) -> tuple[Slot, Claim | None]:
    """Make a slot's buffer active and claim its first compression.

    The buffer starts as the slot's visible history, or, for a slot over a foreign
    store, as ``seed`` (that store's history) copied in as the buffer's messages.
    ``trigger_at=None`` claims whatever the buffer's length. With ``expect_last_seq``,
    an inactive slot that has moved past it (a save was recorded after ``seed`` was
    read) is left inactive.
    """
    with transaction.atomic(using=db_alias()):
        slot = _locked(slot_id)
        if slot is None:
            raise Slot.DoesNotExist(f"Slot {slot_id} no longer exists.")
        moved = expect_last_seq is not None and slot.last_seq != expect_last_seq
        if not slot.active and moved:
            return slot, None
        if not slot.active:
            _start_buffer(slot, seed)
        token = claim_locked(
            slot, trigger_at, lease_seconds=lease_seconds, trigger_tokens=trigger_tokens
        )
        slot.save()
    if token is None:
        return slot, None
    keep = slot.keep_last_for(trigger_at or default_trigger, keep_last)
    return slot, Claim(slot.pk, token, keep)


def _start_buffer(slot: Slot, seed: list[MessageDict] | None) -> None:
    slot.buffer_tokens = slot.summary_tokens = 0
    if seed is None:
        slot.covered_seq = slot.visible_from_seq - 1
        slot.buffer_tokens = _tokens_after(slot.pk, slot.covered_seq)
    else:
        slot.covered_seq = slot.last_seq
        insert_rows(slot, seed)  # adds the seed's tokens
    slot.active, slot.summary, slot.summary_length = True, [], 0


def _tokens_after(slot_id: int, after_seq: int) -> int:
    """The stored tokens of a slot's messages after ``after_seq`` (one aggregate)."""
    rows = Message.objects.using(db_alias()).filter(slot_id=slot_id, seq__gt=after_seq)
    return int(rows.aggregate(total=Sum("tokens"))["total"] or 0)


def _all_tokens() -> Subquery:
    """The tokens of every stored message of the slot being updated (an inactive buffer)."""
    rows = Message.objects.filter(slot_id=OuterRef("pk")).order_by().values("slot_id")
    return Subquery(rows.annotate(total=Sum("tokens")).values("total")[:1])


def _locked(slot_id: int) -> Slot | None:
    return Slot.objects.using(db_alias()).select_for_update().filter(pk=slot_id).first()


def release(slot_id: int, token: str, *, failed: bool) -> bool:
    """Drop a claim (after a failure, or when there was nothing to do)."""
    fields: dict[str, Any] = {"pending_since": None, "pending_token": "", "lease_until": None}
    if failed:
        fields["last_failed"] = True
    slots = Slot.objects.using(db_alias()).filter(pk=slot_id, pending_token=token)
    return slots.update(**fields) == 1


def reset(slot_id: int) -> bool:
    """Deactivate a slot's buffer: drop the summary and any pending claim; raw history stays.

    A compression in flight loses its claim, so its compare-and-swap fails and it
    is logged as stale. The next fetch or save decides afresh whether to activate.
    """
    slots = Slot.objects.using(db_alias()).filter(pk=slot_id)
    return (
        slots.update(
            active=False,
            summary=[],
            summary_length=0,
            summary_tokens=0,
            buffer_tokens=Coalesce(_all_tokens(), Value(0)),
            covered_seq=0,
            pending_since=None,
            pending_token="",
            lease_until=None,
            last_failed=False,
            updated_at=timezone.now(),
        )
        == 1
    )

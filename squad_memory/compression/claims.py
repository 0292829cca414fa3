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

from squad_memory.messages import MessageDict
from squad_memory.models import Limits, Message, Slot

#: A slot's claim columns while no compression is claimed.
NO_CLAIM: dict[str, Any] = {"pending_since": None, "pending_token": "", "lease_until": None}
#: ... and no failure to wait after: a buffer just compressed or reset.
SETTLED: dict[str, Any] = {**NO_CLAIM, "last_failed": False, "retry_after": None}


@dataclass(frozen=True)
class Claim:
    """A claimed compression: the slot, the claim's token, and the keep_last to use."""

    slot_id: int
    token: str
    keep_last: int
    #: The slot's row as the claimer just saw it (spares the run a read); compared by id.
    slot: Slot | None = field(default=None, compare=False, repr=False)


def due(slot: Slot, limits: Limits) -> bool:
    """The trigger rule for a slot as last read: over its threshold, with no live claim and
    no failure in the last ``PENDING_TIMEOUT`` seconds (:func:`release`)."""
    if not (slot.active and slot.needs_compression(limits) and slot.claim_is_free()):
        return False
    return slot.retry_after is None or slot.retry_after <= timezone.now()


def _db() -> str:
    return Slot.objects.write_db()


def _locked(slot_id: int) -> Slot | None:
    return Slot.objects.using(_db()).select_for_update().filter(pk=slot_id).first()


def _take(slot: Slot, lease_seconds: float) -> str:
    """Mark the locked ``slot`` claimed (the caller saves it); the claim's token."""
    now = timezone.now()
    slot.pending_since, slot.pending_token = now, uuid.uuid4().hex
    slot.lease_until = now + timedelta(seconds=lease_seconds)
    return slot.pending_token


def claim(
    slot_id: int,
    limits: Limits,
    *,
    lease_seconds: float,
    after_seq: int = 0,
    force: bool = False,
    run_now: bool = False,
) -> Claim | None:
    """Claim a compression of an active slot over its threshold (``force``: whatever its
    length); the caller dispatches it. None when the buffer is short enough, a claim is
    live, or the slot holds no message after ``after_seq``. ``run_now``: the claim carries
    the slot's row as locked, for a run that starts at once (it spares the run a read)."""
    with transaction.atomic(using=_db()):
        slot = _locked(slot_id)
        if slot is None or not slot.active or slot.last_seq <= after_seq:
            return None
        if not (slot.claim_is_free() if force else due(slot, limits)):
            return None
        token = _take(slot, lease_seconds)
        slot.save(update_fields=["pending_since", "pending_token", "lease_until", "updated_at"])
    return Claim(slot.pk, token, slot.limits(limits).keep_last, slot if run_now else None)


def activate(
    slot_id: int,
    limits: Limits,
    *,
    lease_seconds: float,
    seed: list[MessageDict] | None = None,
    expect_last_seq: int | None = None,
    force: bool = False,
) -> tuple[Slot, Claim | None]:
    """Make a slot's buffer active and claim its first compression (``force``: whatever
    its length). The buffer starts as the slot's visible history or, over a foreign store,
    as ``seed`` (that store's history) appended as its rows; with ``expect_last_seq``, an
    inactive slot that moved past it (a save came after ``seed`` was read) stays inactive."""
    with transaction.atomic(using=_db()):
        slot = _locked(slot_id)
        if slot is None:
            raise Slot.DoesNotExist(f"Slot {slot_id} no longer exists.")
        if not slot.active:
            if expect_last_seq is not None and slot.last_seq != expect_last_seq:
                return slot, None
            slot = _start_buffer(slot, seed)
        free = slot.claim_is_free() if force else due(slot, limits)
        token = _take(slot, lease_seconds) if free else None
        slot.save()
    return slot, Claim(slot.pk, token, slot.limits(limits).keep_last) if token else None


def _start_buffer(slot: Slot, seed: list[MessageDict] | None) -> Slot:
    """The locked slot with its buffer active: empty summary, the pointer before its
    visible history (or before ``seed``, appended as its rows), tokens counted."""
    if seed is None:
        slot.covered_seq = slot.visible_from_seq - 1
        slot.buffer_tokens = _tokens_after(slot.pk, slot.covered_seq)
    else:
        this = Slot.objects.using(_db()).filter(pk=slot.pk)
        this.update(covered_seq=slot.last_seq, buffer_tokens=0)
        slot = Slot.objects.append(slot.key, seed, namespace=slot.namespace).slot
        slot.covered_seq = slot.last_seq - len(seed)
    slot.active, slot.summary, slot.summary_length, slot.summary_tokens = True, [], 0, 0
    return slot


def _tokens_after(slot_id: int, after_seq: int) -> int:
    """The stored tokens of a slot's messages after ``after_seq`` (one aggregate)."""
    rows = Message.objects.using(_db()).filter(slot_id=slot_id, seq__gt=after_seq)
    return int(rows.aggregate(total=Sum("tokens"))["total"] or 0)


def _all_tokens() -> Subquery:
    """The tokens of every stored message of the slot being updated (an inactive buffer)."""
    rows = Message.objects.filter(slot_id=OuterRef("pk")).order_by().values("slot_id")
    return Subquery(rows.annotate(total=Sum("tokens")).values("total")[:1])


def release(slot_id: int, token: str, *, failed: bool, backoff: float = 0) -> bool:
    """Drop a claim (after a failure, or with nothing to do); with ``backoff``, no save or sweep
    claims the next compression for that many seconds (a manual one still may)."""
    fields: dict[str, Any] = dict(NO_CLAIM)
    if failed:
        fields["last_failed"] = True
    if backoff:
        fields["retry_after"] = timezone.now() + timedelta(seconds=backoff)
    return Slot.objects.using(_db()).filter(pk=slot_id, pending_token=token).update(**fields) == 1


def reset(slot_id: int) -> bool:
    """Deactivate a slot's buffer: drop the summary and any claim (a compression in flight is
    then logged as stale); the raw history stays, and the next fetch or save decides afresh."""
    slots = Slot.objects.using(_db()).filter(pk=slot_id)
    updated = slots.update(
        active=False,
        summary=[],
        summary_length=0,
        summary_tokens=0,
        buffer_tokens=Coalesce(_all_tokens(), Value(0)),
        covered_seq=0,
        **SETTLED,
        updated_at=timezone.now(),
    )
    return updated == 1

"""Compressions off the request path: what a worker does with a claim, and the sweep.

Celery mode's library code; ``squad_memory.tasks`` only wraps it.

- :func:`run_claim` is the body of the compression task: it checks that the task
  still holds the slot's claim (a stale or repeated task does nothing), then runs
  :func:`squad_memory.buffer.compress`, which applies the output only if the
  snapshot is still the head of the buffer. When many saves arrived meanwhile and
  the buffer is still over the threshold, it claims and enqueues the next one.
- :func:`sweep` finds slots left over the threshold with nothing pending (the
  broker was down, a worker died, the last attempt failed) and enqueues them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any, NoReturn

from django.db import transaction
from django.db.models import F, Q, QuerySet, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from squad_memory import buffer, history, idempotency
from squad_memory.conf import app_settings
from squad_memory.exceptions import ConfigurationError
from squad_memory.messages import effective_keep_last, needs_compression
from squad_memory.models import DJANGO_NAMESPACE, Slot
from squad_memory.summarizers import Summarizer, require_importable, resolve

logger = logging.getLogger("squad_memory")

__all__ = ["Claim", "SweepReport", "backoff", "claim", "enqueue", "run_claim", "sweep"]


def run_claim(
    slot_id: int,
    token: str,
    summarizer: str | Summarizer,
    keep_last: int,
    *,
    attempt: int = 1,
    last_attempt: bool = True,
    trigger_at: int | None = None,
    trigger: str = "celery",
) -> buffer.Outcome | None:
    """Run the compression claimed with ``token``; None if the claim is gone (nothing done).

    ``last_attempt=False`` keeps the claim after a summarizer failure, for a retry.
    """
    slot = Slot.objects.filter(pk=slot_id).first()
    if slot is None or not token or slot.pending_token != token:
        logger.info(
            "Compression task of slot %s skipped: its claim was released or replaced.", slot_id
        )
        return None
    outcome = buffer.compress(
        buffer.snapshot(slot),
        token,
        _summarizer(summarizer),
        keep_last,
        trigger=trigger,
        attempt=attempt,
        release_on_failure=last_attempt,
    )
    if outcome.applied and isinstance(summarizer, str):
        # Saves that arrived meanwhile may have left the buffer over the threshold;
        # with none, another round would only summarize this output again.
        again = claim(slot_id, keep_last, trigger_at, after_seq=slot.last_seq)
        if again is not None:
            enqueue(again, summarizer, trigger_at)
    return outcome


def _summarizer(value: str | Summarizer) -> Summarizer:
    """The summarizer; one that cannot be imported fails each attempt, so the log shows why."""
    try:
        return resolve(value)
    except ConfigurationError as exc:
        error = exc

        def unavailable(history: list[Any], keep_last: int) -> NoReturn:
            raise error

        return Summarizer(unavailable, str(value), str(value))


def claim(
    slot_id: int, keep_last: int, trigger_at: int | None = None, *, after_seq: int = 0
) -> Claim | None:
    """Claim a compression of an active slot over the threshold (the caller dispatches it).

    None when the buffer is short enough, a compression is already pending, or the
    slot holds no message after ``after_seq``. ``trigger_at`` defaults to the
    settings'; the slot's own overrides win.
    """
    with transaction.atomic():
        slot = Slot.objects.select_for_update().filter(pk=slot_id, active=True).first()
        if slot is None or slot.last_seq <= after_seq:
            return None
        trigger = slot.trigger_at or trigger_at or app_settings.trigger_at
        if not needs_compression(slot.buffer_length, trigger):
            return None
        token = history.try_claim(slot, app_settings.pending_timeout)
        if token is None:
            return None
        slot.save(update_fields=["pending_since", "pending_token", "updated_at"])
    return Claim(slot.pk, token, effective_keep_last(slot, trigger, keep_last))


@dataclass
class Claim:
    """A claimed compression: the slot, the claim's token, and the keep_last to use."""

    slot_id: int
    token: str
    keep_last: int


def enqueue(claimed: Claim, summarizer_path: str, trigger_at: int | None) -> None:
    """Hand a claimed compression to a worker (after the current transaction commits)."""
    from squad_memory import tasks

    tasks.enqueue_compression(
        claimed.slot_id, claimed.token, summarizer_path, claimed.keep_last, trigger_at
    )


def backoff(attempt: int) -> float:
    """Seconds before retrying after failed ``attempt`` (1-based): exponential, capped."""
    base = float(app_settings.get("CELERY_RETRY_BACKOFF"))
    cap = float(app_settings.get("CELERY_RETRY_BACKOFF_MAX"))
    return float(min(cap, base * 2 ** (attempt - 1)))


@dataclass
class SweepReport:
    """What a sweep did: slots compressed or enqueued, and inactive slots it activated."""

    enqueued: int = 0
    activated: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def sweep(*, activate: bool = False, limit: int | None = None) -> SweepReport:
    """Compress every active slot over the threshold with nothing pending.

    A claim older than ``PENDING_TIMEOUT`` counts as nothing pending (its worker
    died). With ``activate=True``, inactive slots of :class:`DjangoChatStorage`
    whose visible history is over the threshold are activated too. Uses the
    summarizer, mode, ``TRIGGER_AT`` and ``KEEP_LAST`` of ``settings.SQUAD_MEMORY``:
    in Celery mode each claim is enqueued, in inline mode compressed right here.
    """
    from squad_memory.storage import get_storage

    storage = get_storage()
    dispatch = _dispatcher(storage.summarizer, storage.mode, storage.trigger_at)
    report = SweepReport()
    for slot_id in _limited(over_threshold(storage.trigger_at), limit):
        claimed = claim(slot_id, storage.keep_last, storage.trigger_at)
        if claimed is not None:
            dispatch(claimed)
            report.enqueued += 1
    if activate:
        for slot_id in _limited(inactive_over_threshold(storage.trigger_at), limit):
            slot, token = buffer.activate(slot_id, storage.trigger_at, app_settings.pending_timeout)
            if token is not None:
                keep = effective_keep_last(slot, storage.trigger_at, storage.keep_last)
                dispatch(Claim(slot.pk, token, keep))
                report.activated += 1
    idempotency.purge_expired()
    logger.info(
        "Sweep compressed or enqueued %s slot(s), activated %s.", report.enqueued, report.activated
    )
    return report


def _dispatcher(summarizer: Summarizer, mode: str, trigger_at: int) -> Callable[[Claim], None]:
    if mode == "celery":
        path = require_importable(summarizer)
        return lambda claimed: enqueue(claimed, path, trigger_at)

    def inline(claimed: Claim) -> None:
        run_claim(claimed.slot_id, claimed.token, summarizer, claimed.keep_last, trigger="sweep")

    return inline


def over_threshold(trigger_at: int) -> QuerySet[Slot]:
    """Active slots over the threshold whose claim is absent or older than PENDING_TIMEOUT."""
    stale = timezone.now() - timedelta(seconds=app_settings.pending_timeout)
    free = Q(pending_since__isnull=True) | Q(pending_since__lt=stale)
    return Slot.objects.over_threshold(trigger_at).filter(free).order_by("pk")


def inactive_over_threshold(trigger_at: int) -> QuerySet[Slot]:
    """Inactive slots of :class:`DjangoChatStorage` whose whole history is over the threshold."""
    trigger = Coalesce("trigger_at", Value(trigger_at))
    return (
        Slot.objects.filter(namespace=DJANGO_NAMESPACE, active=False)
        .alias(trigger=trigger)
        .filter(last_seq__gt=F("trigger") * 2)
        .order_by("pk")
    )


def _limited(qs: QuerySet[Slot], limit: int | None) -> list[int]:
    ids = qs.values_list("pk", flat=True)
    return list(ids[:limit] if limit else ids)

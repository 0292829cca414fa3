"""Celery tasks of squad_memory (Celery mode). Each is a few lines over library code.

- :func:`summarize_slot` runs one claimed compression in a worker, with retries.
- :func:`sweep` re-enqueues slots left over the threshold (a Celery beat entry).
- :func:`enqueue_compression` is how the storage hands a claimed compression to a
  worker: it publishes after the transaction commits and never fails the save.

Tasks take ids and strings, never model instances, and are acknowledged late:
a worker killed mid-compression leaves the message to be delivered again, and
the claim's token makes a repeated delivery harmless.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from celery import Task, shared_task
from django.db import transaction

from squad_memory import background, buffer
from squad_memory.conf import app_settings

logger = logging.getLogger("squad_memory")

__all__ = ["enqueue_compression", "summarize_slot", "sweep"]

#: A publish happens on the request path: one quick retry, then give up (the sweep recovers).
PUBLISH_RETRY_POLICY: dict[str, float] = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.1,
    "interval_max": 0.1,
}


@shared_task(  # type: ignore[untyped-decorator]
    bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True
)
def summarize_slot(
    self: Task,
    slot_id: int,
    token: str,
    summarizer_path: str,
    keep_last: int,
    trigger_at: int | None = None,
) -> str:
    """Run the compression claimed with ``token``; retry with backoff if the summarizer fails.

    Returns the outcome (``applied``, ``stale``, ``failed``) or ``skipped`` when the
    claim was already released or replaced (a duplicate or stale task).
    """
    max_retries = int(app_settings.get("CELERY_MAX_RETRIES"))
    attempt = self.request.retries + 1
    outcome = background.run_claim(
        slot_id,
        token,
        summarizer_path,
        keep_last,
        attempt=attempt,
        last_attempt=attempt > max_retries,
        trigger_at=trigger_at,
    )
    if outcome is None:
        return "skipped"
    if outcome.error is not None and attempt <= max_retries:
        raise self.retry(countdown=background.backoff(attempt), max_retries=max_retries)
    return str(outcome.outcome)


@shared_task(ignore_result=True)  # type: ignore[untyped-decorator]
def sweep(activate: bool = False) -> dict[str, int]:
    """Claim and enqueue every slot over the threshold with nothing pending (beat entry)."""
    return background.sweep(activate=activate).as_dict()


def enqueue_compression(
    slot_id: int, token: str, summarizer_path: str, keep_last: int, trigger_at: int | None = None
) -> None:
    """Hand a claimed compression to a worker once the current transaction commits.

    Never raises: if the broker cannot be reached, the error is logged and the claim
    released, so the save that crossed the threshold succeeds and the slot shows
    nothing pending; the next crossing save or the sweep enqueues it again.
    """
    args = (slot_id, token, summarizer_path, keep_last, trigger_at)
    # robust: an error here is logged, never raised into the caller after its commit.
    transaction.on_commit(functools.partial(_publish, *args), robust=True)


def _publish(
    slot_id: int, token: str, summarizer_path: str, keep_last: int, trigger_at: int | None
) -> None:
    options: dict[str, Any] = {"retry": True, "retry_policy": PUBLISH_RETRY_POLICY}
    if app_settings.get("CELERY_QUEUE"):
        options["queue"] = app_settings.get("CELERY_QUEUE")
    try:
        summarize_slot.apply_async(
            (slot_id, token, summarizer_path, keep_last, trigger_at), **options
        )
    except Exception as exc:  # the broker is down or refuses: never fail the save
        logger.error(
            "Could not enqueue the compression of slot %s (%s: %s); the claim was released "
            "and the next save over the threshold or the sweep will enqueue it again.",
            slot_id,
            type(exc).__name__,
            exc,
        )
        buffer.release(slot_id, token, failed=False)

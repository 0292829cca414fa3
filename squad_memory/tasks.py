"""Celery mode: the only module of squad_memory that knows Celery.

- :class:`CeleryDispatcher` (``MODE = "celery"``) hands a claimed compression to
  a worker: it publishes after the caller's transaction commits, within
  ``PUBLISH_TIMEOUT`` seconds whatever the broker does, and never fails the save.
- :func:`summarize_slot` runs one claimed compression in a worker, with retries.
- :func:`sweep` re-dispatches slots left over the threshold (a Celery beat entry).

Tasks take ids and strings, never model instances, and are acknowledged late:
a worker killed mid-compression leaves the message to be delivered again, and
the claim's token makes a repeated delivery harmless.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import Task, shared_task

from squad_memory import compression, sweeping
from squad_memory.compression import Claim, Result
from squad_memory.conf import app_settings
from squad_memory.dispatch import Dispatcher
from squad_memory.models import Outcome
from squad_memory.policy import Policy
from squad_memory.summarizers import require_importable, resolve_or_failing

logger = logging.getLogger("squad_memory")

__all__ = ["CeleryDispatcher", "publish", "summarize_slot", "sweep"]

#: A publish happens on the request path: one quick retry, then give up (the sweep recovers).
PUBLISH_RETRY_POLICY: dict[str, float] = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.1,
    "interval_max": 0.1,
}


class CeleryDispatcher(Dispatcher):
    """Publishes each claimed compression for a worker (``queued`` or ``not_queued``)."""

    def __init__(self, policy: Policy) -> None:
        super().__init__(policy)
        self.path = require_importable(policy.summarizer)

    @property
    def claim_lease_seconds(self) -> float:
        # A queued claim waits for a worker; once running, the worker renews it briefly.
        return self.policy.queued_lease_seconds

    def start(self, claimed: Claim, trigger: str) -> Result:
        return publish(claimed, self.path, self.policy.trigger_at)


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

    Returns the outcome: ``applied``, ``stale``, ``failed``, or ``skipped`` when the
    claim was already released or replaced (a duplicate or stale task).
    """
    max_retries = app_settings.celery_max_retries
    attempt = self.request.retries + 1
    claimed = Claim(slot_id, token, keep_last)
    result = compression.run(
        claimed,
        resolve_or_failing(summarizer_path),
        trigger="celery",
        attempt=attempt,
        final=attempt > max_retries,
        lease_seconds=app_settings.claim_lease,
    )
    if result.error is not None and attempt <= max_retries:
        raise self.retry(countdown=sweeping.backoff(attempt), max_retries=max_retries)
    if result.applied and result.covered_seq is not None:
        _follow_up(claimed, result.covered_seq, summarizer_path, trigger_at)
    return str(result.outcome)


def _follow_up(done: Claim, covered: int, summarizer_path: str, trigger_at: int | None) -> None:
    """Saves that arrived meanwhile may have left the buffer over the threshold: go again."""
    again = compression.claim(
        done.slot_id,
        trigger_at or app_settings.trigger_at,
        done.keep_last,
        lease_seconds=app_settings.pending_timeout,
        after_seq=covered,
        trigger_tokens=app_settings.trigger_tokens,
    )
    if again is not None:
        publish(again, summarizer_path, trigger_at)


@shared_task(ignore_result=True)  # type: ignore[untyped-decorator]
def sweep(activate: bool = False) -> dict[str, int]:
    """Claim and dispatch every slot over the threshold with nothing pending (beat entry)."""
    return sweeping.sweep(activate=activate).as_dict()


def publish(claimed: Claim, summarizer_path: str, trigger_at: int | None) -> Result:
    """Publish a claimed compression, within ``PUBLISH_TIMEOUT`` seconds; never raises.

    If the broker refuses, fails or does not answer in time, the claim is released
    and the error logged, so the save that crossed the threshold succeeds and the
    slot shows nothing pending; the next crossing save or the sweep tries again.
    """
    args = (claimed.slot_id, claimed.token, summarizer_path, claimed.keep_last, trigger_at)
    options: dict[str, Any] = {"retry": True, "retry_policy": PUBLISH_RETRY_POLICY}
    if app_settings.celery_queue:
        options["queue"] = app_settings.celery_queue
    failure: list[BaseException] = []
    task = summarize_slot._get_current_object()  # bound to this thread's current Celery app

    def send() -> None:
        try:
            task.apply_async(args, **options)
        except BaseException as exc:  # reported by the caller's thread
            failure.append(exc)

    if task.app.conf.task_always_eager:  # no broker: the task runs here and now
        send()
    else:  # a broker that accepts and never answers must not hold the save
        thread = threading.Thread(target=send, daemon=True, name="squad-memory-publish")
        thread.start()
        thread.join(app_settings.publish_timeout)
        if thread.is_alive():
            failure.append(TimeoutError(f"no answer within {app_settings.publish_timeout:g} s"))
    if not failure:
        return Result(Outcome.QUEUED)
    logger.error(
        "Could not enqueue the compression of slot %s (%s: %s); the claim was released "
        "and the next save over the threshold or the sweep will enqueue it again.",
        claimed.slot_id,
        type(failure[0]).__name__,
        failure[0],
    )
    compression.release(claimed.slot_id, claimed.token, failed=False)
    return Result(Outcome.NOT_QUEUED, detail=f"{type(failure[0]).__name__}: {failure[0]}")

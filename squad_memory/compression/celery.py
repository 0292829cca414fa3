"""Celery mode (``MODE = "celery"``): compressions run by a Celery worker.

:func:`summarize_slot` (registered by ``squad_memory.tasks``) takes ids and strings and is
acknowledged late: a worker killed mid-compression leaves it to be delivered again, and the
claim's token makes a repeated delivery harmless. On Redis, each publish opens a connection
whose sockets time out after ``PUBLISH_TIMEOUT`` (unless ``broker_transport_options`` set
them), so a broker that hangs leaves no thread behind (a pooled one would block for good).
"""

from __future__ import annotations

from typing import Any

from celery import Task, shared_task

from squad_memory.compression.claims import Claim
from squad_memory.compression.dispatch import QueueDispatcher, backoff, follow_up, hand_off
from squad_memory.compression.runner import Result, run
from squad_memory.conf import app_settings
from squad_memory.summarizers import resolve_or_failing

__all__ = ["CeleryDispatcher", "backoff", "publish", "summarize_slot"]

#: A publish happens on the request path: one quick retry, then give up (the sweep recovers).
PUBLISH_RETRY_POLICY: dict[str, float] = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.1,
    "interval_max": 0.1,
}


class CeleryDispatcher(QueueDispatcher):
    """Publishes each claimed compression for a worker (``queued`` or ``not_queued``)."""

    def start(self, claimed: Claim, trigger: str) -> Result:
        return publish(claimed, self.path, self.policy.limits.trigger_at)


@shared_task(  # type: ignore[untyped-decorator]
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    name="squad_memory.tasks.summarize_slot",
)
def summarize_slot(
    self: Task,
    slot_id: int,
    token: str,
    summarizer_path: str,
    keep_last: int,
    trigger_at: int | None = None,
) -> str:
    """Run the compression claimed with ``token``, retrying with backoff if the summarizer
    fails; its outcome (``skipped``: the claim was released or replaced, a duplicate task)."""
    max_retries = app_settings.retries
    attempt = self.request.retries + 1
    claimed = Claim(slot_id, token, keep_last)
    result = run(
        claimed,
        resolve_or_failing(summarizer_path),
        trigger="celery",
        attempt=attempt,
        final=attempt > max_retries,
        lease_seconds=app_settings.claim_lease,
    )
    if result.error is not None and attempt <= max_retries:
        raise self.retry(countdown=backoff(attempt), max_retries=max_retries)
    follow_up(claimed, result, summarizer_path, trigger_at, publish)
    return str(result.outcome)


def publish(claimed: Claim, summarizer_path: str, trigger_at: int | None) -> Result:
    """Publish a claimed compression, within ``PUBLISH_TIMEOUT`` seconds; never raises
    (see :func:`~squad_memory.compression.dispatch.hand_off`)."""
    args = (claimed.slot_id, claimed.token, summarizer_path, claimed.keep_last, trigger_at)
    options: dict[str, Any] = {"retry": True, "retry_policy": PUBLISH_RETRY_POLICY}
    if app_settings.raw("CELERY_QUEUE"):
        options["queue"] = app_settings.raw("CELERY_QUEUE")
    task = summarize_slot._get_current_object()  # bound to this thread's current Celery app
    eager = task.app.conf.task_always_eager  # no broker: the task runs here and now
    return hand_off(claimed, lambda: _send(task, args, options), in_thread=not eager)


def _send(task: Any, args: tuple[Any, ...], options: dict[str, Any]) -> None:
    app = task.app
    if app.conf.task_always_eager or app.connection_for_write().transport.driver_type != "redis":
        task.apply_async(args, **options)  # AMQP's pooled connection times out by itself
        return
    timeout = app_settings.publish_timeout
    bounded = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    bounded.update(app.conf.broker_transport_options or {})
    with app.connection_for_write(transport_options=bounded) as connection:
        task.apply_async(args, connection=connection, **options)

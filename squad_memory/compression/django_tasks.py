"""Tasks mode (``MODE = "tasks"``): compressions run through Django's Tasks framework
(``django.tasks``; on Django 5.2 the ``django-tasks`` backport, ``pip install
'squad-memory[tasks]'``). With django-tasks-db's backend and ``manage.py db_worker`` they run in
the background with no broker; with the immediate backend, right after the saving commit.

:data:`summarize_slot` runs one claim; a failed attempt enqueues the next itself,
``backoff(attempt)`` seconds later, up to ``RETRIES`` retries, keeping the claim
meanwhile (on a backend that cannot defer, the first attempt is final). A worker killed
mid-compression leaves its task marked running for good (django-tasks-db does not take it back) and
its claim to run out ``CLAIM_LEASE``, after which a save or the sweep enqueues it again.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import timedelta
from typing import Any

from django.db import router
from django.utils import timezone

from squad_memory.compression.claims import Claim
from squad_memory.compression.dispatch import QueueDispatcher, backoff, follow_up, hand_off
from squad_memory.compression.lease import renew
from squad_memory.compression.runner import Result, run
from squad_memory.conf import SETTING_NAME, app_settings
from squad_memory.models import Outcome
from squad_memory.summarizers import resolve_or_failing

try:
    from django.tasks import task, task_backends
    from django.tasks.backends.immediate import ImmediateBackend
except ImportError:  # Django 5.2
    try:
        from django_tasks import task, task_backends  # type: ignore[no-redef,assignment]
        from django_tasks.backends.immediate import ImmediateBackend  # type: ignore[assignment]
    except ImportError as exc:
        raise ImportError(
            "MODE 'tasks' needs Django 6 or, on Django 5.2, the django-tasks backport: "
            "pip install 'squad-memory[tasks]'"
        ) from exc

__all__ = ["TasksDispatcher", "enqueue", "summarize_slot"]


class TasksDispatcher(QueueDispatcher):
    """Enqueues each claimed compression as a task (``queued`` or ``not_queued``; what
    ran, with a backend that runs tasks as they are enqueued)."""

    def start(self, claimed: Claim, trigger: str) -> Result:
        return enqueue(claimed, self.path, self.policy.limits.trigger_at)

    def waiting(self, tokens: Collection[str]) -> set[str]:
        """With django-tasks-db: the tokens of compressions whose task is still ``READY``."""
        if not tokens or not _tasks_db():
            return set()
        found: set[str] = set()
        ordered = sorted(tokens)
        for start in range(0, len(ordered), 500):  # within SQLite's limit of variables
            rows = _our_rows().filter(
                status="READY", args_kwargs__args__1__in=ordered[start : start + 500]
            )
            found.update(rows.values_list("args_kwargs__args__1", flat=True))
        return found

    def prune(self) -> int:
        """With django-tasks-db: delete the rows of compressions finished over
        ``TASKS_RESULTS_TTL`` seconds ago (other tasks' rows stay)."""
        ttl = app_settings.tasks_results_ttl
        if ttl is None or not _tasks_db():
            return 0
        cutoff = timezone.now() - timedelta(seconds=ttl)
        finished = _our_rows().filter(status__in=("SUCCESSFUL", "FAILED"), finished_at__lt=cutoff)
        return int(finished.delete()[0])

    @classmethod
    def check(cls) -> list[str]:
        try:
            summarize_slot.using(**_options())
        except Exception as exc:  # an unknown alias, a queue or priority the backend refuses
            return [
                f"{SETTING_NAME}['TASKS_BACKEND'], ['TASKS_QUEUE'] or ['TASKS_PRIORITY']: {exc}"
            ]
        return []


@task()
def summarize_slot(
    slot_id: int,
    token: str,
    summarizer_path: str,
    keep_last: int,
    trigger_at: int | None = None,
    attempt: int = 1,
) -> str:
    """Run the compression claimed with ``token`` (see the module); returns its outcome."""
    retry = attempt <= app_settings.retries and _backend().supports_defer
    claimed = Claim(slot_id, token, keep_last)
    # Running now: a worker killed from here on frees the slot within one CLAIM_LEASE.
    renew(slot_id, token, app_settings.claim_lease)
    result = run(
        claimed,
        resolve_or_failing(summarizer_path),
        trigger="tasks",
        attempt=attempt,
        final=not retry,
        lease_seconds=app_settings.claim_lease,
    )
    if result.error is not None and retry:
        delay = backoff(attempt)
        renew(slot_id, token, delay + app_settings.pending_timeout)  # held until the retry
        enqueue(claimed, summarizer_path, trigger_at, attempt=attempt + 1, delay=delay)
    else:
        follow_up(claimed, result, summarizer_path, trigger_at, enqueue)
    return str(result.outcome)


def enqueue(
    claimed: Claim,
    summarizer_path: str,
    trigger_at: int | None,
    *,
    attempt: int = 1,
    delay: float = 0.0,
) -> Result:
    """Enqueue a claimed compression within ``PUBLISH_TIMEOUT`` seconds, ``delay`` seconds
    ahead; never raises (see :func:`~squad_memory.compression.dispatch.hand_off`)."""
    args = (claimed.slot_id, claimed.token, summarizer_path, claimed.keep_last, trigger_at)
    run_after = timezone.now() + timedelta(seconds=delay) if delay else None

    def send() -> Outcome | None:
        done = summarize_slot.using(**_options(), run_after=run_after).enqueue(*args, attempt)
        if done.status == "SUCCESSFUL":  # it ran as it was enqueued
            return Outcome(done.return_value)
        return Outcome.FAILED if done.status == "FAILED" else None

    return hand_off(claimed, send, in_thread=not _on_this_thread())


def _options() -> dict[str, Any]:
    return {
        "backend": str(app_settings.raw("TASKS_BACKEND")),
        "queue_name": str(app_settings.raw("TASKS_QUEUE")),
        "priority": int(app_settings.raw("TASKS_PRIORITY")),
    }


def _backend() -> Any:
    return task_backends[str(app_settings.raw("TASKS_BACKEND"))]


def _tasks_db() -> bool:
    """Whether the backend is django-tasks-db's (a table this module can read)."""
    try:
        return type(_backend()).__module__.startswith("django_tasks_db.")
    except Exception:  # an unknown alias: nothing to read (enqueueing fails and says why)
        return False


def _our_rows() -> Any:
    """django-tasks-db's rows of :data:`summarize_slot` on the ``TASKS_BACKEND`` backend."""
    from django_tasks_db.models import DBTaskResult

    rows = DBTaskResult.objects.using(router.db_for_write(DBTaskResult))
    backend = str(app_settings.raw("TASKS_BACKEND"))
    return rows.filter(task_path=summarize_slot.module_path, backend_name=backend)


def _on_this_thread() -> bool:
    """Whether to enqueue on the caller's thread rather than one bounded by
    ``PUBLISH_TIMEOUT``: for a backend that runs the task as it is enqueued (the timeout must
    not cut it short), and for django-tasks-db, which writes a row through this thread's
    connection (a thread of its own opens one: 4 ms instead of 20 on PostgreSQL)."""
    try:
        return _tasks_db() or isinstance(_backend(), ImmediateBackend)
    except Exception:  # an unknown alias: enqueueing fails and says why
        return False

"""Dispatchers: how a claimed compression gets run, chosen by ``MODE`` like a Django backend.

``MODE`` is ``"inline"``, ``"celery"``, ``"tasks"`` (Django's Tasks framework), or the
dotted path of a :class:`Dispatcher` subclass, as ``EMAIL_BACKEND`` names a class; callers
never branch on it. A subclass implements :meth:`~Dispatcher.start`, which must:

- run or hand off the claim in bounded time and answer with a
  :class:`~squad_memory.compression.runner.Result`: what ran (``applied``, ``failed``,
  ``stale``, ``skipped``) or what was handed off (``queued``, ``not_queued``), never
  raising for a queue that fails (:func:`hand_off` does this for a queue);
- have whatever runs it call :func:`squad_memory.compression.run`, which releases the
  claim on every way out (as a failed hand-off does), so a save or the sweep tries again;
- lose nothing silently: a dead worker's claim runs out its lease
  (:attr:`Dispatcher.claim_lease_seconds` while queued, ``CLAIM_LEASE`` once running).

:meth:`Dispatcher.dispatch` calls ``start`` once the caller's transaction commits: never
while the slot's row is locked, nor before the messages it summarizes are visible. An async
caller outside a transaction awaits :meth:`Dispatcher.astart` instead: ``start`` on a database
thread, unless the dispatcher has a better way (inline: the summarizer off that thread).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from dataclasses import replace

from django.db import connections, transaction
from django.utils.module_loading import import_string

from squad_memory.compression.claims import Claim, claim, release
from squad_memory.compression.policy import Policy
from squad_memory.compression.runner import Result, arun, run
from squad_memory.conf import SETTING_NAME, app_settings
from squad_memory.exceptions import ConfigurationError
from squad_memory.models import Limits, Outcome, Slot
from squad_memory.summarizers import require_importable
from squad_memory.threads import database

logger = logging.getLogger("squad_memory")

#: The short names ``MODE`` accepts, and the classes they stand for.
DISPATCHERS = {
    "inline": "squad_memory.compression.dispatch.InlineDispatcher",
    "celery": "squad_memory.compression.celery.CeleryDispatcher",
    "tasks": "squad_memory.compression.django_tasks.TasksDispatcher",
}


class Dispatcher:
    """Runs claimed compressions. Subclasses implement :meth:`start`."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    @property
    def claim_lease_seconds(self) -> float:
        """The lease a claim gets when taken: long enough to reach whoever runs it."""
        return self.policy.lease_seconds

    def dispatch(self, claimed: Claim, *, trigger: str) -> Result:
        """Run or hand off ``claimed`` once the caller's transaction commits (at once in
        autocommit); inside an ``atomic()`` block the answer is ``deferred``."""
        done: list[Result] = []
        transaction.on_commit(
            lambda: done.append(self.start(claimed, trigger)), using=Slot.objects.write_db()
        )
        return done[0] if done else Result(Outcome.DEFERRED)

    def start(self, claimed: Claim, trigger: str) -> Result:
        raise NotImplementedError

    async def astart(self, claimed: Claim, trigger: str) -> Result:
        """:meth:`start` for an async caller, with no transaction open."""
        return await database(self.start, claimed, trigger)

    def waiting(self, tokens: Collection[str]) -> set[str]:
        """Of the claims ``tokens`` name, those whose compression still waits in the queue (the
        sweep renews their claims instead of enqueueing them twice); None known by default."""
        return set()

    def prune(self) -> int:
        """Delete what the queue keeps of finished compressions (the sweep calls it); how many."""
        return 0

    @classmethod
    def check(cls) -> list[str]:
        """What is wrong with the settings this dispatcher reads (the system checks
        report each as ``squad_memory.E006``)."""
        return []


class InlineDispatcher(Dispatcher):
    """Compresses in the caller's process: on its thread, right after its commit; for an async
    caller, in its event loop (the database work on a database thread)."""

    def start(self, claimed: Claim, trigger: str) -> Result:
        return run(
            claimed,
            self.policy.summarizer,
            trigger=trigger,
            lease_seconds=self.policy.lease_seconds,
        )

    async def astart(self, claimed: Claim, trigger: str) -> Result:
        """The summarizer awaited in the caller's loop, or on a summarizer thread."""
        return await arun(
            claimed,
            self.policy.summarizer,
            trigger=trigger,
            lease_seconds=self.policy.lease_seconds,
        )


class QueueDispatcher(Dispatcher):
    """Base of the dispatchers that hand compressions to workers, which import the
    summarizer by its dotted path (:attr:`path`)."""

    def __init__(self, policy: Policy) -> None:
        super().__init__(policy)
        self.path = require_importable(policy.summarizer)

    @property
    def claim_lease_seconds(self) -> float:
        # A queued claim waits for a worker; once running, the worker renews it briefly.
        return app_settings.pending_timeout


def hand_off(
    claimed: Claim, send: Callable[[], Outcome | None], *, in_thread: bool = True
) -> Result:
    """Hand a claimed compression to a queue with ``send``, never raising: ``queued`` (or what
    ``send`` returns, for a compression that ran as it was sent), or ``not_queued`` when it
    raises or takes over ``PUBLISH_TIMEOUT`` seconds (the claim released, the error logged).

    ``send`` runs on a thread of its own (``in_thread=False``: on this one), so a queue that
    never answers cannot hold the save; it must give up soon after by itself (socket
    timeouts), or its thread stays behind."""
    failure: list[BaseException] = []
    answer: list[Outcome | None] = []
    # On this thread, an interrupt or exit propagates; on its own, the caller reports it.
    caught: type[BaseException] = BaseException if in_thread else Exception

    def attempt() -> None:
        try:
            answer.append(send())
        except caught as exc:
            failure.append(exc)
        finally:
            if in_thread:
                connections.close_all()

    if not in_thread:
        attempt()
    else:
        thread = threading.Thread(target=attempt, daemon=True, name="squad-memory-publish")
        thread.start()
        thread.join(app_settings.publish_timeout)
        if thread.is_alive():
            failure.append(TimeoutError(f"no answer within {app_settings.publish_timeout:g} s"))
    if not failure:
        return Result((answer or [None])[0] or Outcome.QUEUED)
    detail = f"{type(failure[0]).__name__}: {failure[0]}"
    logger.error(
        "Could not enqueue the compression of slot %s (%s); the claim was released "
        "and the next save over the threshold or the sweep will enqueue it again.",
        claimed.slot_id,
        detail,
    )
    release(claimed.slot_id, claimed.token, failed=False)
    return Result(Outcome.NOT_QUEUED, detail=detail)


def follow_up(
    done: Claim,
    result: Result,
    summarizer_path: str,
    trigger_at: int | None,
    send: Callable[[Claim, str, int | None], object],
) -> None:
    """After a worker applied ``done``, claim again if saves meanwhile left the buffer over the
    threshold (``trigger_at``: the storage's own), and hand the new claim to ``send``."""
    if not result.applied or result.covered_seq is None:
        return
    limits = Limits.from_settings()
    if trigger_at:
        limits = replace(limits, trigger_at=trigger_at)
    lease, after = app_settings.pending_timeout, result.covered_seq
    if (again := claim(done.slot_id, limits, lease_seconds=lease, after_seq=after)) is not None:
        send(again, summarizer_path, trigger_at)


def backoff(attempt: int) -> float:
    """Seconds before a queued compression retries after failed ``attempt`` (1-based): doubling
    from ``RETRY_BACKOFF`` up to ``RETRY_BACKOFF_MAX`` (Celery and tasks mode)."""
    base = app_settings.retry_backoff
    return min(app_settings.retry_backoff_max, base * 2.0 ** (attempt - 1))


def dispatcher_class(mode: str) -> type[Dispatcher]:
    """The class ``MODE`` names: a short name of :data:`DISPATCHERS` or a dotted path."""
    path = DISPATCHERS.get(mode, mode)
    try:
        found = import_string(path)
    except ImportError as exc:
        short = ", ".join(DISPATCHERS)
        raise ConfigurationError(
            f"{SETTING_NAME}['MODE'] must be one of {short} or the dotted path of a Dispatcher "
            f"class; {mode!r} cannot be used: {exc}"
        ) from exc
    if not (isinstance(found, type) and issubclass(found, Dispatcher)):
        raise ConfigurationError(
            f"{SETTING_NAME}['MODE'] = {mode!r} is not a subclass of "
            "squad_memory.compression.Dispatcher."
        )
    return found


def get_dispatcher(policy: Policy) -> Dispatcher:
    """The dispatcher of ``policy.mode``."""
    return dispatcher_class(policy.mode)(policy)

"""Dispatchers: how a claimed compression gets run, chosen once from ``MODE``.

Like Django's e-mail backends, ``MODE`` names a class by dotted path (see
:data:`DISPATCHERS`); callers never branch on the mode. A dispatcher takes a
:class:`~squad_memory.compression.Claim` and answers with a
:class:`~squad_memory.compression.Result`.

Both dispatchers act when the caller's transaction commits
(``transaction.on_commit``), which in autocommit is at once: the summarizer
never runs, and no task is published, while the slot's row lock is held or
before the messages it summarizes are visible to others.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction
from django.utils.module_loading import import_string

from squad_memory import compression
from squad_memory.compression import Claim, Result
from squad_memory.exceptions import ConfigurationError
from squad_memory.history import db_alias
from squad_memory.models import Outcome
from squad_memory.policy import Policy

#: ``MODE`` -> the dispatcher class that runs compressions in that mode.
DISPATCHERS = {
    "inline": "squad_memory.dispatch.InlineDispatcher",
    "celery": "squad_memory.tasks.CeleryDispatcher",
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
        """Run or hand off ``claimed`` once the caller's transaction commits.

        Inside an ``atomic()`` block the answer is ``deferred`` (it happens on commit).
        """
        done: list[Result] = []
        transaction.on_commit(lambda: done.append(self.start(claimed, trigger)), using=db_alias())
        return done[0] if done else Result(Outcome.DEFERRED)

    def start(self, claimed: Claim, trigger: str) -> Result:
        raise NotImplementedError


class InlineDispatcher(Dispatcher):
    """Compresses on the caller's thread, right after its commit."""

    def start(self, claimed: Claim, trigger: str) -> Result:
        return compression.run(
            claimed,
            self.policy.summarizer,
            trigger=trigger,
            lease_seconds=self.policy.lease_seconds,
        )


def get_dispatcher(policy: Policy) -> Dispatcher:
    """The dispatcher of ``policy.mode`` (see :data:`DISPATCHERS`)."""
    try:
        path = DISPATCHERS[policy.mode]
    except KeyError:
        raise ConfigurationError(
            f"mode must be one of {', '.join(DISPATCHERS)}; got {policy.mode!r}."
        ) from None
    factory: Callable[[Policy], Dispatcher] = import_string(path)
    return factory(policy)

"""The sweep, which a project schedules every few minutes (cron running
``manage.py squad_memory_sweep``, or the Celery beat task ``squad_memory.tasks.sweep``;
the system check ``squad_memory.W003`` warns where no beat entry runs it): slots left over
their threshold with nothing pending (a broker that was down, a worker that died, a failed
compression, a lease run out) are compressed again, ``RETAIN_DAYS`` is applied, and expired
``Idempotency-Key`` answers are deleted. Nothing else deletes old data, in any mode.
"""

from __future__ import annotations

import logging

from squad_memory.compression import SweepReport, redispatch
from squad_memory.operations import forgetting, idempotency
from squad_memory.storage import get_storage

logger = logging.getLogger("squad_memory")

__all__ = ["SweepReport", "sweep"]


def sweep(*, activate: bool = False, limit: int | None = None) -> SweepReport:
    """Compress every active slot over its threshold with nothing pending (``activate``: and the
    inactive ones of ``DjangoChatStorage``), apply ``RETAIN_DAYS``, delete expired keys."""
    dispatcher = get_storage().memory.dispatcher
    assert dispatcher is not None
    report = redispatch(dispatcher, activate_inactive=activate, limit=limit)
    logger.log(
        # Debug unless compressions lag: the command prints its own summary line.
        logging.WARNING if report.waiting else logging.DEBUG,
        "Sweep compressed or enqueued %s slot(s), activated %s; %s still queued after "
        "PENDING_TIMEOUT (lagging: is a worker running?); %s finished task row(s) deleted.",
        *(report.enqueued, report.activated, report.waiting, report.pruned),
    )
    idempotency.purge_expired()  # first: a RETAIN_DAYS out of range raises below
    forgetting.purge()  # RETAIN_DAYS: drop slots idle for longer (no-op when unset)
    return report

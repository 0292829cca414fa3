"""The sweep: slots left over the threshold with nothing pending get compressed.

A broker that was down, a worker that died, a compression that failed: each
leaves a slot over its threshold with no live claim. The sweep (a Celery beat
entry or ``manage.py squad_memory_sweep``) claims each and hands it to the
configured dispatcher. A claim whose lease ran out counts as nothing pending.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

from squad_memory import compression, forgetting, idempotency
from squad_memory.conf import app_settings
from squad_memory.models import Slot
from squad_memory.storage import get_storage

logger = logging.getLogger("squad_memory")

__all__ = ["SweepReport", "backoff", "sweep"]


def backoff(attempt: int) -> float:
    """Seconds before retrying after failed ``attempt`` (1-based): exponential, capped."""
    base, cap = app_settings.celery_retry_backoff, app_settings.celery_retry_backoff_max
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

    With ``activate=True``, inactive slots of :class:`DjangoChatStorage` whose
    visible history is over the threshold are activated too. Uses the summarizer,
    mode, ``TRIGGER_AT`` and ``KEEP_LAST`` of ``settings.SQUAD_MEMORY``.
    """
    memory = get_storage().memory
    policy, dispatcher = memory.policy, memory.dispatcher
    assert policy is not None and dispatcher is not None
    report = SweepReport()
    lease = dispatcher.claim_lease_seconds
    for slot_id in _ids(
        Slot.objects.over_threshold(policy.trigger_at, policy.trigger_tokens).claim_free(
            app_settings.pending_timeout
        ),
        limit,
    ):
        claimed = compression.claim(
            slot_id,
            policy.trigger_at,
            policy.keep_last,
            lease_seconds=lease,
            trigger_tokens=policy.trigger_tokens,
        )
        if claimed is not None:
            dispatcher.dispatch(claimed, trigger="sweep")
            report.enqueued += 1
    if activate:
        inactive = Slot.objects.inactive_over_threshold(policy.trigger_at, policy.trigger_tokens)
        for slot_id in _ids(inactive, limit):
            _, claimed = compression.activate(
                slot_id,
                policy.trigger_at,
                policy.keep_last,
                lease_seconds=lease,
                default_trigger=policy.trigger_at,
                trigger_tokens=policy.trigger_tokens,
            )
            if claimed is not None:
                dispatcher.dispatch(claimed, trigger="sweep")
                report.activated += 1
    forgetting.purge()  # RETAIN_DAYS: drop slots idle for longer (no-op when unset)
    idempotency.purge_expired()  # stored Idempotency-Key answers past IDEMPOTENCY_TTL
    logger.info(
        "Sweep compressed or enqueued %s slot(s), activated %s.", report.enqueued, report.activated
    )
    return report


def _ids(slots: object, limit: int | None) -> list[int]:
    ids = slots.order_by("pk").values_list("pk", flat=True)  # type: ignore[attr-defined]
    return list(ids[:limit] if limit else ids)

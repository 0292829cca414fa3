"""The sweep's compression half: dispatch again what was left over the threshold (a claim
whose process died, a publish that failed, a slot over it with nothing pending)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from django.db.models import QuerySet

from squad_memory.compression.claims import activate, claim
from squad_memory.compression.dispatch import Dispatcher
from squad_memory.compression.lease import renew
from squad_memory.models import Slot


@dataclass
class SweepReport:
    """What a sweep did: slots compressed or enqueued, inactive slots it activated, queued
    compressions still waiting for a worker past their claim's lease (their claims renewed: a
    backlog, or no worker running), and finished task rows it deleted."""

    enqueued: int = 0
    activated: int = 0
    waiting: int = 0
    pruned: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def redispatch(
    dispatcher: Dispatcher, *, activate_inactive: bool = False, limit: int | None = None
) -> SweepReport:
    """Claim and dispatch every active slot over its threshold with no live claim
    (``activate_inactive``: and activate the inactive ``DjangoChatStorage`` slots over it)."""
    limits, lease = dispatcher.policy.limits, dispatcher.claim_lease_seconds
    report = SweepReport()
    slots = Slot.objects.using(Slot.objects.write_db())
    found = _ids_and_tokens(slots.over_threshold(limits).claim_free(), limit)
    queued = dispatcher.waiting({token for _, token in found if token})
    for slot_id, token in found:
        if token in queued:  # still in the queue: keep its claim rather than enqueue it twice
            report.waiting += renew(slot_id, token, lease)
        elif (claimed := claim(slot_id, limits, lease_seconds=lease)) is not None:
            dispatcher.dispatch(claimed, trigger="sweep")
            report.enqueued += 1
    if activate_inactive:
        for slot_id, _ in _ids_and_tokens(slots.inactive_over_threshold(limits), limit):
            _, claimed = activate(slot_id, limits, lease_seconds=lease)
            if claimed is not None:
                dispatcher.dispatch(claimed, trigger="sweep")
                report.activated += 1
    report.pruned = dispatcher.prune()
    return report


def _ids_and_tokens(slots: QuerySet[Slot], limit: int | None) -> list[tuple[int, str]]:
    rows = slots.order_by("pk").values_list("pk", "pending_token")
    return list(rows[:limit] if limit else rows)

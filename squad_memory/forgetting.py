"""Forgetting and retention: erase a person's conversations, or those idle too long.

Every deletion goes slot by slot. A slot's raw messages go first, in batches
by sequence-number range (each batch one short statement in its own
transaction, using the ``(slot, seq)`` index), then, under the slot's row lock
held only for that moment, whatever a concurrent save added meanwhile, the
compression log and the slot row itself. No statement holds locks over a whole
history, so saves to other slots go on undisturbed.

Each deletion is logged on the ``squad_memory`` logger with who asked, the scope
and the counts, never the content, so an operator can show that it happened.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from django.apps import apps
from django.db import transaction
from django.db.models import Model, Q, QuerySet
from django.utils import timezone

from squad_memory.conf import app_settings
from squad_memory.models import Compression, Message, Slot

logger = logging.getLogger("squad_memory")

#: Rows per DELETE statement (messages) and slots per listing query.
BATCH_SIZE = 1000

Progress = Callable[["ForgetReport"], None]


@dataclass
class ForgetReport:
    """Rows deleted (or, in a dry run, that would be) per table."""

    slots: int = 0
    messages: int = 0
    compressions: int = 0
    idempotency_keys: int = 0
    dry_run: bool = False

    def as_dict(self) -> dict[str, int]:
        counts = asdict(self)
        counts.pop("dry_run")
        return counts

    def tables(self) -> dict[str, int]:
        """The counts keyed by database table name."""
        tables = {
            Slot._meta.db_table: self.slots,
            Message._meta.db_table: self.messages,
            Compression._meta.db_table: self.compressions,
        }
        model = idempotency_model()
        if model is not None:
            tables[model._meta.db_table] = self.idempotency_keys
        return tables

    def describe(self) -> str:
        return ", ".join(f"{table}: {count}" for table, count in self.tables().items())


@dataclass(frozen=True)
class Scope:
    """Which slots a deletion covers: a user, optionally narrowed; ``namespace=None`` is all."""

    user_id: str
    session_id: str | None = None
    agent_id: str | None = None
    namespace: str | None = None

    def slots(self) -> QuerySet[Slot]:
        lookups = {"user_id": self.user_id}
        for name in ("session_id", "agent_id", "namespace"):
            if getattr(self, name) is not None:
                lookups[name] = getattr(self, name)
        return Slot.objects.filter(**lookups)

    def describe(self) -> str:
        parts = [f"{k}={v!r}" for k, v in asdict(self).items() if v is not None]
        return " ".join(parts)


def forget(
    user_id: str,
    session_id: str | None = None,
    agent_id: str | None = None,
    *,
    namespace: str | None = None,
    dry_run: bool = False,
    batch_size: int = BATCH_SIZE,
    actor: str = "code",
    progress: Progress | None = None,
) -> ForgetReport:
    """Delete every slot of ``user_id`` (narrowed by session, agent, namespace) with its
    raw messages, compression log and stored idempotency keys; nothing of another user.

    ``actor`` names who asked (an operator, a command, an API user) for the log line.
    ``progress`` is called with the running report after each batch of slots.
    """
    scope = Scope(user_id, session_id, agent_id, namespace)
    keys = _idempotency_keys(scope, dry_run)
    report = _delete(scope.slots(), dry_run, batch_size, progress)
    report.idempotency_keys += keys
    _log(actor, scope.describe(), report)
    return report


def forget_slot(slot: Slot, *, actor: str, batch_size: int = BATCH_SIZE) -> ForgetReport:
    """Delete one slot with everything stored for it (the API's and the admin's delete)."""
    scope = Scope(slot.user_id, slot.session_id, slot.agent_id, slot.namespace)
    keys = _idempotency_keys(scope, False)
    report = _delete(Slot.objects.filter(pk=slot.pk), False, batch_size, None)
    report.idempotency_keys += keys
    _log(actor, f"slot={slot.pk} {scope.describe()}", report)
    return report


def purge_idle(
    days: float,
    now: datetime | None = None,
    *,
    dry_run: bool = False,
    batch_size: int = BATCH_SIZE,
    actor: str = "retention",
    progress: Progress | None = None,
) -> ForgetReport:
    """Delete the slots with no activity for more than ``days`` days before ``now``."""
    cutoff = (now or timezone.now()) - timedelta(days=days)
    idle = Slot.objects.filter(updated_at__lt=cutoff)
    report = _delete(idle, dry_run, batch_size, progress, still=Q(updated_at__lt=cutoff))
    _log(actor, f"idle before {cutoff.isoformat()}", report)
    return report


def purge(now: datetime | None = None, *, dry_run: bool = False) -> ForgetReport | None:
    """Apply ``RETAIN_DAYS`` (read live); None when it is unset (keep forever)."""
    days = app_settings.retain_days
    if days is None:
        return None
    return purge_idle(days, now, dry_run=dry_run)


def idempotency_model() -> type[Model] | None:
    """The stored idempotency keys' model, where this version of the app has one."""
    return apps.get_app_config("squad_memory").models.get("idempotencykey")


def _delete(
    slots: QuerySet[Slot],
    dry_run: bool,
    batch_size: int,
    progress: Progress | None,
    still: Q | None = None,
) -> ForgetReport:
    report = ForgetReport(dry_run=dry_run)
    for slot_ids in _id_batches(slots, batch_size):
        if dry_run:
            _count(slot_ids, report)
        else:
            for slot_id in slot_ids:
                _delete_slot(slot_id, batch_size, report, still or Q())
        if progress is not None:
            progress(report)
    return report


def _id_batches(slots: QuerySet[Slot], size: int) -> Iterator[list[int]]:
    """Slot ids in ascending batches (keyset paging: no OFFSET, no list of every id)."""
    last = 0
    while True:
        ids = list(slots.filter(pk__gt=last).order_by("pk").values_list("pk", flat=True)[:size])
        if not ids:
            return
        yield ids
        last = ids[-1]


def _count(slot_ids: list[int], report: ForgetReport) -> None:
    report.slots += len(slot_ids)
    report.messages += Message.objects.filter(slot_id__in=slot_ids).count()
    report.compressions += Compression.objects.filter(slot_id__in=slot_ids).count()


def _delete_slot(slot_id: int, batch_size: int, report: ForgetReport, still: Q) -> None:
    last_seq = Slot.objects.filter(pk=slot_id).filter(still).values_list("last_seq", flat=True)
    top = last_seq.first()
    if top is None:  # gone meanwhile, or no longer matching (a save made it recent)
        return
    for low in range(0, top, batch_size):
        rows = Message.objects.filter(slot_id=slot_id, seq__gt=low, seq__lte=low + batch_size)
        report.messages += rows.delete()[0]
    with transaction.atomic():
        if not Slot.objects.select_for_update().filter(pk=slot_id).exists():
            return
        report.messages += Message.objects.filter(slot_id=slot_id).delete()[0]
        report.compressions += Compression.objects.filter(slot_id=slot_id).delete()[0]
        _, per_model = Slot.objects.filter(pk=slot_id).delete()
    report.slots += per_model.get(Slot._meta.label, 0)
    model = idempotency_model()  # keys tied to the slot by a cascading foreign key
    if model is not None:
        report.idempotency_keys += per_model.get(model._meta.label, 0)


def _idempotency_keys(scope: Scope, dry_run: bool) -> int:
    """Delete the scope's stored idempotency keys, matched by whatever key fields the
    model has (its slot, or user/session/agent/namespace columns)."""
    model = idempotency_model()
    if model is None:
        return 0
    names = {f.name for f in model._meta.get_fields()}
    lookups: dict[str, Any] = {}
    if "slot" in names and "user_id" not in names:
        lookups["slot__in"] = scope.slots()
    for name, value in asdict(scope).items():
        if name in names and value is not None:
            lookups[name] = value
    if not lookups:
        return 0
    rows = model._default_manager.filter(**lookups)
    return rows.count() if dry_run else int(rows.delete()[0])


def _log(actor: str, scope: str, report: ForgetReport) -> None:
    verb = "Would forget (dry run)" if report.dry_run else "Forgot"
    logger.info("%s by %s: %s; %s", verb, actor, scope, report.describe())

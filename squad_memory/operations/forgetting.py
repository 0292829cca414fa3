"""Forgetting and retention: erase a person's conversations, or those idle too long, slot by
slot: its raw messages first, in short batches by sequence number (each its own statement
on the ``(slot, seq)`` index), then, under the slot's row lock held only for that moment,
what a concurrent save added meanwhile, the compression log and the slot row. No statement
locks a whole history. Each deletion is logged with who asked, the scope and the counts,
never the content, so an operator can show that it happened.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from squad_memory.conf import app_settings, number_problem
from squad_memory.exceptions import ConfigurationError
from squad_memory.models import Compression, IdempotencyKey, Message, Slot


def _db() -> str:
    """The database every read that decides a deletion, and every deletion, goes to."""
    return Slot.objects.write_db()


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
        return {name: count for name, count in asdict(self).items() if name != "dry_run"}

    def tables(self) -> dict[str, int]:
        """The counts keyed by database table name."""
        return {
            Slot._meta.db_table: self.slots,
            Message._meta.db_table: self.messages,
            Compression._meta.db_table: self.compressions,
            IdempotencyKey._meta.db_table: self.idempotency_keys,
        }

    def describe(self) -> str:
        return ", ".join(f"{table}: {count}" for table, count in self.tables().items())


@dataclass(frozen=True)
class Scope:
    """Which slots a deletion covers: a user, optionally narrowed; ``namespace=None`` is all."""

    user_id: str
    session_id: str | None = None
    agent_id: str | None = None
    namespace: str | None = None

    def lookups(self) -> dict[str, str]:
        return {name: value for name, value in asdict(self).items() if value is not None}

    def slots(self) -> QuerySet[Slot]:
        return Slot.objects.using(_db()).filter(**self.lookups())

    def describe(self) -> str:
        return " ".join(f"{name}={value!r}" for name, value in self.lookups().items())


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
    """Delete every slot of ``user_id`` (narrowed by session, agent, namespace) with its raw
    messages, compression log and the stored answers of its keyed posts (they hold the
    messages' text); nothing of another user. ``actor`` names who asked, for the log line;
    ``progress`` gets the running report after each batch of slots."""
    scope = Scope(user_id, session_id, agent_id, namespace)
    report = _delete(scope.slots(), dry_run, batch_size, progress)
    _log(actor, scope.describe(), report)
    return report


def forget_slot(slot: Slot, *, actor: str, batch_size: int = BATCH_SIZE) -> ForgetReport:
    """Delete one slot with everything stored for it (the API's and the admin's delete)."""
    scope = Scope(slot.user_id, slot.session_id, slot.agent_id, slot.namespace)
    report = _delete(Slot.objects.using(_db()).filter(pk=slot.pk), False, batch_size, None)
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
    """Delete the slots with no activity for more than ``days`` days before ``now``
    (:class:`ConfigurationError` for a number ``RETAIN_DAYS`` may not be)."""
    if (problem := number_problem("RETAIN_DAYS", days)) is not None:
        raise ConfigurationError(problem)
    cutoff = (now or timezone.now()) - timedelta(days=days)
    idle = Slot.objects.using(_db()).filter(updated_at__lt=cutoff)
    report = _delete(idle, dry_run, batch_size, progress, still=Q(updated_at__lt=cutoff))
    _log(actor, f"idle before {cutoff.isoformat()}", report)
    return report


def purge(
    now: datetime | None = None,
    *,
    dry_run: bool = False,
    actor: str = "retention",
    progress: Progress | None = None,
) -> ForgetReport | None:
    """Apply ``RETAIN_DAYS`` (read live); None when it is unset (keep forever)."""
    days = app_settings.raw("RETAIN_DAYS")
    if days is None:
        return None
    return purge_idle(days, now, dry_run=dry_run, actor=actor, progress=progress)


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
    report.messages += Message.objects.using(_db()).filter(slot_id__in=slot_ids).count()
    report.compressions += Compression.objects.using(_db()).filter(slot_id__in=slot_ids).count()
    keys = IdempotencyKey.objects.using(_db()).filter(slot_id__in=slot_ids)
    report.idempotency_keys += keys.count()


def _delete_slot(slot_id: int, batch_size: int, report: ForgetReport, still: Q) -> None:
    db = _db()
    top = (
        Slot.objects.using(db).filter(still, pk=slot_id).values_list("last_seq", flat=True).first()
    )
    if top is None:  # gone meanwhile, or no longer matching (a save made it recent)
        return
    for low in range(0, top, batch_size):
        rows = Message.objects.using(db).filter(
            slot_id=slot_id, seq__gt=low, seq__lte=low + batch_size
        )
        report.messages += rows.delete()[0]
    with transaction.atomic(using=db):
        if not Slot.objects.using(db).select_for_update().filter(pk=slot_id).exists():
            return
        report.messages += Message.objects.using(db).filter(slot_id=slot_id).delete()[0]
        report.compressions += Compression.objects.using(db).filter(slot_id=slot_id).delete()[0]
        _, per_model = Slot.objects.using(db).filter(pk=slot_id).delete()
    report.slots += per_model.get(Slot._meta.label, 0)
    report.idempotency_keys += per_model.get(IdempotencyKey._meta.label, 0)  # by the cascade


def _log(actor: str, scope: str, report: ForgetReport) -> None:
    verb = "Would forget (dry run)" if report.dry_run else "Forgot"
    logger.info("%s by %s: %s; %s", verb, actor, scope, report.describe())

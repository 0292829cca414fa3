"""The summary buffer: reading it, and compressing it.

The buffer of an active slot is its ``summary`` prefix followed by the slot's
messages after ``covered_seq``. A compression summarizes a snapshot of the
buffer up to sequence ``k`` with no transaction open, then applies its output
only if the buffer's ``version`` has not moved and it still holds the slot's
pending claim (a compare-and-swap). Messages saved meanwhile stay after the
output. The same :func:`compress` serves inline saves and fetches, the Celery
task, the admin action and the API.
"""

from __future__ import annotations

import logging
import time
import traceback
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from squad_memory import history
from squad_memory.exceptions import InvalidSummarizerOutput
from squad_memory.messages import MessageDict, needs_compression, to_messages, validate_summary
from squad_memory.models import Compression, Slot
from squad_memory.summarizers import Summarizer, call_summarizer

logger = logging.getLogger("squad_memory")


@dataclass
class Snapshot:
    """The buffer a compression summarizes: ``messages`` cover ``from_seq..to_seq``."""

    slot_id: int
    version: int
    from_seq: int
    to_seq: int
    messages: list[MessageDict]


@dataclass
class Outcome:
    """What a compression did; ``output`` is set when it was applied."""

    outcome: str
    output: list[MessageDict] | None = None
    error: BaseException | None = None

    @property
    def applied(self) -> bool:
        return self.outcome == Compression.Outcome.APPLIED


def read(slot: Slot) -> list[MessageDict]:
    """The active buffer of a slot: prefix plus the messages after the pointer (one query)."""
    return list(slot.summary) + history.rows_after(slot.pk, slot.covered_seq)


def current(slot: Slot) -> list[MessageDict]:
    """What ``fetch_chat`` shows of a slot kept in the database now (no activation)."""
    if slot.active:
        return read(slot)
    if slot.pk is None:
        return []
    return history.rows_after(slot.pk, slot.visible_from_seq - 1)


def snapshot(slot: Slot, rows: list[dict[str, Any]] | None = None) -> Snapshot:
    """The current buffer of a slot up to its last sequence number."""
    if rows is None:
        rows = history.rows_after(slot.pk, slot.covered_seq, slot.last_seq)
    messages = list(slot.summary) + [_plain(r) for r in rows if r["seq"] <= slot.last_seq]
    return Snapshot(slot.pk, slot.version, slot.covered_seq + 1, slot.last_seq, messages)


def _plain(row: dict[str, Any]) -> MessageDict:
    return {"role": row["role"], "content": row["content"], "citations": row.get("citations")}


def compress(
    snap: Snapshot,
    token: str,
    summarizer: Summarizer,
    keep_last: int,
    *,
    trigger: str = "save",
    attempt: int = 1,
    release_on_failure: bool = True,
) -> Outcome:
    """Summarize ``snap`` outside any transaction, then apply it if it is still the head."""
    started, clock = timezone.now(), time.monotonic()
    try:
        raw = call_summarizer(summarizer.func, to_messages(snap.messages), keep_last)
        output = validate_summary(raw)
    except Exception as exc:
        result = Outcome(Compression.Outcome.FAILED, error=exc)
        output = None
    else:
        result = Outcome(Compression.Outcome.APPLIED, output=output)
    with transaction.atomic():
        if result.error is None and not _apply(snap, token, output or []):
            result = Outcome(Compression.Outcome.STALE)
        elif result.error is not None and release_on_failure:
            release(snap.slot_id, token, failed=True)
        _log(snap, summarizer, result, started, clock, trigger, attempt)
    _report(snap, result)
    return result


def _apply(snap: Snapshot, token: str, output: list[MessageDict]) -> bool:
    updated = Slot.objects.filter(
        pk=snap.slot_id, version=snap.version, pending_token=token
    ).update(
        summary=output,
        summary_length=len(output),
        covered_seq=snap.to_seq,
        version=snap.version + 1,
        active=True,
        pending_since=None,
        pending_token="",
        last_failed=False,
        updated_at=timezone.now(),
    )
    return updated == 1


def in_callers_transaction() -> bool:
    """True inside an ``atomic()`` block of the caller's (a test case's own does not count)."""
    blocks = transaction.get_connection().atomic_blocks
    # Django marks the atomic blocks a TestCase wraps each test in; they stand for autocommit.
    return any(not getattr(block, "_from_testcase", False) for block in blocks)


def release(slot_id: int, token: str, *, failed: bool) -> bool:
    """Drop a claim (after a failure, or when there was nothing to do)."""
    fields: dict[str, Any] = {"pending_since": None, "pending_token": ""}
    if failed:
        fields["last_failed"] = True
    return Slot.objects.filter(pk=slot_id, pending_token=token).update(**fields) == 1


def reset(slot_id: int) -> bool:
    """Deactivate a slot's buffer: drop the summary and any pending claim; raw history stays.

    A compression in flight loses its claim, so its compare-and-swap fails and it
    is logged as stale. The next fetch or save decides afresh whether to activate.
    """
    return (
        Slot.objects.filter(pk=slot_id).update(
            active=False,
            summary=[],
            summary_length=0,
            covered_seq=0,
            pending_since=None,
            pending_token="",
            last_failed=False,
            updated_at=timezone.now(),
        )
        == 1
    )


def _log(
    snap: Snapshot,
    summarizer: Summarizer,
    result: Outcome,
    started: datetime,
    clock: float,
    trigger: str,
    attempt: int,
) -> None:
    Compression.objects.create(
        slot_id=snap.slot_id,
        started_at=started,
        finished_at=timezone.now(),
        duration_ms=int((time.monotonic() - clock) * 1000),
        from_seq=snap.from_seq,
        to_seq=snap.to_seq,
        input=snap.messages,
        output=result.output,
        summarizer=summarizer.label[:255],
        outcome=result.outcome,
        error=_describe(result.error),
        trigger=trigger,
        attempt=attempt,
    )


def _describe(error: BaseException | None) -> str:
    if error is None:
        return ""
    if isinstance(error, InvalidSummarizerOutput):
        return f"{type(error).__name__}: {error}"
    return "".join(traceback.format_exception(error)).strip()[-4000:]


def _report(snap: Snapshot, result: Outcome) -> None:
    if result.error is not None:
        logger.warning(
            "Compression of slot %s (messages %s..%s) failed: %s",
            snap.slot_id,
            snap.from_seq,
            snap.to_seq,
            result.error,
        )
    elif not result.applied:
        logger.info("Compression of slot %s was stale; the buffer moved on.", snap.slot_id)


def activate(
    slot_id: int,
    trigger_at: int | None,
    timeout: float,
    seed: list[MessageDict] | None = None,
    *,
    expect_last_seq: int | None = None,
) -> tuple[Slot, str | None]:
    """Make a slot's buffer active and claim its first compression.

    The buffer starts as the slot's visible history, or, for a slot over a foreign
    store, as ``seed`` (that store's history) copied in as the buffer's messages.
    ``trigger_at=None`` claims a compression whatever the buffer's length. With
    ``expect_last_seq``, an inactive slot that has moved past it (a save was
    recorded after ``seed`` was read) is left inactive.
    """
    with transaction.atomic():
        slot = Slot.objects.select_for_update().get(pk=slot_id)
        moved = expect_last_seq is not None and slot.last_seq != expect_last_seq
        if not slot.active and moved:
            return slot, None
        if not slot.active:
            if seed is None:
                slot.covered_seq = slot.visible_from_seq - 1
            else:
                slot.covered_seq = slot.last_seq
                history.insert_rows(slot, seed)
            slot.active, slot.summary, slot.summary_length = True, [], 0
        token = None
        if trigger_at is None or needs_compression(
            slot.buffer_length, slot.trigger_at or trigger_at
        ):
            token = history.try_claim(slot, timeout)
        slot.save()
        return slot, token

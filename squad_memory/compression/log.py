"""The compression log: one row per compression and per failed attempt."""

from __future__ import annotations

import logging
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from django.db.models import Q
from django.utils import timezone

from squad_memory.exceptions import InvalidSummarizerOutput
from squad_memory.messages import MessageDict
from squad_memory.models import Compression, Message, Outcome, Slot
from squad_memory.summarizers import Summarizer

if TYPE_CHECKING:
    from squad_memory.compression.runner import Result

logger = logging.getLogger("squad_memory")


@dataclass
class Snapshot:
    """The buffer a compression summarizes: ``messages`` cover ``from_seq..to_seq``."""

    slot_id: int
    version: int
    from_seq: int
    to_seq: int
    messages: list[MessageDict]
    #: How many of ``messages`` are the summary prefix (the rest are raw rows).
    prefix: int = 0
    #: The tokens of ``messages``: the slot's running total as the snapshot was read.
    tokens: int = 0


@dataclass
class Attempt:
    """One run of a summarizer over a snapshot: what its log row records."""

    snap: Snapshot
    summarizer: Summarizer
    trigger: str
    attempt: int
    started: datetime = field(default_factory=timezone.now)
    clock: float = field(default_factory=time.monotonic)


def write(run: Attempt, result: Result) -> int:
    """The log row of one attempt; its id. The raw history never changes, so what the
    compression read and kept is recorded by reference: the previous compression's row for
    the summary prefix, ``from_seq..to_seq`` for the raw messages, ``kept_from_seq..to_seq``
    for those its output kept verbatim. Only what the summarizer wrote is stored."""
    snap = run.snap
    previous, prefix = _previous(snap)
    written, kept_from = _written(snap, result.output)
    row = Compression.objects.using(Slot.objects.write_db()).create(
        slot_id=snap.slot_id,
        started_at=run.started,
        finished_at=timezone.now(),
        duration_ms=int((time.monotonic() - run.clock) * 1000),
        from_seq=snap.from_seq,
        to_seq=snap.to_seq,
        input=prefix,
        output=written,
        by_reference=True,
        previous_id=previous,
        kept_from_seq=kept_from,
        summarizer=run.summarizer.label[:255],
        outcome=result.outcome,
        error=describe(result.error),
        trigger=run.trigger[:32],
        attempt=run.attempt,
    )
    return int(row.pk)


def _previous(snap: Snapshot) -> tuple[int | None, list[MessageDict]]:
    """The row whose output is the snapshot's summary prefix, or the prefix itself (a prefix
    is only set by applying a compression, with the pointer at that row's ``to_seq``)."""
    prefix = snap.messages[: snap.prefix]
    if not prefix:
        return None, []
    rows = Compression.objects.using(Slot.objects.write_db()).filter(
        slot_id=snap.slot_id, outcome=Outcome.APPLIED, to_seq=snap.from_seq - 1
    )
    found = rows.order_by("-id").values_list("pk", flat=True).first()
    return (found, []) if found is not None else (None, prefix)


def _written(
    snap: Snapshot, output: list[MessageDict] | None
) -> tuple[list[MessageDict] | None, int | None]:
    """The output less its tail of raw messages kept verbatim, and where that tail starts."""
    if not output:
        return output, None
    raw = snap.messages[snap.prefix :]
    kept = 0
    while kept < min(len(output), len(raw)) and output[-1 - kept] == raw[-1 - kept]:
        kept += 1
    if not kept:
        return output, None
    return output[:-kept], snap.to_seq - kept + 1


def input_of(row: Compression) -> list[MessageDict]:
    """What a logged compression read (rebuilt from its references)."""
    return rebuild([row])[row.pk][0]


def output_of(row: Compression) -> list[MessageDict] | None:
    """What a logged compression returned (rebuilt from its references)."""
    return rebuild([row])[row.pk][1]


Rebuilt = tuple[list[MessageDict], list[MessageDict] | None]


def rebuild(rows: list[Compression]) -> dict[int, Rebuilt]:
    """Input and output of each logged compression, with one query for all their raw
    messages (pass rows loaded with ``select_related("previous")``)."""
    raw = _raw({span for row in rows for span in _ranges(row)})
    return {row.pk: (_input(row, raw), _output(row, raw)) for row in rows}


def _ranges(row: Compression) -> set[tuple[int, int, int]]:
    if not row.by_reference:
        return set()
    found = {(row.slot_id, row.from_seq, row.to_seq)}
    for kept in (row, row.previous):
        if kept is not None and kept.by_reference and kept.kept_from_seq is not None:
            found.add((kept.slot_id, kept.kept_from_seq, kept.to_seq))
    return found


RawRows = dict[tuple[int, int], MessageDict]


def _input(row: Compression, raw: RawRows) -> list[MessageDict]:
    if not row.by_reference:
        return list(row.input)
    previous = row.previous if row.previous_id else None
    prefix = _output(previous, raw) if previous is not None else list(row.input)
    return (prefix or []) + _span(raw, row.slot_id, row.from_seq, row.to_seq)


def _output(row: Compression, raw: RawRows) -> list[MessageDict] | None:
    if row.output is None or not row.by_reference or row.kept_from_seq is None:
        return row.output
    return list(row.output) + _span(raw, row.slot_id, row.kept_from_seq, row.to_seq)


def _span(raw: RawRows, slot_id: int, first: int, last: int) -> list[MessageDict]:
    return [raw[(slot_id, seq)] for seq in range(first, last + 1) if (slot_id, seq) in raw]


def _raw(ranges: set[tuple[int, int, int]]) -> RawRows:
    if not ranges:
        return {}
    where = Q()
    for slot_id, first, last in ranges:
        where |= Q(slot_id=slot_id, seq__gte=first, seq__lte=last)
    rows = Message.objects.using(Slot.objects.write_db()).filter(where)
    return {
        (r["slot_id"], r["seq"]): MessageDict(
            role=r["role"], content=r["content"], citations=r["citations"]
        )
        for r in rows.values("slot_id", "seq", "role", "content", "citations")
    }


def describe(error: BaseException | None) -> str:
    """An error as the log keeps it: the message, or the traceback of an unexpected one."""
    if error is None:
        return ""
    if isinstance(error, InvalidSummarizerOutput):
        return f"{type(error).__name__}: {error}"
    return "".join(traceback.format_exception(error)).strip()[-4000:]


def report(snap: Snapshot, result: Result) -> None:
    if result.error is not None:
        logger.warning(
            "Compression of slot %s (messages %s..%s) failed: %s",
            snap.slot_id,
            snap.from_seq,
            snap.to_seq,
            result.error,
        )
    elif result.outcome == Outcome.SKIPPED:
        logger.info(
            "Compression of slot %s skipped: the summarizer returned the buffer unchanged.",
            snap.slot_id,
        )
    elif not result.applied:
        logger.info("Compression of slot %s was stale; the buffer moved on.", snap.slot_id)

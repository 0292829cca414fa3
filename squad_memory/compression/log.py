"""The compression log: one row per compression and per failed attempt."""

from __future__ import annotations

import logging
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from django.utils import timezone

from squad_memory.buffer import Snapshot
from squad_memory.exceptions import InvalidSummarizerOutput
from squad_memory.history import db_alias
from squad_memory.models import Compression
from squad_memory.summarizers import Summarizer

if TYPE_CHECKING:
    from squad_memory.compression.runner import Result

logger = logging.getLogger("squad_memory")


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
    """The log row of one attempt; its id."""
    snap = run.snap
    row = Compression.objects.using(db_alias()).create(
        slot_id=snap.slot_id,
        started_at=run.started,
        finished_at=timezone.now(),
        duration_ms=int((time.monotonic() - run.clock) * 1000),
        from_seq=snap.from_seq,
        to_seq=snap.to_seq,
        input=snap.messages,
        output=result.output,
        summarizer=run.summarizer.label[:255],
        outcome=result.outcome,
        error=describe(result.error),
        trigger=run.trigger[:32],
        attempt=run.attempt,
    )
    return int(row.pk)


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
    elif not result.applied:
        logger.info("Compression of slot %s was stale; the buffer moved on.", snap.slot_id)

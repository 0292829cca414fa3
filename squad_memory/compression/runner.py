"""Running a claimed compression: snapshot, summarize with no transaction open, apply."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import DatabaseError, transaction
from django.db.models import F
from django.utils import timezone

from squad_memory import buffer, lease, tokens
from squad_memory.compression import log
from squad_memory.compression.claims import Claim, release
from squad_memory.conf import app_settings
from squad_memory.history import db_alias
from squad_memory.messages import MessageDict, check_smaller, to_messages, validate_summary
from squad_memory.models import Outcome, Slot
from squad_memory.summarizers import Summarizer, call_summarizer

logger = logging.getLogger("squad_memory")


@dataclass
class Result:
    """What one request to compress turned into.

    ``output`` and ``covered_seq`` are set when applied; ``error`` when the summarizer
    failed; ``detail`` says why nothing was queued; ``log_id`` is the compression log
    row written, if any.
    """

    outcome: Outcome
    output: list[MessageDict] | None = None
    error: BaseException | None = None
    log_id: int | None = None
    covered_seq: int | None = None
    detail: str = ""

    @property
    def applied(self) -> bool:
        return self.outcome == Outcome.APPLIED


def run(
    claimed: Claim,
    summarizer: Summarizer,
    *,
    trigger: str = "save",
    attempt: int = 1,
    final: bool = True,
    lease_seconds: float = 30.0,
) -> Result:
    """Run a claimed compression now, on this thread. Never leaves the claim stuck.

    ``final=False`` keeps the claim after a summarizer failure, for a retry.
    A claim no longer held (released, reset, taken over) is ``skipped``.
    """
    slot = claimed.slot or Slot.objects.using(db_alias()).filter(pk=claimed.slot_id).first()
    if slot is None or slot.pending_token != claimed.token:
        logger.info(
            "Compression of slot %s skipped: its claim was released or replaced.", claimed.slot_id
        )
        return Result(Outcome.SKIPPED)
    snap = buffer.snapshot(slot)
    return compress(
        snap,
        claimed,
        summarizer,
        trigger=trigger,
        attempt=attempt,
        final=final,
        lease_seconds=lease_seconds,
    )


def compress(
    snap: buffer.Snapshot,
    claimed: Claim,
    summarizer: Summarizer,
    *,
    trigger: str = "save",
    attempt: int = 1,
    final: bool = True,
    lease_seconds: float = 30.0,
) -> Result:
    """Summarize ``snap`` with no transaction open, then apply it if it is still the head.

    ``applied``; ``failed`` (the summarizer raised, returned something invalid or not
    smaller, or the database went away); ``skipped`` (nothing to fold); or ``stale``
    when the buffer moved on or the claim was lost meanwhile (nothing changes). One log
    row either way, and the claim released on every way out but a retry's.
    """
    run = log.Attempt(snap, summarizer, trigger, attempt)
    try:
        with lease.renewing(claimed.slot_id, claimed.token, lease_seconds):
            result = _summarize(snap, summarizer, claimed.keep_last)
    except BaseException as exc:  # cancelled, interrupted, exiting: release, log, re-raise
        _abandon(run, claimed.token, exc)
        raise
    try:
        with transaction.atomic(using=db_alias()):
            result = _settle(snap, claimed, result, final)
            result.log_id = log.write(run, result)
    except DatabaseError as exc:  # the database restarted meanwhile
        _abandon(run, claimed.token, exc)
        return Result(Outcome.FAILED, error=exc)
    log.report(snap, result)
    return result


def _summarize(snap: buffer.Snapshot, summarizer: Summarizer, keep_last: int) -> Result:
    try:
        raw = call_summarizer(summarizer.func, to_messages(snap.messages), keep_last)
        output = validate_summary(raw)
        if output == snap.messages:
            return Result(Outcome.SKIPPED)
        check_smaller(output, snap.messages, app_settings.max_summary_chars)
    except Exception as exc:
        return Result(Outcome.FAILED, error=exc)
    return Result(Outcome.APPLIED, output=output)


def _settle(snap: buffer.Snapshot, claimed: Claim, result: Result, final: bool) -> Result:
    """Apply an output with a compare-and-swap, or release the claim (lock-free, one row)."""
    if result.applied:
        if not _apply(snap, claimed.token, result.output or []):
            return Result(Outcome.STALE)
        result.covered_seq = snap.to_seq
    elif result.outcome == Outcome.SKIPPED:
        release(claimed.slot_id, claimed.token, failed=False)
    elif final:
        release(claimed.slot_id, claimed.token, failed=True)
    return result


def _apply(snap: buffer.Snapshot, token: str, output: list[MessageDict]) -> bool:
    # Tokens: the output replaces the snapshot; saves made meanwhile stay counted.
    output_tokens = tokens.count_all(output)
    updated = (
        Slot.objects.using(db_alias())
        .filter(pk=snap.slot_id, version=snap.version, pending_token=token)
        .update(
            summary=output,
            summary_length=len(output),
            summary_tokens=output_tokens,
            buffer_tokens=F("buffer_tokens") - snap.tokens + output_tokens,
            covered_seq=snap.to_seq,
            version=snap.version + 1,
            active=True,
            pending_since=None,
            pending_token="",
            lease_until=None,
            last_failed=False,
            updated_at=timezone.now(),
        )
    )
    return updated == 1


def _abandon(run: log.Attempt, token: str, exc: BaseException) -> None:
    """Release the claim and log the failure, if the database answers; never raise."""
    connection = transaction.get_connection(db_alias())
    if not connection.in_atomic_block:
        connection.close()  # a connection the database dropped: the next query reconnects
    try:
        with transaction.atomic(using=db_alias()):
            release(run.snap.slot_id, token, failed=True)
            log.write(run, Result(Outcome.FAILED, error=exc))
    except Exception as db_error:  # the claim's lease runs out instead
        logger.error(
            "Compression of slot %s was interrupted (%s) and its claim could not be released "
            "(%s); it is taken over when its lease runs out.",
            run.snap.slot_id,
            type(exc).__name__,
            db_error,
        )
        return
    logger.warning(
        "Compression of slot %s was interrupted (%s: %s); its claim was released.",
        run.snap.slot_id,
        type(exc).__name__,
        exc,
    )

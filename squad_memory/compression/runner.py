"""Running a claimed compression: snapshot, summarize with no transaction open, apply."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from agent_squad.types import ConversationMessage
from django.db import DatabaseError, transaction
from django.db.models import F
from django.utils import timezone

from squad_memory.compression import lease, log
from squad_memory.compression.claims import SETTLED, Claim, release
from squad_memory.compression.log import Snapshot
from squad_memory.conf import app_settings
from squad_memory.exceptions import InvalidSummarizerOutput
from squad_memory.messages import MessageDict, copied, to_messages, validate_summary
from squad_memory.models import Message, Outcome, Slot
from squad_memory.rules import count_all
from squad_memory.summarizers import Summarizer, acall_summarizer, call_summarizer
from squad_memory.threads import database

logger = logging.getLogger("squad_memory")


@dataclass
class Result:
    """What one request to compress turned into: ``output`` and ``covered_seq`` if applied,
    ``error`` if the summarizer failed, ``detail`` why nothing was queued, ``log_id`` its row."""

    outcome: Outcome
    output: list[MessageDict] | None = None
    error: BaseException | None = None
    log_id: int | None = None
    covered_seq: int | None = None
    detail: str = ""

    @property
    def applied(self) -> bool:
        return self.outcome == Outcome.APPLIED


def _db() -> str:
    return Slot.objects.write_db()


def snapshot(slot: Slot) -> Snapshot:
    """The buffer of a slot up to its last sequence number: the summary, then the rows."""
    rows = Message.objects.using(_db()).filter(
        slot_id=slot.pk, seq__gt=slot.covered_seq, seq__lte=slot.last_seq
    )
    raw = list(rows.order_by("seq").values("role", "content", "citations"))
    messages: list[MessageDict] = list(slot.summary) + raw
    return Snapshot(
        slot.pk,
        slot.version,
        slot.covered_seq + 1,
        slot.last_seq,
        messages,
        prefix=len(slot.summary),
        tokens=slot.buffer_tokens,
    )


def run(
    claimed: Claim,
    summarizer: Summarizer,
    *,
    trigger: str = "save",
    attempt: int = 1,
    final: bool = True,
    lease_seconds: float = 30.0,
) -> Result:
    """Run a claimed compression now, on this thread (:func:`compress` of its snapshot):
    ``applied``; ``failed`` (the summarizer raised, returned something invalid or not smaller, or
    the database went away); ``skipped`` (nothing to fold, or the claim was released or replaced
    meanwhile); ``stale`` (the buffer moved on). One log row either way, and the claim released on
    every way out but a retry's (``final=False`` keeps it after a failure)."""
    snap = claimed_snapshot(claimed)
    if snap is None:
        return Result(Outcome.SKIPPED)
    return compress(
        snap,
        claimed,
        summarizer,
        trigger=trigger,
        attempt=attempt,
        final=final,
        lease_seconds=lease_seconds,
    )


async def arun(
    claimed: Claim, summarizer: Summarizer, *, trigger: str = "save", lease_seconds: float = 30.0
) -> Result:
    """:func:`run` for an async caller: the snapshot and the outcome on a database thread, the
    summarizer awaited in the caller's loop (an async one) or on a summarizer thread."""
    snap = await database(claimed_snapshot, claimed)
    if snap is None:
        return Result(Outcome.SKIPPED)
    attempt_log = log.Attempt(snap, summarizer, trigger, 1)
    try:
        async with lease.arenewing(claimed.slot_id, claimed.token, lease_seconds):
            given = _given(snap)
            try:
                output = await acall_summarizer(summarizer.func, given, claimed.keep_last)
            except Exception as exc:
                result = Result(Outcome.FAILED, error=exc)
            else:
                result = judge(output, snap, claimed.keep_last)
    except BaseException as exc:  # cancelled: release, log, re-raise
        await database(_abandon, attempt_log, claimed.token, exc)
        raise
    return await database(settle, snap, claimed, result, attempt_log, True)


def claimed_snapshot(claimed: Claim) -> Snapshot | None:
    """The buffer ``claimed`` is to compress, or None if its claim was released or replaced."""
    slot = claimed.slot or Slot.objects.using(_db()).filter(pk=claimed.slot_id).first()
    if slot is None or slot.pending_token != claimed.token:
        logger.info(
            "Compression of slot %s skipped: its claim was released or replaced.", claimed.slot_id
        )
        return None
    return snapshot(slot)


def compress(
    snap: Snapshot,
    claimed: Claim,
    summarizer: Summarizer,
    *,
    trigger: str = "save",
    attempt: int = 1,
    final: bool = True,
    lease_seconds: float = 30.0,
) -> Result:
    """Summarize ``snap`` with no transaction open, then apply the output if it is still
    the buffer's head and ``claimed`` still holds the claim (see :func:`run`)."""
    attempt_log = log.Attempt(snap, summarizer, trigger, attempt)
    try:
        with lease.renewing(claimed.slot_id, claimed.token, lease_seconds):
            result = _summarize(snap, summarizer, claimed.keep_last)
    except BaseException as exc:  # cancelled, interrupted, exiting: release, log, re-raise
        _abandon(attempt_log, claimed.token, exc)
        raise
    return settle(snap, claimed, result, attempt_log, final)


def settle(
    snap: Snapshot, claimed: Claim, result: Result, attempt_log: log.Attempt, final: bool
) -> Result:
    """Apply the summarizer's output or release the claim, and log the attempt, in one
    transaction (see :func:`run`)."""
    try:
        with transaction.atomic(using=_db()):
            result = _settle(snap, claimed, result, final)
            result.log_id = log.write(attempt_log, result)
    except DatabaseError as exc:  # the database restarted, or the slot was deleted
        if not _abandon(attempt_log, claimed.token, exc):
            return Result(Outcome.SKIPPED, detail=CANCELLED)
        return Result(Outcome.FAILED, error=exc)
    log.report(snap, result)
    return result


def _given(snap: Snapshot) -> list[ConversationMessage]:
    """What the summarizer gets: a copy (it may change what it gets)."""
    return to_messages(copied(snap.messages))


def _summarize(snap: Snapshot, summarizer: Summarizer, keep_last: int) -> Result:
    try:
        output = call_summarizer(summarizer.func, _given(snap), keep_last)
    except Exception as exc:
        return Result(Outcome.FAILED, error=exc)
    return judge(output, snap, keep_last)


def judge(output: Any, snap: Snapshot, keep_last: int) -> Result:
    """What a summarizer's output makes of the compression of ``snap``: ``applied``,
    ``skipped`` (the buffer unchanged) or ``failed`` (invalid, or not smaller)."""
    try:
        output = validate_summary(output)
        if output == snap.messages:
            return Result(Outcome.SKIPPED)
        check_smaller(output, snap, keep_last)
    except Exception as exc:
        return Result(Outcome.FAILED, error=exc)
    return Result(Outcome.APPLIED, output=output)


def check_smaller(output: list[MessageDict], snap: Snapshot, keep_last: int) -> None:
    """Refuse output that does not shrink the buffer: as many messages as its input or more,
    unless no more than a summary, the ``keep_last`` pairs and one message (roles alternate)
    (else the buffer stays as long, and the next save compresses it again); a written message
    (one not copied from the input) over ``MAX_SUMMARY_CHARS`` characters; or more written
    characters than the larger of ``MAX_SUMMARY_CHARS`` and those of the messages it replaced."""
    given, limit = snap.messages, app_settings.max_summary_chars
    if len(output) > len(given):
        raise InvalidSummarizerOutput(
            f"The summarizer returned {len(output)} messages for {len(given)}; a compression "
            "must not return more messages than it was given (a summary plus the kept pairs)."
        )
    given_prints = {_fingerprint(m) for m in given}
    output_prints = {_fingerprint(m) for m in output}
    written = [m for m in output if _fingerprint(m) not in given_prints]
    for message in written:
        if (size := _chars(message)) > limit:
            raise InvalidSummarizerOutput(
                f"The summarizer wrote a message of {size} characters; the limit is "
                f"MAX_SUMMARY_CHARS ({limit})."
            )
    replaced = sum(_chars(m) for m in given if _fingerprint(m) not in output_prints)
    wrote = sum(_chars(m) for m in written)
    if wrote > max(limit, replaced):
        raise InvalidSummarizerOutput(
            f"The summarizer wrote {wrote} characters in place of {replaced}; output larger "
            f"than its input and than MAX_SUMMARY_CHARS ({limit}) is not applied."
        )
    if len(output) == len(given) > 2 * keep_last + 2:
        raise InvalidSummarizerOutput(
            f"The summarizer returned {len(output)} messages for {len(given)}; a compression "
            "must return fewer messages than it was given (a summary plus the kept pairs), or "
            "the buffer stays as long and the next save compresses it again."
        )


def _fingerprint(message: MessageDict) -> str:
    return json.dumps([message["role"], message["content"]], sort_keys=True)


def _chars(message: MessageDict) -> int:
    """Characters of a message: its text blocks' text, other blocks as JSON."""
    return sum(
        len(block["text"]) if isinstance(block.get("text"), str) else len(json.dumps(block))
        for block in message["content"] or []
    )


def _settle(snap: Snapshot, claimed: Claim, result: Result, final: bool) -> Result:
    """Apply an output with a compare-and-swap, or release the claim (lock-free, one row)."""
    if result.applied:
        if not _apply(snap, claimed.token, result.output or []):
            return Result(Outcome.STALE)
        result.covered_seq = snap.to_seq
    elif result.outcome == Outcome.SKIPPED:
        release(claimed.slot_id, claimed.token, failed=False)
    elif final:  # refused output would most likely be refused again: saves wait a while
        refused = isinstance(result.error, InvalidSummarizerOutput)
        backoff = app_settings.pending_timeout if refused else 0
        release(claimed.slot_id, claimed.token, failed=True, backoff=backoff)
    return result


def _apply(snap: Snapshot, token: str, output: list[MessageDict]) -> bool:
    # Tokens: the output replaces the snapshot; saves made meanwhile stay counted.
    output_tokens = count_all(output)
    head = Slot.objects.using(_db()).filter(
        pk=snap.slot_id, version=snap.version, pending_token=token
    )
    updated = head.update(
        summary=output,
        summary_length=len(output),
        summary_tokens=output_tokens,
        buffer_tokens=F("buffer_tokens") - snap.tokens + output_tokens,
        covered_seq=snap.to_seq,
        version=snap.version + 1,
        active=True,
        **SETTLED,
        updated_at=timezone.now(),
    )
    return updated == 1


#: The detail of a compression whose slot was deleted meanwhile: nothing to log or retry.
CANCELLED = "cancelled: the slot was deleted"


def _abandon(attempt: log.Attempt, token: str, exc: BaseException) -> bool:
    """Release the claim and log the failure, if the database answers; never raise. False
    when the slot was deleted meanwhile (the compression is cancelled, not failed)."""
    slot_id = attempt.snap.slot_id
    connection = transaction.get_connection(_db())
    if not connection.in_atomic_block:
        connection.close()  # a connection the database dropped: the next query reconnects
    try:
        with transaction.atomic(using=_db()):
            if not Slot.objects.using(_db()).filter(pk=slot_id).exists():
                logger.info("Compression of slot %s %s while it compressed.", slot_id, CANCELLED)
                return False
            release(slot_id, token, failed=True)
            log.write(attempt, Result(Outcome.FAILED, error=exc))
    except Exception as db_error:  # the claim's lease runs out instead
        logger.error(
            "Compression of slot %s was interrupted (%s) and its claim could not be released "
            "(%s); it is taken over when its lease runs out.",
            slot_id,
            type(exc).__name__,
            db_error,
        )
        return True
    logger.warning(
        "Compression of slot %s was interrupted (%s: %s); its claim was released.",
        slot_id,
        type(exc).__name__,
        exc,
    )
    return True

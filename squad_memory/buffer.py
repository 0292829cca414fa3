"""The summary buffer, read: what ``fetch_chat`` shows of a slot, and a compression's input.

The buffer of an active slot is its ``summary`` prefix followed by the slot's
messages after ``covered_seq`` (the journal's rows). Nothing here writes: every
change of buffer state is in :mod:`squad_memory.compression`.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from squad_memory import history, tails
from squad_memory.messages import MessageDict
from squad_memory.models import Message, Slot


class NotCached(LookupError):
    """Raised under :func:`cached_only` by a read that would have to query the database:
    the tail after ``after_seq`` is not cached (``servable``: caching that tail lets the
    read succeed; else it needs a query of its own, such as the token limit's)."""

    def __init__(self, slot_id: int, after_seq: int, *, servable: bool = True) -> None:
        super().__init__(slot_id, after_seq)
        self.slot_id, self.after_seq, self.servable = slot_id, after_seq, servable


_cached_only: ContextVar[bool] = ContextVar("squad_memory_cached_only", default=False)


class cached_only:  # a context manager, named as the function it replaced
    """Reads in this block use the tail cache only and raise :class:`NotCached` instead
    of querying (the native async path fetches the rows its own way, then reads again)."""

    def __enter__(self) -> None:
        self.token = _cached_only.set(True)

    def __exit__(self, *exc: object) -> None:
        _cached_only.reset(self.token)


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


def read(
    slot: Slot, max_tail: int | None = None, max_tokens: int | None = None
) -> list[MessageDict]:
    """The active buffer of a slot: prefix plus the messages after the pointer (one query).

    With ``max_tail`` or ``max_tokens`` (the hard limits), a tail past them is cut to
    its newest messages that fit, starting with the role that follows the prefix, so
    roles still alternate.
    """
    prefix = list(slot.summary)
    over_tokens = max_tokens is not None and slot.buffer_tokens > max_tokens
    over_pairs = max_tail is not None and slot.last_seq - slot.covered_seq > max_tail
    if not over_tokens and not over_pairs:
        return prefix + _tail(slot, slot.covered_seq)
    if over_tokens:
        assert max_tokens is not None
        newest = _fitting(slot, max_tokens - slot.summary_tokens, max_tail)
        tail = _tail(slot, slot.covered_seq, newest) if newest else []
    else:
        tail = _tail(slot, slot.covered_seq, max_tail)
    after = prefix[-1]["role"] if prefix else "assistant"
    if tail and tail[0]["role"] == after:
        tail = tail[1:]
    return prefix + tail


def _fitting(slot: Slot, budget: int, max_tail: int | None) -> int:
    """How many of the tail's newest messages fit in ``budget`` tokens (their stored counts)."""
    if _cached_only.get():
        raise NotCached(slot.pk, slot.covered_seq, servable=False)
    rows = Message.objects.using(history.db_alias()).filter(
        slot_id=slot.pk, seq__gt=slot.covered_seq
    )
    counts = rows.order_by("-seq").values_list("tokens", flat=True)
    fitting = 0
    for cost in counts[:max_tail] if max_tail is not None else counts:
        budget -= cost
        if budget < 0:
            break
        fitting += 1
    return fitting


def current(slot: Slot) -> list[MessageDict]:
    """What ``fetch_chat`` shows of a slot kept in the database now (no activation)."""
    if slot.pk is None:
        return []
    prefix = list(slot.summary) if slot.active else []
    return prefix + _tail(slot, slot.buffer_from_seq - 1)


def visible(slot: Slot) -> list[dict[str, Any]]:
    """The slot's raw rows not trimmed by ``max_history_size`` (a plain history's view)."""
    return _tail(slot, slot.visible_from_seq - 1) if slot.pk is not None else []


def snapshot(slot: Slot, rows: list[dict[str, Any]] | None = None) -> Snapshot:
    """The current buffer of a slot up to its last sequence number."""
    if rows is None:
        rows = _tail(slot, slot.covered_seq)
    messages = list(slot.summary) + [_plain(r) for r in rows if r["seq"] <= slot.last_seq]
    return Snapshot(
        slot.pk,
        slot.version,
        slot.covered_seq + 1,
        slot.last_seq,
        messages,
        prefix=len(slot.summary),
        tokens=slot.buffer_tokens,
    )


def _tail(slot: Slot, after_seq: int, newest: int | None = None) -> list[dict[str, Any]]:
    """The slot's rows after ``after_seq`` (the newest ``newest``): from the per-process
    cache when it holds them up to the slot's ``last_seq``, else from the database."""
    if after_seq >= slot.last_seq:
        return []
    alias = history.db_alias()
    rows = tails.get(alias, slot.pk, after_seq, slot.last_seq)
    if rows is not None:
        return rows[-newest:] if newest is not None else rows
    if _cached_only.get():
        raise NotCached(slot.pk, after_seq)
    if newest is not None and slot.last_seq - after_seq > newest:
        return history.rows_after(slot.pk, after_seq, newest=newest)
    rows = history.rows_after(slot.pk, after_seq)
    if rows and rows[0]["seq"] == after_seq + 1:
        history.remember(alias, slot.pk, rows)
    return rows


def _plain(row: dict[str, Any]) -> MessageDict:
    return {"role": row["role"], "content": row["content"], "citations": row.get("citations")}

"""What the slot page shows, built with a constant number of queries.

The raw history is paged by sequence-number ranges (``seq`` is gapless and
indexed with the slot), so a page costs one indexed query with a LIMIT whatever
the history's length, and the page count comes from ``Slot.last_seq``, never
from a COUNT. Content blocks become plain dicts that templates render escaped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from squad_memory.compression import log
from squad_memory.models import DJANGO_NAMESPACE, Compression, Message, Slot


@dataclass
class Block:
    """One content block, readable: ``kind`` is text, tool_use, tool_result or other."""

    kind: str
    text: str = ""
    title: str = ""
    body: str = ""
    children: list[Block] = field(default_factory=list)


@dataclass
class Entry:
    """One message as shown: raw (with ``seq``) or a buffer/summary message."""

    role: str
    blocks: list[Block]
    seq: int | None = None
    time: datetime | None = None
    trimmed: bool = False
    covered: bool = False
    citations: Any = None


@dataclass
class Page:
    """A window of the raw history: messages ``first..last`` of ``total``."""

    number: int
    count: int
    first: int
    last: int
    total: int
    entries: list[Entry]

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.count

    @property
    def previous_number(self) -> int:
        return self.number - 1

    @property
    def next_number(self) -> int:
        return self.number + 1


@dataclass
class BufferView:
    """What ``fetch_chat`` returns now: the summary prefix, then the messages after it."""

    available: bool
    active: bool
    summary: list[Entry]
    tail: list[Entry]
    tail_first: int
    tail_total: int

    @property
    def hidden(self) -> int:
        """Buffer messages older than the ones shown (they are in the raw history)."""
        return self.tail_total - len(self.tail)

    @property
    def length(self) -> int:
        return len(self.summary) + self.tail_total


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _tool_result_children(content: Any) -> list[Block]:
    if isinstance(content, list):
        return [
            to_block(b) if isinstance(b, dict) else Block("text", text=_pretty(b)) for b in content
        ]
    return [Block("text", text=_pretty(content))] if content not in (None, "") else []


def to_block(block: dict[str, Any]) -> Block:
    """A content block in agent-squad's Bedrock or Anthropic shape, made readable."""
    kind = block.get("type")
    if "toolUse" in block or kind == "tool_use":
        use = block.get("toolUse") or block
        if not isinstance(use, dict):  # not agent-squad's shape: show it as stored
            return Block("other", title="toolUse", body=_pretty(use))
        title = f"{use.get('name', '?')} ({use.get('toolUseId') or use.get('id') or '-'})"
        return Block("tool_use", title=title, body=_pretty(use.get("input", {})))
    if "toolResult" in block or kind == "tool_result":
        res = block.get("toolResult") or block
        if not isinstance(res, dict):
            return Block("other", title="toolResult", body=_pretty(res))
        ident = res.get("toolUseId") or res.get("tool_use_id") or "-"
        status = res.get("status") or ("error" if res.get("is_error") else "")
        title = f"{ident}{' · ' + status if status else ''}"
        return Block("tool_result", title=title, children=_tool_result_children(res.get("content")))
    if set(block) <= {"text", "type"} and isinstance(block.get("text"), str):
        return Block("text", text=block["text"])
    if "json" in block:
        return Block("other", title="json", body=_pretty(block["json"]))
    return Block("other", title=", ".join(sorted(block)), body=_pretty(block))


def to_blocks(content: Any) -> list[Block]:
    if not isinstance(content, list):
        return [Block("other", title="content", body=_pretty(content))]
    return [
        to_block(b) if isinstance(b, dict) else Block("other", body=_pretty(b)) for b in content
    ]


def message_time(timestamp_ms: int | None) -> datetime | None:
    if timestamp_ms is None:
        return None
    return datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)


def entry(slot: Slot, row: dict[str, Any]) -> Entry:
    """A stored message row (``values()`` dict) as shown next to its slot's state."""
    seq = row.get("seq")
    return Entry(
        role=str(row.get("role", "")),
        blocks=to_blocks(row.get("content")),
        seq=seq,
        time=message_time(row.get("timestamp")),
        trimmed=seq is not None and slot.is_trimmed(seq),
        covered=seq is not None and slot.active and seq <= slot.covered_seq,
        citations=row.get("citations"),
    )


def plain_entries(messages: Any) -> list[Entry]:
    """Messages kept as JSON (a summary, a compression's input or output)."""
    if not isinstance(messages, list):
        return []
    return [
        Entry(
            role=str(m.get("role", "")),
            blocks=to_blocks(m.get("content")),
            citations=m.get("citations"),
        )
        for m in messages
        if isinstance(m, dict)
    ]


_ROW_FIELDS = ("seq", "role", "content", "citations", "timestamp")


def page_count(slot: Slot, size: int) -> int:
    return max((slot.last_seq + size - 1) // size, 1)


def page_of(seq: int, size: int) -> int:
    return max((seq - 1) // size + 1, 1)


def raw_page(slot: Slot, number: int, size: int) -> Page:
    """Page ``number`` (1-based, clamped) of the raw history: one query, at most ``size`` rows."""
    count = page_count(slot, size)
    number = min(max(number, 1), count)
    first = (number - 1) * size + 1
    last = min(number * size, slot.last_seq)
    rows = Message.objects.filter(slot=slot, seq__gte=first, seq__lte=last).order_by("seq")
    entries = [entry(slot, r) for r in rows.values(*_ROW_FIELDS)[:size]]
    return Page(number, count, first, last, slot.last_seq, entries)


def buffer_view(slot: Slot, limit: int) -> BufferView:
    """The buffer ``fetch_chat`` returns now, its newest ``limit`` messages loaded (one query)."""
    if not slot.active and slot.namespace != DJANGO_NAMESPACE:
        return BufferView(False, False, [], [], 0, 0)
    first = slot.buffer_from_seq
    total = max(slot.last_seq - first + 1, 0)
    start = max(first, slot.last_seq - limit + 1)
    rows = Message.objects.filter(slot=slot, seq__gte=start, seq__lte=slot.last_seq)
    tail = [entry(slot, r) for r in rows.order_by("seq").values(*_ROW_FIELDS)[:limit]]
    for item in tail:
        item.covered = item.trimmed = False
    summary = plain_entries(slot.summary) if slot.active else []
    return BufferView(True, slot.active, summary, tail, first, total)


@dataclass
class LogEntry:
    """One compression, with its input and output readable as a before/after."""

    compression: Compression
    before: list[Entry]
    after: list[Entry]


def compression_log(slot: Slot, limit: int) -> tuple[list[LogEntry], bool]:
    """The newest ``limit`` compressions of a slot (one query), and whether there are more."""
    newest = Compression.objects.filter(slot=slot).select_related("previous")
    rows = list(newest.order_by("-started_at", "-id")[: limit + 1])
    shown = log.rebuild(rows[:limit])  # one more query: the raw messages they reference
    entries = [
        LogEntry(c, plain_entries(shown[c.pk][0]), plain_entries(shown[c.pk][1]))
        for c in rows[:limit]
    ]
    return entries, len(rows) > limit

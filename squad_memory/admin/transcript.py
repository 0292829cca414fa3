"""What the slot page shows, in a constant number of queries: the raw history paged by
sequence-number ranges (one indexed query a page, the count from ``Slot.last_seq``), and
content blocks as plain dicts that templates render escaped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.http import HttpRequest
from django.utils.html import format_html_join
from django.utils.safestring import SafeString, mark_safe

from squad_memory.compression import log
from squad_memory.exceptions import SearchTimeout
from squad_memory.models import DJANGO_NAMESPACE, Compression, Message, Outcome, Slot
from squad_memory.search import MAX_QUERY_LENGTH, excerpt, matching, searching


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
    summarized: bool = False
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


@dataclass
class BufferView:
    """What ``fetch_chat`` returns now: the summary prefix, then the newest messages after
    it (``hidden`` older ones are in the raw history)."""

    available: bool
    active: bool = False
    summary: list[Entry] = field(default_factory=list)
    tail: list[Entry] = field(default_factory=list)
    tail_first: int = 0
    length: int = 0
    hidden: int = 0


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


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


def _tool_result_children(content: Any) -> list[Block]:
    if isinstance(content, list):
        return [
            to_block(b) if isinstance(b, dict) else Block("text", text=_pretty(b)) for b in content
        ]
    return [Block("text", text=_pretty(content))] if content not in (None, "") else []


def to_blocks(content: Any) -> list[Block]:
    if not isinstance(content, list):
        return [Block("other", title="content", body=_pretty(content))]
    return [
        to_block(b) if isinstance(b, dict) else Block("other", body=_pretty(b)) for b in content
    ]


def message_time(timestamp_ms: int | None) -> datetime | None:
    return None if timestamp_ms is None else datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)


def summarized_before(slot: Slot) -> int:
    """The first raw message the summary does not replace: after the messages it covers,
    or from those its output kept verbatim (one query)."""
    if not slot.active:
        return 1
    last = Compression.objects.filter(slot=slot, outcome=Outcome.APPLIED, to_seq=slot.covered_seq)
    kept = last.order_by("-id").values_list("kept_from_seq", flat=True).first()
    return kept or slot.covered_seq + 1


def entry(slot: Slot, row: dict[str, Any], summarized_until: int = 0) -> Entry:
    """A stored message row (``values()`` dict) as shown next to its slot's state."""
    seq = row.get("seq")
    return Entry(
        role=str(row.get("role", "")),
        blocks=to_blocks(row.get("content")),
        seq=seq,
        time=message_time(row.get("timestamp")),
        trimmed=seq is not None and slot.is_trimmed(seq),
        summarized=seq is not None and seq < summarized_until,
        citations=row.get("citations"),
    )


def plain_entries(messages: Any) -> list[Entry]:
    """Messages kept as JSON (a summary, a compression's input or output)."""
    if not isinstance(messages, list):
        return []
    return [
        Entry(str(m.get("role", "")), to_blocks(m.get("content")), citations=m.get("citations"))
        for m in messages
        if isinstance(m, dict)
    ]


def page_count(slot: Slot, size: int) -> int:
    return max((slot.last_seq + size - 1) // size, 1)


def raw_page(slot: Slot, number: int, size: int, summarized_until: int) -> Page:
    """Page ``number`` (1-based, clamped) of the raw history: at most ``size`` rows."""
    count = page_count(slot, size)
    number = min(max(number, 1), count)
    first, last = (number - 1) * size + 1, min(number * size, slot.last_seq)
    rows = Message.objects.filter(slot=slot, seq__gte=first, seq__lte=last).order_by("seq")
    entries = [entry(slot, r, summarized_until) for r in rows.values(*Message.ROW_FIELDS)[:size]]
    return Page(number, count, first, last, slot.last_seq, entries)


def buffer_view(slot: Slot, limit: int) -> BufferView:
    """The buffer ``fetch_chat`` returns now, its newest ``limit`` messages loaded."""
    if not slot.active and slot.namespace != DJANGO_NAMESPACE:
        return BufferView(False)
    first = slot.buffer_from_seq
    total = max(slot.last_seq - first + 1, 0)
    start = max(first, slot.last_seq - limit + 1)
    rows = Message.objects.filter(slot=slot, seq__gte=start, seq__lte=slot.last_seq)
    tail = [entry(slot, r) for r in rows.order_by("seq").values(*Message.ROW_FIELDS)[:limit]]
    for item in tail:
        item.trimmed = False  # in the buffer: shown whatever max_history_size hides
    summary = plain_entries(slot.summary) if slot.active else []
    return BufferView(
        True, slot.active, summary, tail, first, len(summary) + total, total - len(tail)
    )


def dotted(path: str) -> SafeString:
    """A dotted path (a summarizer's), breakable after its dots only (not letter by letter)."""
    return format_html_join(mark_safe(".<wbr>"), "{}", ((part,) for part in path.split(".")))


@dataclass
class LogEntry:
    """One compression, with its input and output readable as a before/after."""

    compression: Compression
    before: list[Entry]
    after: list[Entry]

    @property
    def summarizer(self) -> SafeString:
        return dotted(self.compression.summarizer)


def compression_log(slot: Slot, limit: int) -> tuple[list[LogEntry], bool]:
    """The newest ``limit`` compressions of a slot, and whether there are more."""
    newest = Compression.objects.filter(slot=slot).select_related("previous")
    rows = list(newest.order_by("-started_at", "-id")[: limit + 1])
    shown = log.rebuild(rows[:limit])  # one more query: the raw messages they reference
    entries = [
        LogEntry(c, plain_entries(shown[c.pk][0]), plain_entries(shown[c.pk][1]))
        for c in rows[:limit]
    ]
    return entries, len(rows) > limit


@dataclass
class Hit:
    """A matching message of the slot: its number (the anchor to jump to) and an excerpt."""

    seq: int
    role: str
    excerpt: SafeString


@dataclass
class Search:
    """The slot page's search box: the words, and the first hits by seq."""

    query: str
    hits: list[Hit]
    more: bool
    #: Why the search was stopped (``SEARCH_TIMEOUT``), if it was.
    stopped: str = ""


def search(request: HttpRequest, slot: Slot, limit: int) -> Search:
    """The hits of ``?q=`` in the slot's raw history, oldest first (one query, run as the
    API's searches run: :func:`squad_memory.search.searching`)."""
    query = request.GET.get("q", "").strip()[:MAX_QUERY_LENGTH]
    if not query or "\x00" in query:
        return Search(query, [], False)
    rows = matching(Message.objects.filter(slot=slot), query).order_by("seq")
    try:
        with searching(rows.db):
            found = list(rows.values_list("seq", "role", "text")[: limit + 1])
    except SearchTimeout as exc:
        return Search(query, [], False, stopped=str(exc))
    # excerpt() escapes the text; it adds only <mark> tags.
    hits = [Hit(seq, role, mark_safe(excerpt(text, query))) for seq, role, text in found[:limit]]
    return Search(query, hits, len(found) > limit)

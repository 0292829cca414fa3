"""An offline summarizer: no network, no model, deterministic and extractive. The first
sentence of each folded message, oldest first, appended to the previous summary's lines;
past the size cap the oldest lines are dropped, and the header says what it is and how many.
"""

from __future__ import annotations

import re
from typing import Any

from squad_memory.summarizers.base import (
    SUMMARY_PREFIX,
    make_summary,
    max_summary_chars,
    render,
    role_of,
    split,
)

__all__ = ["OfflineSummarizer", "summarize"]

_HEADER = "(extractive, offline) Covers {count} messages; first sentence of each, oldest first"
_DROPPED = "; the oldest {dropped} lines were dropped to stay under {limit} characters"
_COUNT = re.compile(r"^\(extractive, offline\) Covers (\d+) messages")
_DROPPED_COUNT = re.compile(r"the oldest (\d+) lines were dropped")
_SENTENCE = re.compile(r"(?<=[.!?])\s")


class OfflineSummarizer:
    """The offline summarizer: summaries of at most ``max_chars`` characters (at most
    ``MAX_SUMMARY_CHARS``), lines of at most ``line_chars``."""

    def __init__(self, max_chars: int | None = None, line_chars: int = 160) -> None:
        self.max_chars = max_chars
        self.line_chars = line_chars

    def __call__(self, history: list[Any], keep_last: int) -> list[Any]:
        part = split(history, keep_last)
        if not part.fold:
            return list(history)
        count, dropped, lines = _parse_previous(part.previous)
        lines += [self._line(m) for m in part.fold]
        limit = max_summary_chars(self.max_chars)
        body = _fit(count + len(part.fold), dropped, lines, limit)
        return [make_summary(body, limit), *part.recent]

    def _line(self, message: Any) -> str:
        text = render(message, self.line_chars * 4)
        first = _SENTENCE.split(text, maxsplit=1)[0] if text else "(no text)"
        if len(first) > self.line_chars:
            first = first[: self.line_chars - 1] + "…"
        return f"- {role_of(message)}: {first}"


def _parse_previous(previous: str | None) -> tuple[int, int, list[str]]:
    """Messages covered, lines dropped, and lines of a previous summary."""
    if previous is None:
        return 0, 0, []
    header, _, rest = previous.partition("\n")
    count, dropped = _COUNT.match(header), _DROPPED_COUNT.search(header)
    if count is None:
        # A summary from another summarizer: keep it as one line.
        return 0, 0, [f"- earlier summary: {' '.join(previous.split())}"]
    lines = [line for line in rest.split("\n") if line.startswith("- ")]
    return int(count.group(1)), int(dropped.group(1)) if dropped else 0, lines


def _fit(count: int, dropped: int, lines: list[str], limit: int) -> str:
    """The summary body, dropping the oldest lines until it fits ``limit`` with its prefix."""
    while True:
        header = _HEADER.format(count=count)
        if dropped:
            header += _DROPPED.format(dropped=dropped, limit=limit)
        body = header + ":\n" + "\n".join(lines)
        if len(SUMMARY_PREFIX) + 1 + len(body) <= limit or len(lines) <= 1:
            return body
        lines = lines[1:]
        dropped += 1


def summarize(history: list[Any], keep_last: int) -> list[Any]:
    """The default summarizer: :class:`OfflineSummarizer` with the configured size cap."""
    return OfflineSummarizer()(history, keep_last)

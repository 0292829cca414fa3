"""Searching the raw history: the plain text of a message, matching it, and excerpts.

A message's plain text (:func:`extract_text`) is computed once, when it is
saved, and stored in ``Message.text``. On PostgreSQL, :func:`matching` is a
full-text match written exactly as the GIN index of migration
``0003_message_text`` is defined (:data:`TSVECTOR`), so the index serves it;
the ``simple`` configuration lowercases words and neither stems nor drops stop
words, which suits the mix of languages, code and identifiers an agent's
history holds. Elsewhere (SQLite, MySQL) every word of the query must
occur in the text, case-insensitively.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from django.db import connections
from django.db.models import BooleanField, F, Func, Q, QuerySet, Value
from django.utils.html import escape

from squad_memory.models import Message

#: Longest query accepted by the API and the admin, in characters.
MAX_QUERY_LENGTH = 200
#: Characters of text around the first hit shown in an excerpt.
EXCERPT_CHARS = 160

_TOOL_KEYS = ("toolUse", "toolResult")

#: The indexed expression (migration 0004). Angle brackets become spaces: PostgreSQL's
#: parser would otherwise drop ``<word>`` as a markup tag.
TSVECTOR = "to_tsvector('simple', translate({column}, '<>', '  '))"


def extract_text(content: Any) -> str:
    """The plain text of a message's content blocks: text blocks, and the values of tool
    inputs and tool results (strings and numbers, in order), one line per block."""
    if not isinstance(content, list):
        return " ".join(_strings(content))
    return "\n".join(line for line in (_block_text(b) for b in content) if line)


def _block_text(block: Any) -> str:
    if not isinstance(block, dict):
        return " ".join(_strings(block))
    if isinstance(block.get("text"), str):
        return str(block["text"])
    for key in _TOOL_KEYS:
        if isinstance(block.get(key), dict):
            return _tool_text(block[key])
    if block.get("type") in ("tool_use", "tool_result"):
        return _tool_text(block)
    return " ".join(_strings(block.get("json", "")))


def _tool_text(tool: dict[str, Any]) -> str:
    name = tool.get("name")
    parts = [name] if isinstance(name, str) else []
    parts += _strings(tool.get("input"))
    content = tool.get("content")
    if isinstance(content, list):
        parts += [_block_text(b) for b in content]
    else:
        parts += _strings(content)
    return " ".join(p for p in parts if p)


def _strings(value: Any) -> list[str]:
    return list(_leaves(value))


def _leaves(value: Any) -> Iterator[str]:
    """String and number leaves of a JSON value (keys are structure, not text)."""
    if isinstance(value, str):
        if value:
            yield value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        yield str(value)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)


def terms(query: str) -> list[str]:
    """The words a query looks for: quotes and ``or`` dropped, ``-excluded`` words left out."""
    words = (w.strip('"') for w in query.split() if not w.startswith("-"))
    return [w for w in words if w and w.lower() != "or"]


class TextMatch(Func):
    """PostgreSQL: ``TSVECTOR(text) @@ websearch_to_tsquery('simple', query)``, the column
    compiled by the query (so it works in joins and subqueries) and the index's expression."""

    output_field = BooleanField()

    def as_sql(
        self,
        compiler: Any,
        connection: Any,
        function: str | None = None,
        template: str | None = None,
        arg_joiner: str | None = None,
        **extra_context: Any,
    ) -> Any:
        column, column_params = compiler.compile(self.source_expressions[0])
        query, query_params = compiler.compile(self.source_expressions[1])
        vector = TSVECTOR.format(column=column)
        sql = f"{vector} @@ websearch_to_tsquery('simple', {query})"
        return sql, (*column_params, *query_params)


def matching(messages: QuerySet[Message], query: str) -> QuerySet[Message]:
    """The messages of ``messages`` whose text matches ``query``.

    PostgreSQL: ``websearch_to_tsquery`` syntax (words are ANDed, ``"a phrase"``,
    ``or``, ``-word``). Elsewhere: every word must occur in the text.
    """
    if connections[messages.db].vendor == "postgresql":
        return messages.filter(TextMatch(F("text"), Value(query)))
    words = terms(query)
    if not words:
        return messages.none()
    condition = Q()
    for word in words:
        condition &= Q(text__icontains=word)
    return messages.filter(condition)


def excerpt(text: str, query: str, width: int = EXCERPT_CHARS) -> str:
    """HTML: the part of ``text`` around the first hit, escaped, each hit in ``<mark>``."""
    words = sorted(terms(query), key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(w) for w in words), re.IGNORECASE) if words else None
    first = pattern.search(text) if pattern else None
    start = max(0, first.start() - width // 3) if first else 0
    end = min(len(text), start + width)
    window = text[start:end]
    html: list[str] = ["…" if start else ""]
    position = 0
    for hit in pattern.finditer(window) if pattern else ():
        html += [escape(window[position : hit.start()]), f"<mark>{escape(hit.group())}</mark>"]
        position = hit.end()
    html += [escape(window[position:]), "…" if end < len(text) else ""]
    return "".join(html)

"""Searching the raw history by a message's plain text, stored in ``Message.text`` at save.
On PostgreSQL :func:`matching` is a full-text match written exactly as migration
``0003_message_text`` indexes it (:data:`TSVECTOR`), in the ``simple`` configuration (no
stemming, no stop words: it suits a mix of languages, code and identifiers); elsewhere every
word must occur, case-insensitively.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from django.db import OperationalError, connections, transaction
from django.db.models import BooleanField, F, Func, Q, QuerySet, Value
from django.utils.html import escape

from squad_memory.conf import app_settings
from squad_memory.exceptions import SearchTimeout

if TYPE_CHECKING:
    from squad_memory.models import Message

#: Longest query accepted by the API and the admin, in characters.
MAX_QUERY_LENGTH = 200
#: Characters of text around the first hit shown in an excerpt.
EXCERPT_CHARS = 160

#: The indexed expression (migration 0003). Angle brackets become spaces: PostgreSQL's
#: parser would otherwise drop ``<word>`` as a markup tag.
TSVECTOR = "to_tsvector('simple', translate({column}, '<>', '  '))"


#: PostgreSQL's planner charges ``cpu_operator_cost`` (0.0025 by default) per operator and
#: does not see that the text a match parses lives in TOAST, outside the pages it counts:
#: it would rather read a small-looking table row by row, parsing every row's text
#: (milliseconds each for long messages), than read the GIN index. While a search runs,
#: an operator costs 1 (a function such as ``to_tsvector`` costs 100 of them): a page
#: read, not a rounding error, so the index answers rare and absent words in every query.
PLANNER_SETTINGS = {"cpu_operator_cost": "1"}


#: PostgreSQL's SQLSTATE of a statement cancelled by ``statement_timeout``.
QUERY_CANCELED = "57014"


def plan_with_index(cursor: Any) -> None:
    """PostgreSQL: apply :data:`PLANNER_SETTINGS` to the rest of the current transaction."""
    for name, value in PLANNER_SETTINGS.items():
        cursor.execute("SELECT set_config(%s, %s, true)", [name, value])


@contextmanager
def searching(alias: str) -> Iterator[None]:
    """On PostgreSQL, run a search's statements (the API's and the admin's; they only read)
    in a transaction, or a savepoint of the caller's, where the full-text index is the plan
    (:func:`plan_with_index`) and each statement stops after ``SEARCH_TIMEOUT`` seconds
    (``statement_timeout``; 0: none), raising :class:`~squad_memory.exceptions.SearchTimeout`.
    It is rolled back at the end, so that the settings leave with it (a released savepoint
    would pass them on to the rest of the caller's transaction). Elsewhere, as it is."""
    seconds = app_settings.search_timeout
    if connections[alias].vendor != "postgresql":
        yield
        return
    try:
        with transaction.atomic(using=alias):
            with connections[alias].cursor() as cursor:
                plan_with_index(cursor)
                if seconds > 0:
                    timeout = str(max(int(seconds * 1000), 1))
                    cursor.execute("SELECT set_config('statement_timeout', %s, true)", [timeout])
            yield
            transaction.set_rollback(True, using=alias)
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) != QUERY_CANCELED:
            raise
        raise SearchTimeout(
            f"The search took longer than {seconds:g} seconds and was stopped; "
            "search for rarer words, or retry later."
        ) from exc


def terms(query: str) -> list[str]:
    """The words a query looks for: quotes and ``or`` dropped, ``-excluded`` words left out."""
    words = (w.strip('"') for w in query.split() if not w.startswith("-"))
    return [w for w in words if w and w.lower() != "or"]


class TextMatch(Func):
    """PostgreSQL: ``TSVECTOR(text) @@ websearch_to_tsquery('simple', query)``, the column
    compiled by the query (so it works in joins and subqueries) and the index's expression."""

    output_field = BooleanField()

    def as_sql(self, compiler: Any, connection: Any, *args: Any, **kwargs: Any) -> Any:
        column, column_params = compiler.compile(self.source_expressions[0])
        query, query_params = compiler.compile(self.source_expressions[1])
        sql = f"{TSVECTOR.format(column=column)} @@ websearch_to_tsquery('simple', {query})"
        return sql, (*column_params, *query_params)


def matching(messages: QuerySet[Message], query: str) -> QuerySet[Message]:
    """The messages whose text matches ``query``: ``websearch_to_tsquery`` syntax on PostgreSQL
    (``"a phrase"``, ``or``, ``-word``), elsewhere every word in the text."""
    if connections[messages.db].vendor == "postgresql":
        return messages.filter(TextMatch(F("text"), Value(query)))
    if not (words := terms(query)):
        return messages.none()
    return messages.filter(*(Q(text__icontains=word) for word in words))


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

"""Searching the raw history by a message's plain text, stored in ``Message.text`` at save.
On PostgreSQL :func:`matching` is a full-text match written exactly as migration
``0003_message_text`` indexes it (:data:`TSVECTOR`), in the ``simple`` configuration (no
stemming, no stop words: it suits a mix of languages, code and identifiers); elsewhere every
word must occur, case-insensitively.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from django.db import OperationalError, connections, transaction
from django.db.models import BooleanField, F, Func, Q, QuerySet, Subquery, Value
from django.utils.html import escape

from squad_memory.conf import app_settings
from squad_memory.exceptions import SearchTimeout

if TYPE_CHECKING:
    from squad_memory.models import Message, Slot

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
#: read, not a rounding error. Costs that high also make every statement look worth
#: compiling (``jit_above_cost``: 100-230 ms a statement) and worth parallel workers
#: (starting them takes longer than an index lookup): neither, for a search.
PLANNER_SETTINGS = {
    "cpu_operator_cost": "1",
    "jit": "off",
    "max_parallel_workers_per_gather": "0",
}

#: The share of a table's rows PostgreSQL's planner assumes a word outside its statistics
#: matches (``DEFAULT_TS_MATCH_SEL``; less if the rarest word its statistics keep is rarer):
#: a query it estimates at no more than this share of the rows, per ``or`` alternative, is
#: one it knows nothing common in, and is looked up in the index (:func:`found`).
RARE_SHARE = 0.005

#: The most rows a page asks for (the API's largest page), for :func:`walks_newest`.
PAGE_ROWS = 500
#: What a message of another user costs the newest-first walk (its slot compared, its text
#: left unparsed) as a share of one whose text a search parses: about 0.5 us against 30 us
#: on a table of 3,000,000 messages (``bench scale``), rounded up.
SKIP_COST = 1 / 50


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


class Among(Func):
    """PostgreSQL: ``column = ANY(ARRAY(subquery))``. The subquery runs once, before the rest
    (an init plan the planner cannot fold into the query around it), and what it returns is
    a list of values: the query around it can only look them up, never walk an index of
    its own past rows that are not in it."""

    output_field = BooleanField()

    def as_sql(self, compiler: Any, connection: Any, *args: Any, **kwargs: Any) -> Any:
        column, column_params = compiler.compile(self.source_expressions[0])
        rows, rows_params = compiler.compile(self.source_expressions[1])
        return f"{column} = ANY(ARRAY{rows})", (*column_params, *rows_params)


def estimated_rows(rows: QuerySet[Any]) -> float:
    """The rows the planner expects ``rows`` to return (PostgreSQL; it reads none)."""
    plan = json.loads(rows.explain(format="json"))
    return float(plan[0]["Plan"]["Plan Rows"])


def every(messages: QuerySet[Message]) -> QuerySet[Message]:
    """Every message of the database ``messages`` reads, whoever's, in no order."""
    return messages.model._default_manager.using(messages.db).order_by()


def estimates(messages: QuerySet[Message], query: str) -> tuple[float, float]:
    """The rows the planner expects in the whole table ``messages`` reads (whoever's), and
    among them matching ``query``. Two ``EXPLAIN``, no row read."""
    table = every(messages)
    return estimated_rows(table), estimated_rows(matching(table, query))


def is_rare(messages: QuerySet[Message], query: str) -> bool:
    """Whether the planner counts the messages matching ``query`` (in the whole table,
    whoever's) as few: no more than :data:`RARE_SHARE` of the table per ``or`` alternative,
    as it counts every word outside its statistics. Only a query its statistics know to be
    common is not. Off PostgreSQL, False. Two ``EXPLAIN``, no row read."""
    if connections[messages.db].vendor != "postgresql":
        return False
    return _rare(query, *estimates(messages, query))


def _rare(query: str, table: float, matches: float) -> bool:
    """:func:`is_rare` from the planner's :func:`estimates`."""
    alternatives = 1 + sum(word.lower() == "or" for word in query.split())
    return matches <= RARE_SHARE * alternatives * table + 1


def indexed(messages: QuerySet[Message], query: str) -> QuerySet[Message]:
    """PostgreSQL: the messages of ``messages`` among those the full-text index gives for
    ``query`` (every match in the table, looked up first: :class:`Among`)."""
    ids = matching(every(messages), query).values("pk")
    return messages.filter(Among(F("pk"), Subquery(ids)))


class OneOf(Func):
    """PostgreSQL: ``column = ANY(%s::type[])``, a list known before the query, sent as one
    constant array: the executor looks a value up in a hash of it, where an array a subquery
    gives (:class:`Among`) is searched element by element for every row (20,000 slot ids:
    400 ms to pass over 6,000 messages, against 1 ms)."""

    output_field = BooleanField()

    def __init__(self, column: Any, values: list[int]) -> None:
        super().__init__(column)
        self.values = values

    def as_sql(self, compiler: Any, connection: Any, *args: Any, **kwargs: Any) -> Any:
        column, column_params = compiler.compile(self.source_expressions[0])
        cast = self.source_expressions[0].output_field.db_type(connection)
        return f"{column} = ANY(%s::{cast}[])", (*column_params, self.values)


def walks_newest(mine: int, table: float, matches: float) -> bool:
    """Whether walking the whole table newest first (by id), passing over the messages of
    other slots, fills a page (:data:`PAGE_ROWS`) for less than parsing ``mine`` messages,
    every message of the slots searched: the plan the planner picks for a few slots whatever
    they hold, as it counts a slot's messages as the table's average, and one slot may hold
    a hundred thousand. The walk expects to read ``PAGE_ROWS * table / (mine * share
    matching)`` rows, at :data:`SKIP_COST` each (``table`` and ``matches``: the planner's
    :func:`estimates`)."""
    return mine * mine * matches >= PAGE_ROWS * table * table * SKIP_COST


def newest_walk(messages: QuerySet[Message], slots: list[int]) -> QuerySet[Message]:
    """PostgreSQL: ``messages`` of the slots ``slots`` lists (:class:`OneOf`, so that the walk
    compares a message's slot before it parses its text) read by walking the primary key,
    in the order a page asks for: sorting is off for the rest of the search's transaction
    (:func:`searching`), so that no plan reads every message of the slots before it sorts
    them. A cursor's ``id`` bound starts the walk, either way."""
    with connections[messages.db].cursor() as cursor:
        cursor.execute("SELECT set_config('enable_sort', 'off', true)")
    return messages.filter(OneOf(F("slot"), slots))


def found(
    messages: QuerySet[Message], query: str, slots: QuerySet[Slot] | None = None
) -> QuerySet[Message]:
    """:func:`matching`, for a search across slots that reads the messages in an order of
    its own (newest first) and stops at a page; run it inside :func:`searching`.
    ``slots``: the slots ``messages`` are limited to (one user's), if they are.

    A plan that walks the newest messages and parses each until the page is full is the
    fastest for a common word and the slowest there is for a rare one (every message of the
    table), and the planner cannot tell a rare word from one it has no statistics for: it
    counts both as :data:`RARE_SHARE` of the rows, so at a few million it picks the walk.
    On PostgreSQL a query :func:`is_rare` finds every match in the full-text index first
    (:func:`indexed`); the page is then the newest of those. A common word in slots that
    hold a large share of the table is found by the walk (:func:`walks_newest`,
    :func:`newest_walk`). Any other common word stays the planner's to plan."""
    if connections[messages.db].vendor != "postgresql":
        return matching(messages, query)
    table, matches = estimates(messages, query)
    if _rare(query, table, matches):
        return indexed(messages, query)
    if slots is None:
        return matching(messages, query)
    sizes = dict(slots.order_by().values_list("pk", "last_seq"))
    if walks_newest(sum(sizes.values()), table, matches):
        return matching(newest_walk(messages, list(sizes)), query)
    return matching(messages, query)


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

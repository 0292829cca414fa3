"""Cursor pagination: pages by a unique, unchanging column, never a full ``COUNT``."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils.dateparse import parse_datetime
from django.utils.timezone import is_aware
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request

#: Cursor positions must fit the BIGINT columns they compare with.
MAX_POSITION = 2**63 - 1
_INTEGER = re.compile(r"-?[0-9]{1,19}")
_DIGITS = re.compile(r"[0-9]{1,1000}")


def _integer(value: str) -> int | None:
    """``value`` as an int if it is a plain decimal that fits a BIGINT, else None."""
    if not _INTEGER.fullmatch(value) or abs(int(value)) > MAX_POSITION:
        return None
    return int(value)


class NewestFirst(CursorPagination):
    """Newest first, by id (unique and unchanging, as a cursor needs): slots, search hits."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_size(self, request: Request) -> int:
        value = request.query_params.get("page_size")
        if value is None:
            return int(self.page_size or 0)
        if not _DIGITS.fullmatch(value) or int(value) < 1:
            raise ValidationError({"page_size": ["Must be a positive integer."]})
        return min(int(value), int(self.max_page_size or 0))  # capped, as DRF caps it

    def decode_cursor(self, request: Request) -> Cursor | None:
        cursor = super().decode_cursor(request)
        position = None if cursor is None else cursor.position
        if position is not None and _integer(str(position)) is None:
            raise NotFound(self.invalid_cursor_message)
        return cursor

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"].update(minimum=1)
                parameter["description"] = (
                    f"Results per page ({self.page_size} by default; more than "
                    f"{self.max_page_size} are capped at {self.max_page_size})."
                )
        return parameters

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        """DRF's, without its ``api.example.org`` sample links."""
        paginated = super().get_paginated_response_schema(schema)
        for link in ("next", "previous"):
            paginated["properties"][link].pop("example", None)
        return paginated


class BySeq(NewestFirst):
    """Raw messages by sequence number; ``?ordering=-seq`` pages from the newest."""

    ordering = "seq"
    ordering_param = "ordering"
    orderings = ("seq", "-seq")

    def get_ordering(self, request: Request, queryset: QuerySet[Any], view: Any) -> tuple[str, ...]:
        value = request.query_params.get(self.ordering_param, self.ordering)
        if value not in self.orderings:
            raise ValidationError(
                {self.ordering_param: [f"Must be one of {', '.join(self.orderings)}."]}
            )
        return (value,)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [
            *super().get_schema_operation_parameters(view),
            {
                "name": self.ordering_param,
                "required": False,
                "in": "query",
                "description": "seq (oldest first, the default) or -seq (newest first).",
                "schema": {"type": "string", "enum": list(self.orderings)},
            },
        ]


#: The order of :class:`ByActivity`'s rows: last activity, then id, newest first.
NEWEST = ("-updated_at", "-id")


class ByActivity(NewestFirst):
    """Sessions by their last activity, the most recent first, each one row of the queryset
    (its newest slot): a keyset on ``(updated_at, id)``, so sessions that share a time are
    neither skipped nor repeated, and a page costs what its rows cost however many slots
    there are. A cursor is the position of the row before it (``reverse``: after it)."""

    ordering = "-updated_at"  # then -id: NEWEST

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> list[Any]:
        self.request = request
        self.base_url = request.build_absolute_uri()
        self.page_size = self.get_page_size(request)
        cursor = self.decode_cursor(request)
        reverse = bool(cursor and cursor.reverse)
        if cursor is not None and cursor.position is not None:
            queryset = queryset.filter(_beyond(activity_position(str(cursor.position)), reverse))
        order = ("updated_at", "id") if reverse else NEWEST
        rows = list(queryset.order_by(*order)[: self.page_size + 1])
        more, rows = len(rows) > self.page_size, rows[: self.page_size]
        if reverse:
            rows.reverse()
        self.has_next = bool(cursor) if reverse else more
        self.has_previous = more if reverse else bool(cursor)
        self.page = rows
        return rows

    def decode_cursor(self, request: Request) -> Cursor | None:
        cursor = CursorPagination.decode_cursor(self, request)
        if cursor is not None and cursor.position is not None:
            activity_position(str(cursor.position))  # a crafted position: 404 before any query
        return cursor

    def get_next_link(self) -> str | None:
        return self._link(self.page[-1], False) if self.has_next and self.page else None

    def get_previous_link(self) -> str | None:
        return self._link(self.page[0], True) if self.has_previous and self.page else None

    def _link(self, row: Any, reverse: bool) -> str:
        position: Any = _position_of(row)  # DRF's stubs type a position as an int
        return self.encode_cursor(Cursor(0, reverse, position))


def _position_of(row: Any) -> str:
    when = row.updated_at
    return f"{when.astimezone(UTC).isoformat() if is_aware(when) else when.isoformat()} {row.pk}"


def activity_position(position: str) -> tuple[datetime, int]:
    """A cursor's ``(updated_at, id)``; NotFound (404) for anything :func:`_position_of`
    could not have written, however it fails (an impossible date, an offset out of range,
    an offset where ``USE_TZ`` is off or none where it is on)."""
    when, _, pk = str(position).rpartition(" ")
    try:
        moment = parse_datetime(when)
        if moment is not None and moment.tzinfo is not None:
            moment = moment.astimezone(UTC)
    except (ValueError, OverflowError):
        moment = None
    number = _integer(pk)
    if moment is None or is_aware(moment) != settings.USE_TZ or number is None:
        raise NotFound(CursorPagination.invalid_cursor_message)
    return moment, number


def _beyond(position: tuple[datetime, int], reverse: bool) -> Q:
    """Rows after ``position`` in the newest-first order (``reverse``: before it). The bound on
    ``updated_at`` alone is redundant but lets an index range start at the position."""
    moment, pk = position
    if reverse:
        return Q(updated_at__gte=moment) & (Q(updated_at__gt=moment) | Q(pk__gt=pk))
    return Q(updated_at__lte=moment) & (Q(updated_at__lt=moment) | Q(pk__lt=pk))


#: A history position: ``slot.seq`` pairs, a space apart (a session has a few agents).
_HISTORY_POSITION = re.compile(r"[0-9]{1,18}\.[0-9]{1,18}( [0-9]{1,18}\.[0-9]{1,18}){0,999}")


class HistoryPages(NewestFirst):
    """A session's merged history, newest page first: each page holds the ``page_size``
    messages before the previous page's, oldest first; its ``next`` link leads to older
    ones. A cursor holds, for each of the session's slots, the sequence number its older
    messages end before (``squad_memory.storage.memory.Before``)."""

    def decode_before(self, request: Request) -> dict[int, int] | None:
        """The position a request's cursor names (None: the newest page); 404 if crafted."""
        cursor = CursorPagination.decode_cursor(self, request)
        if cursor is None:
            return None
        position = str(cursor.position)
        if cursor.reverse or not _HISTORY_POSITION.fullmatch(position):
            raise NotFound(self.invalid_cursor_message)
        pairs = (pair.split(".") for pair in position.split(" "))
        return {int(slot): int(seq) for slot, seq in pairs}

    def link(self, request: Request, before: dict[int, int]) -> str | None:
        """The address of the page that ends at ``before`` (None for {}: nothing older)."""
        if not before:
            return None
        self.base_url = request.build_absolute_uri()
        position: Any = " ".join(f"{slot}.{seq}" for slot, seq in sorted(before.items()))
        return self.encode_cursor(Cursor(0, False, position))

"""Cursor pagination: pages by a unique, unchanging column, never a full ``COUNT``."""

from __future__ import annotations

import re
from typing import Any

from django.db.models import QuerySet
from django.utils.dateparse import parse_datetime
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


class ByActivity(NewestFirst):
    """Sessions by their last activity, the most recent first."""

    ordering = "-last_activity"

    def decode_cursor(self, request: Request) -> Cursor | None:
        cursor = CursorPagination.decode_cursor(self, request)
        position = None if cursor is None else cursor.position
        if position is not None and parse_datetime(str(position)) is None:
            raise NotFound(self.invalid_cursor_message)
        return cursor

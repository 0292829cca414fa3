"""JSON in and out: a parser with the API's body-size limit, and renderers that cannot fail."""

from __future__ import annotations

import json
from typing import IO, Any

from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.generics import GenericAPIView
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer

from squad_memory.conf import app_settings

#: Room for the envelope of a batch (ids, field names) on top of the messages themselves.
ENVELOPE_BYTES = 64 * 1024


class RequestTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "request_too_large"


def max_body_bytes() -> int:
    """The largest body a post may have: a full batch of the largest messages, plus envelope."""
    return app_settings.max_message_bytes * app_settings.max_batch_size + ENVELOPE_BYTES


class LimitedJSONParser(BaseParser):
    """``application/json`` read up to :func:`max_body_bytes` (400 or 413 otherwise), from the
    stream rather than ``request.body``, which ``DATA_UPLOAD_MAX_MEMORY_SIZE`` caps."""

    media_type = "application/json"

    def parse(self, stream: IO[bytes] | None, *args: Any, **kwargs: Any) -> Any:
        if stream is None:
            raise ParseError("The request body is empty; send a JSON object.")
        limit = max_body_bytes()
        raw = stream.read(limit + 1)
        if len(raw) > limit:
            raise RequestTooLarge(
                f"The request body exceeds {limit} bytes (a batch of MAX_BATCH_SIZE messages "
                "of MAX_MESSAGE_BYTES each); send fewer or smaller messages per request."
            )
        try:
            return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
        except UnicodeDecodeError as exc:
            raise ParseError(f"The request body is not valid UTF-8: {exc.reason}.") from exc
        except (ValueError, RecursionError) as exc:
            raise ParseError(f"JSON parse error: {exc}") from exc


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class SafeJSONRenderer(JSONRenderer):
    """UTF-8 JSON; ASCII escapes when a string holds a lone surrogate (an error message may
    quote what a client sent, such as ``"\\ud800"``, which UTF-8 cannot encode)."""

    def render(self, data: Any, *args: Any, **kwargs: Any) -> bytes:
        try:
            return bytes(super().render(data, *args, **kwargs))
        except UnicodeEncodeError:
            return bytes(_AsciiJSONRenderer().render(data, *args, **kwargs))


class _AsciiJSONRenderer(JSONRenderer):
    ensure_ascii = True


class BrowsableRenderer(BrowsableAPIRenderer):
    """DRF's browsable API, drawing a filter form only for a view that has a queryset to
    filter: a view that builds its rows in ``get`` (sessions, search) has none to give."""

    def get_filter_form(self, data: Any, view: Any, request: Any) -> Any:
        if not has_queryset(view):
            return None
        return super().get_filter_form(data, view, request)


def has_queryset(view: Any) -> bool:
    """Whether ``view.get_queryset()`` answers (a ``queryset`` or its own ``get_queryset``)."""
    default = GenericAPIView.get_queryset
    own = getattr(type(view), "get_queryset", default) is not default
    return getattr(view, "queryset", None) is not None or own


#: JSON first: a client sending no ``Accept``, ``*/*`` or ``application/json`` gets JSON; a
#: browser asking for ``text/html`` gets DRF's browsable API.
RENDERERS = [SafeJSONRenderer, BrowsableRenderer]

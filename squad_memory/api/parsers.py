"""A JSON parser with a body-size limit, that turns every decoding failure into a 400."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import IO, Any

from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import BaseParser

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
    """``application/json`` only, read up to :func:`max_body_bytes`; bad bodies are 400/413.

    It reads the request stream itself rather than ``request.body`` (which DRF uses for
    its own ``JSONParser`` and which Django caps at ``DATA_UPLOAD_MAX_MEMORY_SIZE``), so
    the API's limit is the one that applies: a full batch of full-size messages fits.
    """

    media_type = "application/json"

    def parse(
        self,
        stream: IO[bytes] | None,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
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
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ParseError(f"The request body is not valid UTF-8: {exc.reason}.") from exc
        try:
            return json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            raise ParseError(f"JSON parse error: {exc}") from exc


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")

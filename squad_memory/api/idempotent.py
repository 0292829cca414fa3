"""The ``Idempotency-Key`` request header of ``POST /api/slots/messages/``.

A retry with the same key and the same body answers what the first request answered
(same status, same stored sequence numbers) and stores nothing; the same key with
another body answers ``422``. Keys are kept per requesting account for
``IDEMPOTENCY_TTL`` seconds (see :mod:`squad_memory.idempotency`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from drf_spectacular.utils import OpenApiParameter
from rest_framework import status
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from squad_memory.idempotency import (
    MAX_KEY_LENGTH,
    Answer,
    IdempotencyKeyReused,
    once,
    request_hash,
)

HEADER = "Idempotency-Key"
#: Printable ASCII, as HTTP header values are (a UUID is a good key).
KEY_PATTERN = f"^[\\x20-\\x7e]{{1,{MAX_KEY_LENGTH}}}$"
_KEY = re.compile(KEY_PATTERN)

PARAMETER = OpenApiParameter(
    HEADER,
    {"type": "string", "minLength": 1, "maxLength": MAX_KEY_LENGTH, "pattern": KEY_PATTERN},
    OpenApiParameter.HEADER,
    description="Optional. A retry with the same key and body returns the first answer and "
    "stores nothing; the same key with another body is a 422. Use a new UUID per request.",
)


class KeyReused(APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_detail = "This Idempotency-Key was used for a different request."
    default_code = "idempotency_key_reused"


def header_key(request: Request) -> str | None:
    """The request's ``Idempotency-Key``, None without one; 400 for an unusable one."""
    key = request.headers.get(HEADER)
    if key is None:
        return None
    if not _KEY.fullmatch(key):
        raise ValidationError(
            {HEADER: [f"Must be 1 to {MAX_KEY_LENGTH} printable ASCII characters."]}
        )
    return key


def respond(request: Request, write: Callable[[], Answer]) -> Response:
    """``write``'s answer, once per ``Idempotency-Key`` when the request has one."""
    key = header_key(request)
    if key is None:
        answer = write()
    else:
        digest = request_hash(str(request.method), request.path, request.data)
        try:
            answer = once(str(request.user.pk), key, digest, write)
        except IdempotencyKeyReused as exc:
            raise KeyReused(str(exc)) from exc
    response = Response(answer.body, status=answer.status)
    if answer.replayed:
        response["Idempotent-Replayed"] = "true"
    return response

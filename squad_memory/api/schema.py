"""OpenAPI descriptions shared by the views: the error responses every endpoint documents."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers
from rest_framework.serializers import Serializer

from squad_memory.validation import ID_PATTERN


class ErrorSerializer(serializers.Serializer[dict[str, Any]]):
    detail = serializers.CharField()


class SummarizerErrorSerializer(ErrorSerializer):
    error_id = serializers.IntegerField(
        allow_null=True,
        help_text="The compression log row of the failure (quote it when reporting the error).",
    )


SLOT_ID = OpenApiParameter(
    "id", {"type": "integer", "minimum": 1}, OpenApiParameter.PATH, description="The slot's id."
)
SESSION_ID = OpenApiParameter(
    "session_id",
    {"type": "string", "minLength": 1, "maxLength": 255, "pattern": ID_PATTERN},
    OpenApiParameter.PATH,
    description="The session id (percent-encode a slash as %2F).",
)

ERRORS: dict[int, OpenApiResponse] = {
    400: OpenApiResponse(
        OpenApiTypes.OBJECT,
        description="Invalid input: an object mapping each bad field (or non_field_errors) "
        'to its errors; malformed JSON gives {"detail": ...}.',
    ),
    401: OpenApiResponse(ErrorSerializer, description="Not authenticated."),
    403: OpenApiResponse(ErrorSerializer, description="Authenticated, but without the permission."),
    404: OpenApiResponse(
        ErrorSerializer, description="No such slot, not one of yours, or an invalid cursor."
    ),
    413: OpenApiResponse(ErrorSerializer, description="The request body is too large."),
    415: OpenApiResponse(ErrorSerializer, description="The body is not application/json."),
    422: OpenApiResponse(
        ErrorSerializer, description="The Idempotency-Key was used for a different request."
    ),
    429: OpenApiResponse(
        ErrorSerializer, description="Too many requests; retry after Retry-After seconds."
    ),
    502: OpenApiResponse(
        SummarizerErrorSerializer,
        description="The summarizer failed; anything the request stored stays stored. The "
        "error itself is shown to staff with view_compression; error_id names its log row.",
    ),
    503: OpenApiResponse(
        ErrorSerializer,
        description="A service the request needs (the database, or the broker for a "
        "compression) did not answer; retry after Retry-After seconds.",
    ),
}


def errors(success: dict[int, Any], *codes: int) -> dict[int, Any]:
    """``success`` responses plus the documented errors ``codes``."""
    responses: dict[int, Any] = dict(success)
    for code in codes:
        responses[code] = ERRORS[code]
    if 400 in codes and 413 in codes:
        responses[415] = ERRORS[415]
    for code in (429, 503):  # any request may be throttled or meet a database outage
        responses[code] = ERRORS[code]
    return responses


def skipped(serializer: type[Serializer[Any]]) -> OpenApiResponse:
    """The answer to a single message skipped by the role rule (nothing stored)."""
    return OpenApiResponse(
        serializer, description="Nothing stored: the message repeated the last role."
    )

"""Errors of the API: every answer is JSON (503 with ``Retry-After`` when the database is
unavailable, a logged 500 for the unexpected, a JSON 404 for the rest of the API's prefix),
and a failed compression (502) or broker (503) names its error to staff with
``view_compression`` only; others get an error id to quote. An error id has one form
everywhere (500, 502, 503): twelve random hex digits, written in the log with the error.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from django.db import InterfaceError, OperationalError
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import status
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from squad_memory.exceptions import InvalidMessage, InvalidSlotKey, SummarizerError
from squad_memory.models import Compression, Slot
from squad_memory.permissions import COMPRESSION, can_view_all

logger = logging.getLogger(__name__)

#: Errors meaning the database cannot be reached (down, restarting, connection lost).
DATABASE_UNAVAILABLE = (OperationalError, InterfaceError)
#: Seconds a client should wait before retrying after a 503.
RETRY_AFTER = 5
INTERNAL_ERROR = "Internal server error; quote error id {error_id} when reporting it."
E = TypeVar("E", bound=APIException)


class Unavailable(APIException):
    """A service the request needs did not answer in time; nothing was changed."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The database is unavailable; retry in a few seconds."
    default_code = "unavailable"


class SummarizerFailed(APIException):
    """The summarizer (an upstream service) failed; what was stored stays stored."""

    status_code = status.HTTP_502_BAD_GATEWAY
    default_code = "summarizer_failed"


class KeyReused(APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_code = "idempotency_key_reused"


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF's exception handler, made total: no exception escapes as an HTML page."""
    if isinstance(exc, DATABASE_UNAVAILABLE):
        logger.warning("Database unavailable during an API request: %s", exc)
        exc = Unavailable()
    if isinstance(exc, Http404):  # "No Slot matches the given query." names a model
        exc = NotFound()
    response = drf_exception_handler(exc, context)
    if response is None:
        error_id = new_error_id()
        logger.error("Unhandled error in an API view (error id %s)", error_id, exc_info=exc)
        set_rollback()
        detail = INTERNAL_ERROR.format(error_id=error_id)
        response = Response({"detail": detail, "error_id": error_id}, status=500)
    if response.status_code == status.HTTP_503_SERVICE_UNAVAILABLE:
        response["Retry-After"] = str(RETRY_AFTER)
    return response


@csrf_exempt
def not_found(request: HttpRequest, path: str = "") -> JsonResponse:
    return JsonResponse({"detail": NotFound.default_detail}, status=404)


def new_error_id() -> str:
    """The id an answer gives a client to quote, the same in the log line of the error."""
    return uuid.uuid4().hex[:12]


def _with_id(exc: E, request: Request, failure: str, error: object, error_id: str) -> E:
    """``exc`` answering ``{"detail", "error_id"}``: the error itself for staff with
    ``view_compression``, the id to quote for others (``error_id`` stays as it is)."""
    if can_view_all(request.user, COMPRESSION):
        detail = f"{failure}: {error}"
    else:
        detail = f"{failure}. Quote error id {error_id} when reporting it."
    exc.detail = cast(Any, {"detail": detail, "error_id": error_id})
    return exc


def summarizer_failed(
    request: Request, failure: str, error: object, slots: QuerySet[Slot]
) -> SummarizerFailed:
    """The 502 of a failed compression of one of ``slots``; its error id is logged with the
    compression log row of the failure, read from the database it was just written to."""
    failed = Compression.objects.using(Slot.objects.write_db()).filter(
        slot__in=slots, outcome=Compression.Outcome.FAILED
    )
    row = failed.order_by("-id").values_list("pk", flat=True).first()
    error_id = new_error_id()
    logger.error("Compression failed (error id %s, compression log row %s)", error_id, row)
    return _with_id(SummarizerFailed(), request, failure, error, error_id)


def not_queued(request: Request, slot: Slot, error: object) -> Unavailable:
    """The 503 of a compression the broker did not take (nothing is pending: retry later)."""
    error_id = new_error_id()
    logger.error("Compression of slot %s not queued (error id %s): %s", slot.pk, error_id, error)
    failure = "The compression could not be queued; retry later"
    return _with_id(Unavailable(), request, failure, error, error_id)


@contextmanager
def storage_errors(
    request: Request,
    slots: QuerySet[Slot] | Callable[[], QuerySet[Slot]],
    failure: str = "The summarizer failed",
) -> Iterator[None]:
    """The storage's refusals as answers: a key or message it refuses (for instance one
    stored before a stricter limit) is the client's 400; a failing summarizer is a 502
    (``slots``, or a callable that builds them, only on that failure)."""
    try:
        yield
    except (InvalidSlotKey, InvalidMessage) as exc:
        raise ValidationError({"non_field_errors": [str(exc)]}) from exc
    except SummarizerError as exc:
        found = slots if isinstance(slots, QuerySet) else slots()
        raise summarizer_failed(request, failure, exc, found) from exc

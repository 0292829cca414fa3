"""Every error of the API is JSON: the exception handler of its views and a middleware.

- :func:`exception_handler` (used by every view of :mod:`squad_memory.api`): DRF's
  answers, plus ``503`` with ``Retry-After`` when the database is unavailable and a
  JSON ``500`` for any other unhandled error (logged with its traceback).
- :func:`summarizer_failure`: a failed compression's 502, its detail for staff only.
- :class:`JSONErrorsMiddleware`: the pages Django itself renders under the API's
  prefix (an unknown URL's 404, an error outside the views) become JSON too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import InterfaceError, OperationalError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import NoReverseMatch, reverse
from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from squad_memory.models import Compression, Slot
from squad_memory.permissions import COMPRESSION, can_view_all

logger = logging.getLogger(__name__)

#: Errors meaning the database cannot be reached (down, restarting, connection lost).
DATABASE_UNAVAILABLE = (OperationalError, InterfaceError)
#: Seconds a client should wait before retrying after a 503.
RETRY_AFTER = 5


class DatabaseUnavailable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The database is unavailable; retry in a few seconds."
    default_code = "database_unavailable"


INTERNAL_ERROR = "Internal server error; the error was logged."


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF's exception handler, made total: no exception escapes as an HTML page."""
    if isinstance(exc, DATABASE_UNAVAILABLE):
        logger.warning("Database unavailable during an API request: %s", exc)
        exc = DatabaseUnavailable()
    response = drf_exception_handler(exc, context)
    if response is None:
        logger.error("Unhandled error in an API view", exc_info=exc)
        set_rollback()
        response = Response({"detail": INTERNAL_ERROR}, status=500)
    if response.status_code == status.HTTP_503_SERVICE_UNAVAILABLE:
        response["Retry-After"] = str(RETRY_AFTER)
    return response


def summarizer_failure(
    request: Any, failure: str, error: object, slots: QuerySet[Slot]
) -> dict[str, Any]:
    """The body of the 502 of a failed compression of one of ``slots``.

    ``error_id`` is the id of its compression log row (``Compression`` pk). The error
    itself (which may name internal hosts) is shown only to those who may read that log:
    staff with ``view_compression``; others get a generic message with the id to quote.
    """
    failed = Compression.objects.filter(slot__in=slots, outcome=Compression.Outcome.FAILED)
    error_id = failed.order_by("-id").values_list("pk", flat=True).first()
    if can_view_all(request.user, COMPRESSION):
        detail = f"{failure}: {error}"
    else:
        detail = f"{failure}. Quote error id {error_id} when reporting it."
    return {"detail": detail, "error_id": error_id}


def api_prefix() -> str | None:
    """The path the API is mounted at (``/api/``), or None if it is not mounted."""
    try:
        slots = reverse("squad_memory_api:slot-list")
    except NoReverseMatch:
        return None
    return slots[: -len("slots/")]


def json_error(code: int, detail: str) -> JsonResponse:
    response = JsonResponse({"detail": detail}, status=code)
    if code == status.HTTP_503_SERVICE_UNAVAILABLE:
        response["Retry-After"] = str(RETRY_AFTER)
    return response


class JSONErrorsMiddleware:
    """Under the API's prefix, error pages are JSON (``{"detail": ...}``), never HTML.

    Put it first in ``MIDDLEWARE``, so it also sees the errors of the middleware after it.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code < 400 or _is_json(response) or not _under_api(request):
            return response
        return json_error(response.status_code, response.reason_phrase)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if isinstance(exc, DATABASE_UNAVAILABLE) and _under_api(request):
            logger.warning("Database unavailable during an API request: %s", exc)
            return json_error(503, str(DatabaseUnavailable.default_detail))
        return None  # Django logs it and renders its 500, which __call__ turns into JSON


def _is_json(response: HttpResponse) -> bool:
    return "json" in str(response.get("Content-Type", ""))


def _under_api(request: HttpRequest) -> bool:
    prefix = api_prefix()
    return prefix is not None and request.path.startswith(prefix)

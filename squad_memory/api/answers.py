"""What the views read and answer: query parameters, the acting user_id, messages as JSON
dicts, and the storage's failures as HTTP errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from agent_squad.types import ConversationMessage
from django.db.models import QuerySet
from rest_framework import status
from rest_framework.exceptions import APIException, PermissionDenied, ValidationError
from rest_framework.request import Request

from squad_memory.api import access, errors
from squad_memory.exceptions import InvalidMessage, InvalidSlotKey, SummarizerError
from squad_memory.models import Outcome, Slot


def as_dicts(messages: list[ConversationMessage]) -> list[dict[str, Any]]:
    return [
        {
            "role": str(m.role),
            "content": m.content or [],
            "citations": getattr(m, "citations", None),
        }
        for m in messages
    ]


class SummarizerFailed(APIException):
    """The summarizer (an upstream service) failed; what was stored stays stored."""

    status_code = status.HTTP_502_BAD_GATEWAY
    default_detail = "The summarizer failed."
    default_code = "summarizer_failed"


class BrokerUnavailable(APIException):
    """The broker did not take the compression; nothing is pending, retry later."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The compression could not be queued."
    default_code = "broker_unavailable"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.wait = 5


#: Answers that started work still under way are 202; the rest say what happened (200).
COMPRESS_STATUS = {
    Outcome.QUEUED: status.HTTP_202_ACCEPTED,
    Outcome.DEFERRED: status.HTTP_202_ACCEPTED,
    Outcome.ALREADY_PENDING: status.HTTP_202_ACCEPTED,
}


def summarizer_failed(
    request: Request, failure: str, error: object, slots: QuerySet[Slot]
) -> SummarizerFailed:
    """The 502 of a failed compression: see :func:`errors.summarizer_failure`."""
    exc = SummarizerFailed()
    exc.detail = cast(Any, errors.summarizer_failure(request, failure, error, slots))
    return exc


@contextmanager
def storage_errors(
    request: Request, slots: QuerySet[Slot], failure: str = "The summarizer failed"
) -> Iterator[None]:
    """The storage's refusals as answers: a key or message it refuses (for instance one
    stored before a stricter limit) is the client's 400; a failing summarizer is a 502."""
    try:
        yield
    except (InvalidSlotKey, InvalidMessage) as exc:
        raise ValidationError({"non_field_errors": [str(exc)]}) from exc
    except SummarizerError as exc:
        raise summarizer_failed(request, failure, exc, slots) from exc


def query(serializer_class: type[Any], request: Request) -> dict[str, Any]:
    """Validated query parameters (400 with field errors otherwise)."""
    serializer = serializer_class(data=request.query_params.dict())
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def user_id_param(request: Request, given: str | None) -> str:
    """The ``user_id`` a request acts for; naming another user's is for staff only."""
    if given is None:
        return access.user_id_for(request.user)
    if not access.may_act_as(request.user, given):
        raise PermissionDenied("Only staff may name another user's user_id.")
    return given

"""API views. Every read and write goes through the same storage code as Python callers."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

import squad_memory
from squad_memory import compression, search
from squad_memory.api import access, errors, idempotent, schema
from squad_memory.api.answers import (
    COMPRESS_STATUS,
    BrokerUnavailable,
    as_dicts,
    query,
    storage_errors,
    summarizer_failed,
    user_id_param,
)
from squad_memory.api.deletion import SlotDeleteMixin
from squad_memory.api.pagination import MessageCursorPagination, SlotCursorPagination
from squad_memory.api.parsers import LimitedJSONParser
from squad_memory.api.permissions import MANAGE_PERMISSION, POST_PERMISSION, SlotAccess
from squad_memory.api.renderers import JSONFirstBrowsableAPIRenderer, SafeJSONRenderer
from squad_memory.api.search import MessageFilterSerializer
from squad_memory.api.serializers import (
    BufferQuerySerializer,
    BufferSerializer,
    CompressResultSerializer,
    HistorySerializer,
    MessageSerializer,
    PostMessagesSerializer,
    PostResultSerializer,
    SlotFilterSerializer,
    SlotSerializer,
    UserQuerySerializer,
    check_id,
)
from squad_memory.api.throttling import COMPRESS_SCOPE, THROTTLE_CLASSES
from squad_memory.idempotency import Answer
from squad_memory.models import Message, Outcome, Slot
from squad_memory.permissions import MESSAGE
from squad_memory.storage import SummarizingChatStorage

SLOT_ID = re.compile(r"[0-9]{1,18}")


def storage() -> SummarizingChatStorage:
    """The storage the API reads and writes through (``squad_memory.get_storage()``)."""
    return squad_memory.get_storage()


class ApiMixin(APIView):
    permission_classes = [SlotAccess]
    parser_classes = [LimitedJSONParser]
    renderer_classes = [SafeJSONRenderer, JSONFirstBrowsableAPIRenderer]
    throttle_classes = THROTTLE_CLASSES

    def get_exception_handler(self) -> Callable[..., Any]:
        return errors.exception_handler

    def check_permissions(self, request: Request) -> None:
        # Throttle first, so that anonymous clients (who get 401) are limited too.
        super().check_throttles(request)
        super().check_permissions(request)

    def check_throttles(self, request: Request) -> None:
        """Done at the start of :meth:`check_permissions`."""


@extend_schema_view(
    list=extend_schema(
        summary="List slots",
        parameters=[SlotFilterSerializer],
        responses=schema.errors({200: SlotSerializer(many=True)}, 400, 401, 403, 404),
    ),
    retrieve=extend_schema(
        summary="Read a slot",
        parameters=[schema.SLOT_ID],
        responses=schema.errors({200: SlotSerializer}, 401, 403, 404),
    ),
)
class SlotViewSet(
    SlotDeleteMixin,
    ApiMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet[Slot],
):
    """Slots (one conversation of one agent) the requesting user may see."""

    serializer_class = SlotSerializer
    pagination_class = SlotCursorPagination
    lookup_value_regex = "[^/]+"  # anything, so a bad id gets this API's JSON 404
    write_permissions = {
        "post_messages": POST_PERMISSION,
        "compress": MANAGE_PERMISSION,
        "reset": MANAGE_PERMISSION,
    }

    @classmethod
    def as_view(cls, actions: Any = None, **initkwargs: Any) -> Any:
        view = super().as_view(actions, **initkwargs)
        if actions and "compress" in actions.values():
            # Outside ATOMIC_REQUESTS' transaction, so an inline compression runs and reports.
            view = transaction.non_atomic_requests(view)
        return view

    def get_object(self) -> Slot:
        if not SLOT_ID.fullmatch(str(self.kwargs.get("pk", ""))):
            raise NotFound()
        return super().get_object()

    @property
    def throttle_scope(self) -> str | None:
        return COMPRESS_SCOPE if getattr(self, "action", None) == "compress" else None

    def get_readable_object(self, model_name: str) -> Slot:
        """The slot, if the user may also read its ``model_name`` rows (403 otherwise)."""
        slot = self.get_object()
        if not access.may_read(self.request.user, slot.user_id, model_name):
            raise PermissionDenied(
                f"Reading another user's {model_name}s needs the "
                f"squad_memory.view_{model_name} permission."
            )
        return slot

    def get_queryset(self) -> QuerySet[Slot]:
        slots = access.visible_slots(self.request.user, storage().namespace)
        if self.action == "list":
            slots = slots.filter(**query(SlotFilterSerializer, self.request))
        return slots

    @extend_schema(
        summary="Raw messages of a slot",
        parameters=[schema.SLOT_ID, MessageFilterSerializer],
        description="Every accepted message by sequence number, trimmed ones flagged; "
        "cursor-paginated (no total count). ?q= keeps the messages matching the words.",
        responses=schema.errors({200: MessageSerializer(many=True)}, 400, 401, 403, 404),
    )
    @action(detail=True, methods=["get"], pagination_class=MessageCursorPagination)
    def messages(self, request: Request, pk: str | None = None) -> Response:
        slot = self.get_readable_object(MESSAGE)
        rows: Any = Message.objects.filter(slot_id=slot.pk)  # a queryset of another model
        if words := query(MessageFilterSerializer, request).get("q"):
            rows = search.matching(rows, words)
        page = self.paginate_queryset(rows)
        data = MessageSerializer(page, many=True, context={"slot": slot}).data
        return self.get_paginated_response(data)

    @extend_schema(
        summary="The buffer of a slot",
        description="What fetch_chat returns: the summary followed by the newer messages, "
        "or the visible history while the buffer is inactive. Like fetch_chat, the first read "
        "of a long history starts the buffer, which compresses it (a summarizer call).",
        parameters=[schema.SLOT_ID, BufferQuerySerializer],
        responses=schema.errors({200: BufferSerializer}, 400, 401, 403, 404, 502),
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def buffer(self, request: Request, pk: str | None = None) -> Response:
        slot = self.get_readable_object(MESSAGE)
        size = query(BufferQuerySerializer, request).get("max_history_size")
        with storage_errors(request, Slot.objects.filter(pk=slot.pk)):
            messages = storage().fetch_chat_sync(slot.user_id, slot.session_id, slot.agent_id, size)
        slot.refresh_from_db()  # the fetch may have activated or compressed it
        data = {
            "slot": slot.pk,
            "active": bool(slot.active),
            "buffer_length": slot.buffer_length,
            "buffer_tokens": slot.buffer_tokens,
            "messages": as_dicts(messages),
        }
        return Response(BufferSerializer(data).data)

    @extend_schema(
        summary="Post a message or a batch",
        description="message: one message with the role rule of save_chat_message (a message "
        "repeating the last role is skipped). messages: a batch stored as given, like "
        "save_chat_messages. A rejected request stores nothing.",
        request=PostMessagesSerializer,
        parameters=[idempotent.PARAMETER],
        responses=schema.errors(
            {201: PostResultSerializer, 200: schema.skipped(PostResultSerializer)},
            400,
            401,
            403,
            413,
            422,
            502,
        ),
    )
    @action(detail=False, methods=["post"], url_path="messages", pagination_class=None)
    def post_messages(self, request: Request) -> Response:
        serializer = PostMessagesSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        user_id = user_id_param(request, data.get("user_id"))
        key = {"user_id": user_id, "session_id": data["session_id"], "agent_id": data["agent_id"]}
        slots = Slot.objects.filter(namespace=storage().namespace, **key)
        failure = "The messages were stored, but the summarizer failed"
        with storage_errors(request, slots, failure):
            return idempotent.respond(request, lambda: self._save(data, user_id))

    def _save(self, data: dict[str, Any], user_id: str) -> Answer:
        single = "message" in data
        result = storage().save_messages_detailed(
            user_id,
            data["session_id"],
            data["agent_id"],
            [data["message"]] if single else data["messages"],
            check_role=single,
            max_history_size=data.get("max_history_size"),
        )
        result.slot.refresh_from_db()
        body = {"slot": result.slot, "stored": result.rows, "skipped": result.skipped}
        code = status.HTTP_200_OK if result.skipped else status.HTTP_201_CREATED
        return Answer(code, PostResultSerializer(body, context={"slot": result.slot}).data)

    @extend_schema(
        summary="Compress the buffer now",
        parameters=[schema.SLOT_ID],
        description="Activates the buffer if needed and summarizes it whatever its length. "
        "202 when handed to a worker (Celery mode).",
        request=None,
        responses=schema.errors(
            {200: CompressResultSerializer, 202: CompressResultSerializer}, 400, 401, 403, 404, 502
        ),
    )
    @action(detail=True, methods=["post"], pagination_class=None)
    def compress(self, request: Request, pk: str | None = None) -> Response:
        slot = self.get_object()
        this = Slot.objects.filter(pk=slot.pk)
        with storage_errors(request, this):
            result = storage().compress_now(slot.user_id, slot.session_id, slot.agent_id)
        if result.error is not None:
            raise summarizer_failed(request, "The summarizer failed", result.error, this)
        if result.outcome == Outcome.NOT_QUEUED:
            raise BrokerUnavailable(f"The compression could not be queued: {result.detail}")
        slot.refresh_from_db()
        code = COMPRESS_STATUS.get(result.outcome, status.HTTP_200_OK)
        body = {"outcome": str(result.outcome), "slot": slot}
        return Response(CompressResultSerializer(body).data, status=code)

    @extend_schema(
        summary="Reset the buffer",
        parameters=[schema.SLOT_ID],
        description="Drops the summary and any pending compression; the raw history stays.",
        request=None,
        responses=schema.errors({200: SlotSerializer}, 401, 403, 404),
    )
    @action(detail=True, methods=["post"], pagination_class=None)
    def reset(self, request: Request, pk: str | None = None) -> Response:
        slot = self.get_object()
        compression.reset(slot.pk)
        slot.refresh_from_db()
        return Response(SlotSerializer(slot).data)


class SessionHistoryView(ApiMixin, APIView):
    """A session's merged history of every agent, the same as ``fetch_all_chats``."""

    @extend_schema(
        summary="Merged history of a session",
        description="Every agent's visible messages of the session by time; assistant text "
        "is prefixed with [agent_id]. Staff may pass ?user_id=.",
        parameters=[schema.SESSION_ID, UserQuerySerializer],
        responses=schema.errors({200: HistorySerializer}, 400, 401, 403, 404),
    )
    def get(self, request: Request, session_id: str) -> Response:
        try:
            check_id(session_id)
        except ValidationError as exc:
            raise ValidationError({"session_id": exc.detail}) from exc
        given = query(UserQuerySerializer, request).get("user_id")
        if given is not None and not access.may_read(request.user, given, MESSAGE):
            raise NotFound()
        user_id = given or access.user_id_for(request.user)
        slots = access.visible_slots(request.user, storage().namespace)
        with storage_errors(request, slots.filter(user_id=user_id, session_id=session_id)):
            messages = storage().fetch_all_chats_sync(user_id, session_id)
        data = {"user_id": user_id, "session_id": session_id, "messages": as_dicts(messages)}
        return Response(HistorySerializer(data).data)

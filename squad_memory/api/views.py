"""The API's endpoints: slots, a session's history, search, and the API root, all through the
storage code Python callers use. Every read an answer to a write is built from uses the
write database, so a read replica that lags never turns a stored write into an error.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any
from urllib.parse import quote

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Substr
from django.urls import NoReverseMatch, reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import generics, mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import (
    AuthenticationFailed,
    NotFound,
    PermissionDenied,
    ValidationError,
)
from rest_framework.metadata import SimpleMetadata
from rest_framework.permissions import SAFE_METHODS, AllowAny, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from squad_memory import compression, search
from squad_memory.api import access, errors, serializers, throttling
from squad_memory.api.docs import (
    IDEMPOTENCY_KEY,
    KEY_PATTERN,
    POST_EXAMPLES,
    SESSION_ID,
    SKIPPED,
    SLOT_ID,
    responses,
)
from squad_memory.api.formats import RENDERERS, LimitedJSONParser, SafeJSONRenderer
from squad_memory.api.pagination import ByActivity, BySeq, HistoryPages, NewestFirst
from squad_memory.exceptions import SearchTimeout
from squad_memory.models import Message, Outcome, Slot, SlotQuerySet
from squad_memory.operations import forgetting
from squad_memory.operations.idempotency import (
    MAX_KEY_LENGTH,
    Answer,
    IdempotencyKeyReused,
    once,
    request_hash,
)
from squad_memory.permissions import MESSAGE, can_view_all
from squad_memory.storage import get_storage

PK = re.compile(r"[0-9]{1,18}")
IDEMPOTENCY_KEY_VALUE = re.compile(KEY_PATTERN)
#: Outcomes of work still under way: 202 (the others say what happened: 200).
STARTED = {Outcome.QUEUED, Outcome.DEFERRED, Outcome.ALREADY_PENDING}
#: Characters of the last message's text a session's entry shows.
PREVIEW_CHARS = 100
SESSION_SLOT_FIELDS = (
    "id",
    "user_id",
    "session_id",
    "agent_id",
    "last_seq",
    "last_role",
    "updated_at",
)


def query(serializer_class: type[Any], request: Request) -> dict[str, Any]:
    """Validated query parameters (400 with field errors otherwise, and for a parameter
    given more than once: ``?q=a&q=b`` would otherwise mean its last value, silently)."""
    params = request.query_params
    if repeated := sorted(name for name, values in params.lists() if len(values) > 1):
        problem = "Given more than once; send each query parameter once."
        raise ValidationError({name: [problem] for name in repeated})
    serializer = serializer_class(data=request.query_params.dict())
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def given_user_id(request: Request, session_id: str) -> str | None:
    """A session endpoint's ``?user_id=`` (None: the requesting user's), its input checked."""
    try:
        serializers.check_id(session_id)
    except ValidationError as exc:
        raise ValidationError({"session_id": exc.detail}) from exc
    return query(serializers.UserQuerySerializer, request).get("user_id")


def acting_user_id(request: Request, given: str | None) -> str:
    """The ``user_id`` a write acts for; naming another user's needs the right to read their
    messages (nobody writes where they cannot read)."""
    if given is None:
        return access.user_id_for(request.user)
    if not access.may_read(request.user, given, MESSAGE):
        raise PermissionDenied(
            "Writing for another user's user_id needs the squad_memory.view_message "
            "permission (staff only), as reading their messages does."
        )
    return given


def fresh(slot: Slot) -> Slot:
    """``slot`` as the write database has it now (a replica may not have it yet)."""
    slot.refresh_from_db(using=Slot.objects.write_db())
    return slot


@contextmanager
def searching(alias: str) -> Iterator[None]:
    """:func:`squad_memory.search.searching`, its timeout a 503 that says so."""
    try:
        with search.searching(alias):
            yield
    except SearchTimeout as exc:
        raise errors.Unavailable(str(exc)) from exc


class SlotAccess(BasePermission):
    """Authenticated users read; a write needs the permission its view names for it."""

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        if request.method in SAFE_METHODS or request.method not in view.allowed_methods:
            return True  # reads are allowed; a method the view lacks is its 405
        needed = view.write_permission()
        if access.holds(user, needed):
            return True
        self.message = f"This needs the {needed} permission: ask an administrator for it."
        return False


class EndpointMetadata(SimpleMetadata):
    """``OPTIONS``: the endpoint's name and description, and the fields of the body its POST
    takes (:meth:`ApiMixin.request_body`; none for a POST without a body)."""

    def determine_actions(self, request: Request, view: Any) -> dict[str, Any]:
        body = view.request_body()
        return {} if body is None else {"POST": self.get_serializer_info(body())}


class ApiMixin(APIView):
    permission_classes = [SlotAccess]
    metadata_class = EndpointMetadata
    parser_classes = [LimitedJSONParser]
    renderer_classes = RENDERERS
    throttle_classes = throttling.THROTTLE_CLASSES

    def get_exception_handler(self) -> Callable[..., Any]:
        return errors.exception_handler

    def perform_authentication(self, request: Request) -> None:
        """Wrong credentials are counted per client address; past the rate of failed
        authentications they answer 429 instead of 401. A request that authenticates is
        never throttled by them: one client's revoked token locks nobody else out."""
        try:
            request.user  # noqa: B018 - authenticates
        except AuthenticationFailed:
            failures = throttling.AuthFailureThrottle()
            if not failures.allow_request(request, self):
                self.throttled(request, failures.wait() or 0)
            failures.failed()
            raise

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        if response.status_code >= 400:  # errors are JSON, even for a browser
            request.accepted_renderer = SafeJSONRenderer()
            request.accepted_media_type = "application/json"
        return super().finalize_response(request, response, *args, **kwargs)

    def check_permissions(self, request: Request) -> None:
        super().check_throttles(request)  # first, so anonymous clients (401) are limited too
        super().check_permissions(request)

    def check_throttles(self, request: Request) -> None:
        """Done at the start of :meth:`check_permissions`."""

    def write_permission(self) -> str | None:
        """The permission an unsafe request needs besides ownership (None: none)."""
        return access.MANAGE_PERMISSION

    def request_body(self) -> type[Any] | None:
        """The serializer of the body this endpoint's POST takes (None: no body)."""
        return None


def respond_once(request: Request, write: Callable[[], Answer]) -> Response:
    """``write``'s answer, once per ``Idempotency-Key``: a retry with the same key and body gets
    the first answer and stores nothing; another body is a 422 (keys live ``IDEMPOTENCY_TTL``)."""
    key = request.headers.get(IDEMPOTENCY_KEY.name)
    if key is None:
        answer = write()
    else:
        if not IDEMPOTENCY_KEY_VALUE.fullmatch(key):
            problem = f"Must be 1 to {MAX_KEY_LENGTH} printable ASCII characters."
            raise ValidationError({IDEMPOTENCY_KEY.name: [problem]})
        digest = request_hash(str(request.method), request.path, request.data)
        try:
            answer = once(str(request.user.pk), key, digest, write)
        except IdempotencyKeyReused as exc:
            raise errors.KeyReused(str(exc)) from exc
    response = Response(answer.body, status=answer.status)
    if answer.replayed:
        response["Idempotent-Replayed"] = "true"
    return response


@extend_schema_view(
    list=extend_schema(
        summary="List slots",
        description="The requesting user's slots; every user's for staff with view_slot.",
        parameters=[serializers.SlotFilterSerializer],
        responses=responses({200: serializers.SlotSerializer(many=True)}, 400, 404),
    ),
    retrieve=extend_schema(
        summary="Read a slot",
        parameters=[SLOT_ID],
        responses=responses({200: serializers.SlotSerializer}, 404),
    ),
)
class SlotViewSet(
    ApiMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[Slot]
):
    """Slots (one conversation of one agent) the requesting user may see."""

    serializer_class = serializers.SlotSerializer
    pagination_class = NewestFirst
    lookup_value_regex = "[^/]+"  # anything, so a bad id gets this API's JSON 404

    @classmethod
    def as_view(cls, actions: Any = None, **initkwargs: Any) -> Any:
        view = super().as_view(actions, **initkwargs)
        if actions and "compress" in actions.values():
            # Outside ATOMIC_REQUESTS' transaction, so an inline compression runs and reports.
            view = transaction.non_atomic_requests(view)
        return view

    @property
    def throttle_scope(self) -> str | None:
        return throttling.COMPRESS_SCOPE if getattr(self, "action", None) == "compress" else None

    def request_body(self) -> type[Any] | None:
        posts = self.action_map.get("post")  # the action a POST here runs (this may be OPTIONS)
        return serializers.PostMessagesSerializer if posts == "post_messages" else None

    def write_permission(self) -> str | None:
        if self.action == "destroy":
            return None  # the owner needs none; others are checked in destroy
        if self.action == "post_messages":
            return access.post_permission()
        return access.MANAGE_PERMISSION

    def get_queryset(self) -> QuerySet[Slot]:
        slots = access.visible_slots(self.request.user, get_storage().namespace)
        if self.request.method not in SAFE_METHODS:
            return slots.using(Slot.objects.write_db())  # a write decides on what it reads
        if self.action == "list":
            slots = slots.filter(**query(serializers.SlotFilterSerializer, self.request))
        return slots

    def get_object(self) -> Slot:
        if not PK.fullmatch(str(self.kwargs.get("pk", ""))):
            raise NotFound()
        return super().get_object()

    def get_readable_object(self, model_name: str) -> Slot:
        """The slot, if the user may also read its ``model_name`` rows (403 otherwise)."""
        slot = self.get_object()
        if not access.may_read(self.request.user, slot.user_id, model_name):
            raise PermissionDenied(
                f"Reading another user's {model_name}s needs the "
                f"squad_memory.view_{model_name} permission."
            )
        return slot

    @extend_schema(
        summary="Raw messages of a slot",
        parameters=[SLOT_ID, serializers.MessageFilterSerializer],
        description="Every accepted message by sequence number, trimmed ones flagged; "
        "cursor-paginated (no total count). ?q= keeps the messages matching the words.",
        responses=responses({200: serializers.MessageSerializer(many=True)}, 400, 404),
    )
    @action(detail=True, methods=["get"], pagination_class=BySeq)
    def messages(self, request: Request, pk: str | None = None) -> Response:
        """Every accepted message of the slot by sequence number, trimmed ones flagged."""
        slot = self.get_readable_object(MESSAGE)
        rows: Any = slot.messages.all()  # a queryset of another model, each row's slot loaded
        if words := query(serializers.MessageFilterSerializer, request).get("q"):
            rows = search.matching(rows, words)
        with searching(rows.db) if words else nullcontext():
            page = self.paginate_queryset(rows)
        data = serializers.MessageSerializer(page, many=True).data
        return self.get_paginated_response(data)

    @extend_schema(
        summary="The buffer of a slot",
        description="What fetch_chat returns: the summary followed by the newer messages, "
        "or the visible history while the buffer is inactive. Like fetch_chat, the first read "
        "of a long history starts the buffer, which compresses it (a summarizer call).",
        parameters=[SLOT_ID, serializers.BufferQuerySerializer],
        responses=responses({200: serializers.BufferSerializer}, 400, 404, 502),
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def buffer(self, request: Request, pk: str | None = None) -> Response:
        """What fetch_chat returns: the summary followed by the newer messages."""
        slot = self.get_readable_object(MESSAGE)
        size = query(serializers.BufferQuerySerializer, request).get("max_history_size")
        with errors.storage_errors(request, Slot.objects.filter(pk=slot.pk)):
            messages = get_storage().fetch_chat_sync(*slot.key, size)
        slot = fresh(slot)  # the fetch may have activated or compressed it
        state = {name: getattr(slot, name) for name in ("active", "buffer_length", "buffer_tokens")}
        data = {"slot": slot.pk, **state, "messages": messages}
        return Response(serializers.BufferSerializer(data).data)

    @extend_schema(
        summary="Post a message or a batch",
        description="message: one message with the role rule of save_chat_message (a message "
        "repeating the last role is skipped). messages: a batch stored as given, like "
        "save_chat_messages. A rejected request stores nothing. Needs the permission "
        "SQUAD_MEMORY['API_POST_PERMISSION'] names (squad_memory.add_message unless the "
        "project set None); posting for another user's user_id needs staff with "
        "view_message too, the right to read that user's messages.",
        request=serializers.PostMessagesSerializer,
        examples=POST_EXAMPLES,
        parameters=[IDEMPOTENCY_KEY],
        responses=responses(
            {201: serializers.PostResultSerializer, 200: SKIPPED}, 400, 413, 422, 502
        ),
    )
    @action(detail=False, methods=["post"], url_path="messages", pagination_class=None)
    def post_messages(self, request: Request) -> Response:
        """Store a message (with the role rule) or a batch in a slot, creating it if new."""
        serializer = serializers.PostMessagesSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        user_id = acting_user_id(request, data.get("user_id"))
        key = {"user_id": user_id, "session_id": data["session_id"], "agent_id": data["agent_id"]}
        namespace = get_storage().namespace

        def slots() -> QuerySet[Slot]:  # built only if the summarizer fails
            return Slot.objects.filter(namespace=namespace, **key)

        failure = "The messages were stored, but the summarizer failed"
        with errors.storage_errors(request, slots, failure):
            return respond_once(request, lambda: self._save(data, user_id))

    def _save(self, data: dict[str, Any], user_id: str) -> Answer:
        single = "message" in data
        result = get_storage().save_messages_detailed(
            user_id,
            data["session_id"],
            data["agent_id"],
            [data["message"]] if single else data["messages"],
            check_role=single,
            max_history_size=data.get("max_history_size"),
            read_view=False,  # the answer is the rows stored, not the conversation
        )
        slot = result.slot if result.compression is None else fresh(result.slot)
        body = {"slot": slot, "stored": result.rows, "skipped": result.skipped}
        code = status.HTTP_200_OK if result.skipped else status.HTTP_201_CREATED
        data = serializers.PostResultSerializer(body).data
        return Answer(code, data, slot=slot.pk)

    @extend_schema(
        summary="Compress the buffer now",
        parameters=[SLOT_ID],
        description="Activates the buffer if needed and summarizes it whatever its length. "
        "202 when handed to a worker (Celery mode); 503 when the broker did not take it.",
        request=None,
        responses=responses(
            dict.fromkeys((200, 202), serializers.CompressResultSerializer), 404, 502
        ),
    )
    @action(detail=True, methods=["post"], pagination_class=None)
    def compress(self, request: Request, pk: str | None = None) -> Response:
        """Compress the slot's buffer now, whatever its length."""
        slot = self.get_object()
        this = Slot.objects.filter(pk=slot.pk)
        with errors.storage_errors(request, this):
            result = get_storage().compress_now(*slot.key)
        if result.error is not None:
            raise errors.summarizer_failed(request, "The summarizer failed", result.error, this)
        if result.outcome == Outcome.NOT_QUEUED:
            raise errors.not_queued(request, slot, result.detail)
        body = {"outcome": str(result.outcome), "slot": fresh(slot)}
        code = status.HTTP_202_ACCEPTED if result.outcome in STARTED else status.HTTP_200_OK
        return Response(serializers.CompressResultSerializer(body).data, status=code)

    @extend_schema(
        summary="Reset the buffer",
        parameters=[SLOT_ID],
        description="Drops the summary and any pending compression; the raw history stays.",
        request=None,
        responses=responses({200: serializers.SlotSerializer}, 404),
    )
    @action(detail=True, methods=["post"], pagination_class=None)
    def reset(self, request: Request, pk: str | None = None) -> Response:
        """Drop the summary and any pending compression; the raw history stays."""
        slot = self.get_object()
        compression.reset(slot.pk)
        return Response(serializers.SlotSerializer(fresh(slot)).data)

    @extend_schema(
        summary="Delete a slot",
        parameters=[SLOT_ID],
        description="Deletes the slot with its raw messages, summary and compression log. "
        "Allowed to its owner, and to staff with the delete permission.",
        request=None,
        responses=responses({204: None}, 404),
    )
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        slot = self.get_object()
        access.check_may_delete(request.user, slot.user_id)
        forgetting.forget_slot(slot, actor=f"API user pk={request.user.pk}")
        return Response(status=status.HTTP_204_NO_CONTENT)


def newest_of_each_session(slots: SlotQuerySet) -> SlotQuerySet:
    """Of ``slots``, each session's newest slot by ``(updated_at, id)``: the row that stands
    for the session in the list, its position. Found by walking slots newest first through
    an index, each checked against its session's few other slots (no grouping of them all)."""
    newer = Slot.objects.filter(
        Q(updated_at__gt=OuterRef("updated_at"))
        | Q(updated_at=OuterRef("updated_at"), pk__gt=OuterRef("pk")),
        namespace=OuterRef("namespace"),
        user_id=OuterRef("user_id"),
        session_id=OuterRef("session_id"),
    )
    return slots.filter(~Exists(newer)).only("id", "user_id", "session_id", "updated_at")


class SessionListView(ApiMixin, generics.GenericAPIView[Slot]):
    """``GET /sessions/``: a user's sessions, the most recently active first."""

    pagination_class = ByActivity
    serializer_class = serializers.SessionSerializer

    @extend_schema(
        summary="List sessions",
        description="The requesting user's sessions, the most recently active first, each "
        "with its agents' slots, message count and the start of its last message: a chat "
        "sidebar. Staff with view_slot list every user's (?user_id= for one user's); the "
        "last message needs view_message too. Sessions active at the same moment keep one "
        "order; a session that gets a message while a client pages moves to the front, and "
        "the next links do not list it again (reload the first page to see it there).",
        parameters=[serializers.UserQuerySerializer],
        responses=responses({200: serializers.SessionSerializer(many=True)}, 400, 404),
    )
    def get(self, request: Request) -> Response:
        slots = access.visible_slots(request.user, get_storage().namespace)
        slots = slots.filter(**query(serializers.UserQuerySerializer, request))
        page: list[Slot] = self.paginate_queryset(newest_of_each_session(slots)) or []
        root = request.build_absolute_uri(reverse("squad_memory_api:root"))
        agents = self._agents(slots, page)
        readable = access.message_reader(request.user)
        data = [
            self._session(readable(slot.user_id), root, slot, agents[slot.user_id, slot.session_id])
            for slot in page
            if agents[slot.user_id, slot.session_id]  # deleted since the page was read
        ]
        return self.get_paginated_response(serializers.SessionSerializer(data, many=True).data)

    @staticmethod
    def _agents(slots: SlotQuerySet, page: list[Slot]) -> dict[tuple[str, str], list[Slot]]:
        """The slots of the page's sessions, newest first, each with its last message's text."""
        agents: dict[tuple[str, str], list[Slot]] = defaultdict(list)
        if not page:
            return agents
        keys = {(slot.user_id, slot.session_id) for slot in page}
        last = Message.objects.filter(slot_id=OuterRef("pk"), seq=OuterRef("last_seq"))
        found = (
            slots.filter(user_id__in={u for u, _ in keys}, session_id__in={s for _, s in keys})
            .only(*SESSION_SLOT_FIELDS)
            .annotate(preview=Substr(Subquery(last.values("text")[:1]), 1, PREVIEW_CHARS))
            .order_by("-updated_at", "-id")
        )
        for slot in found:  # a staff user's page may name the same session id of two users
            if (slot.user_id, slot.session_id) in keys:
                agents[slot.user_id, slot.session_id].append(slot)
        return agents

    @staticmethod
    def _session(readable: bool, root: str, position: Slot, agents: list[Slot]) -> dict[str, Any]:
        newest = agents[0]
        preview = newest.preview  # type: ignore[attr-defined]
        last = {"agent_id": newest.agent_id, "role": newest.last_role, "preview": preview}
        return {
            "user_id": position.user_id,
            "session_id": position.session_id,
            "last_activity": position.updated_at,
            "message_count": sum(slot.last_seq for slot in agents),
            "agents": [
                {
                    "agent_id": slot.agent_id,
                    "slot": slot.pk,
                    "url": f"{root}slots/{slot.pk}/",
                    "message_count": slot.last_seq,
                }
                for slot in agents
            ],
            "last_message": last if readable else None,
            "history": f"{root}sessions/{quote(position.session_id, safe='')}/history/",
        }


class SessionHistoryView(ApiMixin):
    """A session's merged history of every agent, as ``fetch_all_chats`` merges it, a page at
    a time, the newest first (``HistoryPages``)."""

    paging = [
        OpenApiParameter(
            "cursor",
            str,
            description="The page to read: the next link of the page after it (none: the "
            "newest page).",
        ),
        OpenApiParameter(
            "page_size",
            {"type": "integer", "minimum": 1},
            description=f"Messages per page ({HistoryPages.page_size} by default; more than "
            f"{HistoryPages.max_page_size} are capped at {HistoryPages.max_page_size}).",
        ),
    ]

    @extend_schema(
        summary="Merged history of a session",
        description="Every agent's visible messages of the session by time; assistant text "
        "is prefixed with [agent_id]. Newest page first: a page holds the page_size messages "
        "before the previous page's, oldest first; next links to the older ones (null: none "
        "left). A message stored while a client pages is on a new first page, never on a "
        "later one. Staff with view_message may pass ?user_id=.",
        parameters=[SESSION_ID, serializers.UserQuerySerializer, *paging],
        responses=responses({200: serializers.HistorySerializer}, 400, 404),
    )
    def get(self, request: Request, session_id: str) -> Response:
        given = given_user_id(request, session_id)
        if given is not None and not access.may_read(request.user, given, MESSAGE):
            raise NotFound()
        user_id = given or access.user_id_for(request.user)
        pages = HistoryPages()
        size, before = pages.get_page_size(request), pages.decode_before(request)
        slots = access.visible_slots(request.user, get_storage().namespace)
        session = slots.filter(user_id=user_id, session_id=session_id)
        with errors.storage_errors(request, session):
            messages, older = get_storage().history_page_sync(user_id, session_id, size, before)
        if not messages and not session.exists():
            raise NotFound()  # as its DELETE answers
        data = {"user_id": user_id, "session_id": session_id, "messages": messages}
        return Response(
            serializers.HistorySerializer({**data, "next": pages.link(request, older)}).data
        )


class SessionView(ApiMixin):
    """``DELETE /sessions/{session_id}/``: every slot of a session of one user."""

    def write_permission(self) -> str | None:
        return None  # the owner needs none; others are checked in delete

    @extend_schema(
        summary="Delete a session",
        description="Deletes every agent's slot of the session (the requesting user's, or, "
        "for staff with the delete permission, ?user_id='s) with its raw messages, summaries "
        "and compression log; other users' slots of the same session id stay.",
        parameters=[SESSION_ID, serializers.UserQuerySerializer],
        request=None,
        responses=responses({204: None}, 400, 404),
    )
    def delete(self, request: Request, session_id: str) -> Response:
        given = given_user_id(request, session_id)
        if given is not None and not access.may_act_as(request.user, given):
            raise NotFound()
        user_id = access.user_id_for(request.user) if given is None else given
        access.check_may_delete(request.user, user_id)
        namespace = get_storage().namespace
        slots = Slot.objects.using(Slot.objects.write_db())
        if not slots.filter(namespace=namespace, user_id=user_id, session_id=session_id).exists():
            raise NotFound()
        actor = f"API user pk={request.user.pk}"
        forgetting.forget(user_id, session_id, namespace=namespace, actor=actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SearchView(ApiMixin, generics.GenericAPIView[Message]):
    """Full-text search over raw messages."""

    pagination_class = NewestFirst
    serializer_class = serializers.SearchHitSerializer
    throttle_scope = throttling.SEARCH_SCOPE

    @extend_schema(
        summary="Search raw messages",
        description="Raw messages matching ?q=, newest first, cursor-paginated: the "
        "requesting user's, ?user_id='s, or for staff with view_message naming none, every "
        "user's. Each hit names its slot and seq, with an HTML-escaped excerpt marking the "
        "hits in `<mark>`. A search longer than SEARCH_TIMEOUT seconds is stopped (503).",
        parameters=[serializers.SearchQuerySerializer],
        responses=responses({200: serializers.SearchHitSerializer(many=True)}, 400, 404),
    )
    def get(self, request: Request) -> Response:
        params = query(serializers.SearchQuerySerializer, request)
        namespace = get_storage().namespace
        rows = Message.objects.filter(slot__namespace=namespace)
        given = params.get("user_id")
        if given is not None and not access.may_read(request.user, given, MESSAGE):
            raise PermissionDenied(
                "Searching another user's messages needs the squad_memory.view_message permission."
            )
        if given is None and not can_view_all(request.user, MESSAGE):
            given = access.user_id_for(request.user)
        slots = None if given is None else Slot.objects.filter(namespace=namespace, user_id=given)
        if given is not None:
            rows = rows.filter(slot__user_id=given)
        rows = rows.select_related("slot").only(*serializers.SearchHitSerializer.Meta.loads)
        with searching(rows.db):
            page = self.paginate_queryset(search.found(rows, params["q"], slots))
        data = serializers.SearchHitSerializer(page, many=True, context={"q": params["q"]}).data
        return self.get_paginated_response(data)


class RootView(ApiMixin):
    """``GET /api/``: where each endpoint is (``{...}`` marks a part to fill in), and the
    browsable API's login page where the project mounts DRF's (``rest_framework.urls``):
    the admin's login admits staff only."""

    permission_classes = [AllowAny]

    @extend_schema(exclude=True)
    def get(self, request: Request) -> Response:
        root = request.build_absolute_uri(reverse("squad_memory_api:root"))
        paths = {
            "slots": "slots/",
            "sessions": "sessions/",
            "post messages": "slots/messages/",
            "search": "search/?q={words}",
            "session history": "sessions/{session_id}/history/",
            "session": "sessions/{session_id}/",
            "schema": "schema/",
            "docs": "docs/",
            "redoc": "redoc/",
        }
        links = {name: root + path for name, path in paths.items()}
        try:
            login = reverse("rest_framework:login")
        except NoReverseMatch:
            return Response(links)
        next_page = quote(reverse("squad_memory_api:root"), safe="/")
        return Response({**links, "login": request.build_absolute_uri(f"{login}?next={next_page}")})

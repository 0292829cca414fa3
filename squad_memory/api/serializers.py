"""Serializers: every field a client sends is validated here, before anything is stored;
and the shape of every answer (slots, messages, buffers, search hits, errors)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from squad_memory.conf import app_settings
from squad_memory.messages import check_storable
from squad_memory.models import Message, Outcome, Slot, SlotState
from squad_memory.rules import (
    CONTROL_CHARS,
    ROLES,
    id_pattern,
    id_problem,
    parts_problems,
    size_problem,
)
from squad_memory.search import MAX_QUERY_LENGTH, excerpt

#: Nesting depth allowed inside a message's content and citations.
MAX_DEPTH = 32
STAFF_ONLY = "Staff only; defaults to the requesting user's."
#: The OpenAPI schema of an id (the server also applies the live ``MAX_ID_LENGTH``).
ID_SCHEMA = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": id_pattern()}
#: The OpenAPI pattern of search words: no control characters (as :class:`QueryField`).
QUERY_PATTERN = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$"


def check_id(value: str) -> None:
    """An id follows the id rule of :func:`squad_memory.rules.id_problem`."""
    if (problem := id_problem(value)) is not None:
        raise serializers.ValidationError(f"{problem[0].upper()}{problem[1:]}.")


class Prebuilt(serializers.Serializer[Any]):
    """A serializer whose fields are built once per class, not on every request (DRF builds
    them per instance, a ``ModelSerializer``'s from the model): its fields keep no state and
    read no context."""

    @property
    def fields(self) -> Any:
        cls = type(self)
        if "_prebuilt" not in cls.__dict__:
            build = serializers.Serializer.__dict__["fields"].func
            cls._prebuilt = build(cls())  # type: ignore[attr-defined]
        return cls.__dict__["_prebuilt"]


class StrictSerializer(Prebuilt):
    """Refuses fields it does not declare (``timestamp``, ``seq``...) instead of ignoring them."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, dict):
            known = ", ".join(name for name, f in self.fields.items() if not f.read_only)
            unknown = sorted(str(key) for key in data if key not in self.fields)
            if unknown:
                error = f"Unknown field; the accepted fields are {known}."
                raise serializers.ValidationError({key: [error] for key in unknown})
        return dict(super().to_internal_value(data))


@extend_schema_field(ID_SCHEMA)
class IdField(serializers.CharField):
    """A ``user_id``, ``session_id`` or ``agent_id``, kept exactly as sent (no trimming)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        kwargs.setdefault("max_length", 255)  # the column; the live limit is checked below
        super().__init__(**kwargs)
        self.validators.append(check_id)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


@extend_schema_field(
    {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_LENGTH, "pattern": QUERY_PATTERN}
)
class QueryField(serializers.CharField):
    """Search words: PostgreSQL takes web-search syntax ("a phrase", or, -word)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=MAX_QUERY_LENGTH, trim_whitespace=False, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        value = str(super().to_internal_value(data))
        if CONTROL_CHARS.search(value):
            raise serializers.ValidationError("Must not contain control characters.")
        return value


def check_json(value: Any) -> None:
    """Reject nesting deeper than ``MAX_DEPTH``, then what the storage cannot hold
    (:func:`squad_memory.messages.check_storable`)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise serializers.ValidationError(f"Must not be nested deeper than {MAX_DEPTH} levels.")
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
    try:
        check_storable(value, "The value")
    except ValueError as exc:
        raise serializers.ValidationError(str(exc)) from exc


# -- what clients send -----------------------------------------------------------------------
class ContentField(serializers.ListField):
    """A message's content: a non-empty list of non-empty blocks (objects of storable JSON;
    its schema is :class:`squad_memory.api.docs.StorableSchema`'s)."""


class CitationsField(serializers.ListField):
    """A message's citations: a list of storable JSON values, or null."""


class MessageInSerializer(StrictSerializer):
    """One conversation message as a client sends it."""

    role = serializers.ChoiceField(choices=list(ROLES))
    content = ContentField(
        child=serializers.DictField(allow_empty=False),
        min_length=1,
        validators=[check_json],
        help_text='Content blocks, e.g. [{"text": "Hello"}].',
    )
    citations = CitationsField(
        child=serializers.JSONField(allow_null=True),
        required=False,
        allow_null=True,
        validators=[check_json],
    )

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, dict) and (problems := parts_problems(data)):  # before each part
            raise serializers.ValidationError({k: [v] for k, v in problems.items()})
        return super().to_internal_value(data)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        message = {k: attrs.get(k) for k in ("role", "content", "citations")}
        if (problem := size_problem(message)) is not None:
            raise serializers.ValidationError(problem)
        return message


class PostMessagesSerializer(StrictSerializer):
    """``message`` (one, with the role rule) or ``messages`` (a batch, stored as given)."""

    user_id = IdField(required=False, help_text=STAFF_ONLY)
    session_id = IdField()
    agent_id = IdField()
    message = MessageInSerializer(required=False)
    messages = MessageInSerializer(many=True, required=False, allow_empty=False)
    max_history_size = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=1_000_000,
        help_text="As in save_chat_message: keep only the newest messages visible.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("message" in attrs) == ("messages" in attrs):
            raise serializers.ValidationError("Send exactly one of 'message' and 'messages'.")
        return attrs

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        limit = app_settings.max_batch_size
        messages = data.get("messages") if isinstance(data, dict) else None
        if isinstance(messages, list) and len(messages) > limit:  # before validating each
            raise serializers.ValidationError(
                {"messages": [f"A batch holds at most {limit} messages."]}
            )
        return dict(super().to_internal_value(data))


class UserQuerySerializer(Prebuilt):
    user_id = IdField(required=False, help_text=STAFF_ONLY)


class SlotFilterSerializer(UserQuerySerializer):
    """Query parameters of the slot list."""

    session_id = IdField(required=False)
    agent_id = IdField(required=False)


class BufferQuerySerializer(Prebuilt):
    max_history_size = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=1_000_000,
        help_text="As in fetch_chat: return only the newest messages.",
    )


class MessageFilterSerializer(Prebuilt):
    q = QueryField(required=False, help_text="Only the messages matching these words.")


class SearchQuerySerializer(UserQuerySerializer):
    q = QueryField(help_text="The words to find.")


# -- what the API answers --------------------------------------------------------------------
class SlotSerializer(Prebuilt, serializers.ModelSerializer[Slot]):
    """A slot and the state of its summary buffer."""

    message_count = serializers.IntegerField(read_only=True, help_text="Raw messages accepted.")
    buffer_length = serializers.IntegerField(read_only=True, help_text="Length of the buffer.")
    buffer_tokens = serializers.IntegerField(
        read_only=True,
        help_text="Tokens of the buffer (TOKEN_COUNTER, counted at save): summary plus the "
        "messages after it; while inactive, every stored message.",
    )
    summary_tokens = serializers.IntegerField(
        read_only=True, help_text="Tokens of the summary prefix."
    )
    state = serializers.ChoiceField(
        choices=SlotState.values,
        read_only=True,
        help_text="inactive (the raw history), active, pending (a compression is queued or "
        "running), failed (the last one failed), over_limit (compressions lag: fetch_chat "
        "returns the summary plus the newest messages within the hard limit).",
    )

    class Meta:
        model = Slot
        fields = [
            "id",
            "user_id",
            "session_id",
            "agent_id",
            "created_at",
            "updated_at",
            "message_count",
            "buffer_length",
            "buffer_tokens",
            "summary_tokens",
            "state",
            "active",
            "last_role",
            "visible_from_seq",
            "covered_seq",
            "version",
            "pending_since",
            "last_failed",
            "retry_after",
        ]
        read_only_fields = fields


class ContentMessageSerializer(Prebuilt):
    """A ``ConversationMessage`` of a buffer or a merged history."""

    role = serializers.CharField()
    content = serializers.ListField(child=serializers.DictField())
    citations = serializers.ListField(child=serializers.JSONField(), allow_null=True, default=None)


class MessageSerializer(Prebuilt, serializers.ModelSerializer[Message]):
    """A raw message (its ``slot`` loaded); ``trimmed`` when ``max_history_size`` has hidden
    it from the views."""

    trimmed = serializers.BooleanField(source="is_trimmed", read_only=True)
    content = serializers.ListField(child=serializers.DictField())
    citations = serializers.ListField(child=serializers.JSONField(), allow_null=True)

    class Meta:
        model = Message
        fields = ["seq", "role", "content", "citations", "timestamp", "trimmed"]
        read_only_fields = fields


class SearchHitSerializer(serializers.ModelSerializer[Message]):
    """One matching raw message: where it is, and an HTML excerpt with the hits marked."""

    slot = serializers.IntegerField(source="slot_id")
    session_id = serializers.CharField(source="slot.session_id")
    agent_id = serializers.CharField(source="slot.agent_id")
    excerpt = serializers.SerializerMethodField(
        help_text="HTML-escaped text around the first hit; each hit wrapped in `<mark>`."
    )

    class Meta:
        model = Message
        fields = ["slot", "session_id", "agent_id", "seq", "role", "timestamp", "excerpt"]
        read_only_fields = fields
        #: The columns the hits need (a slot row can hold a long summary).
        loads = ("id", "seq", "role", "timestamp", "text", "slot__session_id", "slot__agent_id")

    def get_excerpt(self, message: Message) -> str:
        return excerpt(message.text, self.context["q"])


class SessionAgentSerializer(Prebuilt):
    """One agent's slot of a session."""

    agent_id = serializers.CharField()
    slot = serializers.IntegerField(help_text="The slot's id.")
    url = serializers.CharField(help_text="The slot's address (its buffer and messages are below).")
    message_count = serializers.IntegerField(help_text="Raw messages accepted.")


class LastMessageSerializer(Prebuilt):
    agent_id = serializers.CharField()
    role = serializers.CharField()
    preview = serializers.CharField(
        help_text="The start of the message's text (at most 100 characters)."
    )


class SessionSerializer(Prebuilt):
    """A session of one user: its agents' slots, newest activity first."""

    user_id = serializers.CharField()
    session_id = serializers.CharField()
    last_activity = serializers.DateTimeField(help_text="When a message was last stored.")
    message_count = serializers.IntegerField(help_text="Raw messages of every agent.")
    agents = SessionAgentSerializer(many=True)
    last_message = LastMessageSerializer(
        allow_null=True, help_text="Null when the user may not read the session's messages."
    )
    history = serializers.CharField(help_text="The address of the merged history.")


class BufferSerializer(Prebuilt):
    slot = serializers.IntegerField()
    active = serializers.BooleanField(help_text="False: the buffer is the visible raw history.")
    buffer_length = serializers.IntegerField(help_text="Length of the stored buffer.")
    buffer_tokens = serializers.IntegerField(
        help_text="Tokens of the stored buffer (a hard limit or max_history_size may return "
        "fewer messages)."
    )
    messages = ContentMessageSerializer(many=True)


class HistorySerializer(Prebuilt):
    user_id = serializers.CharField()
    session_id = serializers.CharField()
    messages = ContentMessageSerializer(many=True, help_text="A page of them, oldest first.")
    next = serializers.CharField(
        allow_null=True, help_text="The address of the older messages' page (null: none left)."
    )


class PostResultSerializer(Prebuilt):
    slot = SlotSerializer()
    stored = MessageSerializer(many=True, help_text="The messages stored, with their seq.")
    skipped = serializers.BooleanField(help_text="True: the message repeated the last role.")


class CompressResultSerializer(Prebuilt):
    outcome = serializers.ChoiceField(
        choices=Outcome.values,
        help_text="What the request turned into: applied; stale (the buffer moved on); "
        "skipped (nothing to do); queued (handed to a worker); already_pending (another "
        "compression is queued or running, nothing new was started); deferred (runs when the "
        "surrounding transaction commits).",
    )
    slot = SlotSerializer()


class ErrorSerializer(serializers.Serializer[dict[str, Any]]):
    detail = serializers.CharField()


class ServerErrorSerializer(ErrorSerializer):
    error_id = serializers.RegexField(
        "^[0-9a-f]{12}$",
        required=False,
        help_text="Twelve hex digits naming the failure in the server's log (quote it when "
        "reporting the error); the same form in every answer that has one.",
    )

"""Serializers: every field a client sends is validated here, before anything is stored."""

from __future__ import annotations

import math
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from squad_memory.conf import app_settings
from squad_memory.messages import ROLES
from squad_memory.models import Message, Outcome, Slot, SlotState
from squad_memory.validation import ID_PATTERN, id_problem, json_size

#: Nesting depth allowed inside a message's content and citations.
MAX_DEPTH = 32


def check_id(value: str) -> None:
    """An id follows the id rule of :func:`squad_memory.validation.id_problem`."""
    problem = id_problem(value)
    if problem is not None:
        raise serializers.ValidationError(f"{problem[0].upper()}{problem[1:]}.")


class StrictSerializer(serializers.Serializer[dict[str, Any]]):
    """Refuses fields it does not declare (``timestamp``, ``seq``...) instead of ignoring them."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, dict):
            unknown = sorted(str(key) for key in data if key not in self.fields)
            if unknown:
                raise serializers.ValidationError(
                    {
                        key: ["Unknown field; the accepted fields are " + self._known() + "."]
                        for key in unknown
                    }
                )
        return dict(super().to_internal_value(data))

    def _known(self) -> str:
        return ", ".join(name for name, field in self.fields.items() if not field.read_only)


@extend_schema_field({"type": "string", "minLength": 1, "maxLength": 255, "pattern": ID_PATTERN})
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


def check_json(value: Any) -> None:
    """Reject what JSON or a database cannot hold: NUL, lone surrogates, non-finite numbers,
    deep nesting."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise serializers.ValidationError(f"Must not be nested deeper than {MAX_DEPTH} levels.")
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise serializers.ValidationError(
                "Numbers must be finite (a value such as 1e400 overflows to infinity); "
                "send large numbers as strings."
            )
        elif isinstance(item, dict):
            for key, child in item.items():
                _check_text(str(key))
                stack.append((child, depth + 1))
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)


def _check_text(text: str) -> None:
    if "\x00" in text:
        raise serializers.ValidationError("Strings must not contain NUL characters.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise serializers.ValidationError("Strings must not contain lone surrogates.") from exc


class MessageInSerializer(StrictSerializer):
    """One conversation message as a client sends it."""

    role = serializers.ChoiceField(choices=list(ROLES))
    content = serializers.ListField(
        child=serializers.DictField(allow_empty=False),
        allow_empty=False,
        min_length=1,
        help_text='Content blocks, e.g. [{"text": "Hello"}].',
    )
    citations = serializers.ListField(
        child=serializers.JSONField(), required=False, allow_null=True, allow_empty=True
    )

    def validate_content(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        check_json(value)
        return value

    def validate_citations(self, value: list[Any] | None) -> list[Any] | None:
        check_json(value)
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        size = json_size(attrs)
        limit = app_settings.max_message_bytes
        if size > limit:
            raise serializers.ValidationError(
                f"The message is {size} bytes of compact JSON; the limit is {limit}."
            )
        return {
            "role": attrs["role"],
            "content": attrs["content"],
            "citations": attrs.get("citations"),
        }


class PostMessagesSerializer(StrictSerializer):
    """``message`` (one, with the role rule) or ``messages`` (a batch, stored as given)."""

    user_id = IdField(required=False, help_text="Staff only; defaults to the requesting user's.")
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

    def validate_messages(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        limit = app_settings.max_batch_size
        if len(value) > limit:
            raise serializers.ValidationError(f"A batch holds at most {limit} messages.")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("message" in attrs) == ("messages" in attrs):
            raise serializers.ValidationError("Send exactly one of 'message' and 'messages'.")
        return attrs

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, dict) and isinstance(data.get("messages"), list):
            limit = app_settings.max_batch_size
            if len(data["messages"]) > limit:  # before validating thousands of items
                raise serializers.ValidationError(
                    {"messages": [f"A batch holds at most {limit} messages."]}
                )
        return dict(super().to_internal_value(data))


class SlotFilterSerializer(serializers.Serializer[dict[str, Any]]):
    """Query parameters of the slot list."""

    session_id = IdField(required=False)
    agent_id = IdField(required=False)
    user_id = IdField(required=False, help_text="Staff only; others see their own slots anyway.")


class UserQuerySerializer(serializers.Serializer[dict[str, Any]]):
    user_id = IdField(required=False, help_text="Staff only; defaults to the requesting user's.")


class BufferQuerySerializer(serializers.Serializer[dict[str, Any]]):
    max_history_size = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=1_000_000,
        help_text="As in fetch_chat: return only the newest messages.",
    )


class SlotSerializer(serializers.ModelSerializer[Slot]):
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
        ]
        read_only_fields = fields


class ContentMessageSerializer(serializers.Serializer[dict[str, Any]]):
    """A message of a buffer or a merged history: role, content blocks, citations."""

    role = serializers.CharField()
    content = serializers.ListField(child=serializers.DictField())
    citations = serializers.ListField(child=serializers.JSONField(), allow_null=True)


class MessageSerializer(serializers.ModelSerializer[Message]):
    """A raw message; ``trimmed`` when ``max_history_size`` has hidden it from the views."""

    trimmed = serializers.SerializerMethodField()
    content = serializers.ListField(child=serializers.DictField())
    citations = serializers.ListField(child=serializers.JSONField(), allow_null=True)

    class Meta:
        model = Message
        fields = ["seq", "role", "content", "citations", "timestamp", "trimmed"]
        read_only_fields = fields

    def get_trimmed(self, message: Message) -> bool:
        return bool(self.context["slot"].is_trimmed(message.seq))


class BufferSerializer(serializers.Serializer[dict[str, Any]]):
    slot = serializers.IntegerField()
    active = serializers.BooleanField(help_text="False: the buffer is the visible raw history.")
    buffer_length = serializers.IntegerField(help_text="Length of the stored buffer.")
    buffer_tokens = serializers.IntegerField(
        help_text="Tokens of the stored buffer (a hard limit or max_history_size may return "
        "fewer messages)."
    )
    messages = ContentMessageSerializer(many=True)


class HistorySerializer(serializers.Serializer[dict[str, Any]]):
    user_id = serializers.CharField()
    session_id = serializers.CharField()
    messages = ContentMessageSerializer(many=True)


class PostResultSerializer(serializers.Serializer[dict[str, Any]]):
    slot = SlotSerializer()
    stored = MessageSerializer(many=True, help_text="The messages stored, with their seq.")
    skipped = serializers.BooleanField(help_text="True: the message repeated the last role.")


class CompressResultSerializer(serializers.Serializer[dict[str, Any]]):
    outcome = serializers.ChoiceField(
        choices=Outcome.values,
        help_text="What the request turned into: applied; stale (the buffer moved on); "
        "skipped (nothing to do); queued (handed to a worker); already_pending (another "
        "compression is queued or running, nothing new was started); deferred (runs when the "
        "surrounding transaction commits); not_queued (the broker failed).",
    )
    error = serializers.CharField(required=False)
    slot = SlotSerializer()

"""Search in the API: the query parameters, the hits, and their pagination."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from squad_memory.api.pagination import _IntegerCursorPagination
from squad_memory.api.serializers import IdField
from squad_memory.models import Message
from squad_memory.search import MAX_QUERY_LENGTH, excerpt
from squad_memory.validation import CONTROL_CHARS, ID_PATTERN


@extend_schema_field(
    {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_LENGTH, "pattern": ID_PATTERN}
)
class QueryField(serializers.CharField):
    """Search words: PostgreSQL takes web-search syntax ("a phrase", or, -word)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", MAX_QUERY_LENGTH)
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        value = str(super().to_internal_value(data))
        if CONTROL_CHARS.search(value):
            raise serializers.ValidationError("Must not contain control characters.")
        return value


class SearchQuerySerializer(serializers.Serializer[dict[str, Any]]):
    q = QueryField(help_text="The words to find.")
    user_id = IdField(required=False, help_text="Staff only; defaults to the requesting user's.")


class MessageFilterSerializer(serializers.Serializer[dict[str, Any]]):
    q = QueryField(required=False, help_text="Only the messages matching these words.")


class SearchHitSerializer(serializers.ModelSerializer[Message]):
    """One matching raw message: where it is, and an HTML excerpt with the hits marked."""

    slot = serializers.IntegerField(source="slot_id")
    session_id = serializers.CharField(source="slot.session_id")
    agent_id = serializers.CharField(source="slot.agent_id")
    excerpt = serializers.SerializerMethodField(
        help_text="HTML-escaped text around the first hit; hits wrapped in <mark>."
    )

    class Meta:
        model = Message
        fields = ["slot", "session_id", "agent_id", "seq", "role", "timestamp", "excerpt"]
        read_only_fields = fields
        #: The columns the hits need (a slot row can hold a long summary).
        loads = ("id", "seq", "role", "timestamp", "text", "slot__session_id", "slot__agent_id")

    def get_excerpt(self, message: Message) -> str:
        return excerpt(message.text, self.context["q"])


class SearchCursorPagination(_IntegerCursorPagination):
    """Hits newest first (by id: unique and unchanging, as a cursor needs)."""

    ordering = "-id"

"""Search in the admin: hits in one slot's transcript, and slots found by message text."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString, mark_safe

from squad_memory.models import Message, Slot
from squad_memory.search import MAX_QUERY_LENGTH, excerpt, matching


@dataclass
class Hit:
    """A matching message of the slot: its number (the anchor to jump to) and an excerpt."""

    seq: int
    role: str
    excerpt: SafeString


@dataclass
class TranscriptSearch:
    """The slot page's search box: the words, and the first ``limit`` hits by seq."""

    query: str
    hits: list[Hit]
    more: bool


def transcript_search(request: HttpRequest, slot: Slot, limit: int) -> TranscriptSearch:
    """The hits of ``?q=`` in the slot's raw history, oldest first (one query)."""
    query = request.GET.get("q", "").strip()[:MAX_QUERY_LENGTH]
    if not query or "\x00" in query:
        return TranscriptSearch(query, [], False)
    rows = matching(Message.objects.filter(slot=slot), query).order_by("seq")
    found = list(rows.values_list("seq", "role", "text")[: limit + 1])
    hits = [Hit(seq, role, _safe(excerpt(text, query))) for seq, role, text in found[:limit]]
    return TranscriptSearch(query, hits, len(found) > limit)


def _safe(html: str) -> SafeString:
    return mark_safe(html)  # excerpt() escapes the text; it adds only <mark> tags


class SlotSearchAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """The slot list's search box also finds slots whose messages contain the words."""

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Slot], search_term: str
    ) -> tuple[QuerySet[Slot], bool]:
        by_key, duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip()[:MAX_QUERY_LENGTH]
        if not term or "\x00" in term:
            return by_key, duplicates
        messages = matching(Message.objects.all(), term).values("slot_id")
        return by_key | queryset.filter(pk__in=messages), duplicates

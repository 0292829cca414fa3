"""Read-only admins of the raw history and the compression log (audit records)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.template.defaultfilters import truncatechars
from django.template.loader import render_to_string
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from squad_memory.admin import transcript
from squad_memory.compression import log
from squad_memory.models import Compression, Message


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Viewable with the view permission; never added, changed or deleted in the admin."""

    class Media:
        css = {"all": ["squad_memory/admin.css"]}

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _blocks_html(entries: list[transcript.Entry], **extra: Any) -> SafeString:
    html = render_to_string(
        "admin/squad_memory/includes/entries.html", {"entries": entries, **extra}
    )
    return SafeString(html)  # rendered by a template with autoescaping on


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    """The raw history, one row per accepted message."""

    list_display = ["slot", "seq", "role", "preview", "time", "trimmed"]
    list_select_related = ["slot"]
    list_filter = ["role"]
    search_fields = ["slot__user_id", "slot__session_id", "slot__agent_id"]
    show_full_result_count = False
    fields = ["slot", "seq", "role", "time", "trimmed", "rendered", "content", "citations"]
    readonly_fields = ["slot", "seq", "role", "time", "trimmed", "rendered", "content", "citations"]

    @admin.display(description=_("text"))
    def preview(self, message: Message) -> str:
        texts = [b.text or b.title for b in transcript.to_blocks(message.content)]
        return truncatechars(" ".join(texts), 120)

    @admin.display(description=_("time"), ordering="timestamp")
    def time(self, message: Message) -> Any:
        return transcript.message_time(message.timestamp)

    @admin.display(description=_("trimmed"), boolean=True)
    def trimmed(self, message: Message) -> bool:
        return message.trimmed

    @admin.display(description=_("message"))
    def rendered(self, message: Message) -> SafeString:
        return _blocks_html([transcript.entry(message.slot, message.as_dict())])


@admin.register(Compression)
class CompressionAdmin(ReadOnlyAdmin):
    """The compression log: every compression and every failed attempt."""

    list_display = [
        "slot",
        "started_at",
        "covered_range",
        "summarizer",
        "duration_ms",
        "outcome",
        "trigger",
        "attempt",
    ]
    list_select_related = ["slot"]
    list_filter = ["outcome", "trigger", "started_at"]
    search_fields = ["slot__user_id", "slot__session_id", "slot__agent_id", "summarizer"]
    date_hierarchy = "started_at"
    ordering = ["-started_at", "-id"]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "slot",
                    ("started_at", "finished_at", "duration_ms"),
                    ("covered_range", "outcome"),
                    ("summarizer", "trigger", "attempt"),
                    "error",
                    "before_after",
                ]
            },
        ),
    ]
    readonly_fields = [
        "slot",
        "started_at",
        "finished_at",
        "duration_ms",
        "covered_range",
        "outcome",
        "summarizer",
        "trigger",
        "attempt",
        "error",
        "before_after",
    ]

    def get_queryset(self, request: HttpRequest) -> Any:
        qs = super().get_queryset(request)
        # The list never shows the (possibly large) input and output documents.
        return qs if _is_change_view(request) else qs.defer("input", "output")

    @admin.display(description=_("covered range"))
    def covered_range(self, compression: Compression) -> str:
        return f"{compression.from_seq}..{compression.to_seq}"

    @admin.display(description=_("before / after"))
    def before_after(self, compression: Compression) -> SafeString:
        before, after = log.rebuild([compression])[compression.pk]
        html = render_to_string(
            "admin/squad_memory/includes/before_after.html",
            {"before": transcript.plain_entries(before), "after": transcript.plain_entries(after)},
        )
        return SafeString(html)  # rendered by a template with autoescaping on


def _is_change_view(request: HttpRequest) -> bool:
    match = request.resolver_match
    return match is not None and (match.url_name or "").endswith("_change")

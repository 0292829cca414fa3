"""Read-only admins of the raw history and the compression log (audit records)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import display_for_value, flatten
from django.http import HttpRequest
from django.template.defaultfilters import truncatechars
from django.template.loader import render_to_string
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from squad_memory.admin import transcript
from squad_memory.admin.lists import BoundedListAdmin, FixedValuesFilter
from squad_memory.admin.slots import CSS
from squad_memory.compression import log
from squad_memory.models import Compression, Message, Slot
from squad_memory.rules import ROLES, visible

#: What started a compression, as the storages, the sweep and the workers log it.
TRIGGERS = {
    "save": _("a save"),
    "manual": _("summarize now"),
    "sweep": _("the sweep"),
    "celery": _("a Celery worker"),
    "tasks": _("a tasks worker"),
}


class RoleFilter(FixedValuesFilter):
    """The roles a slot accepts (no query for the list of them)."""

    title = _("role")
    parameter_name = field = "role"
    values = {role: role for role in ROLES}


class TriggerFilter(FixedValuesFilter):
    """What started a compression (no query for the list of them)."""

    title = _("triggered by")
    parameter_name = field = "trigger"
    values = TRIGGERS


class ReadOnlyAdmin(BoundedListAdmin):
    """Viewable with the view permission; never added, changed or deleted in the admin."""

    list_select_related = ["slot"]

    class Media:
        css = CSS

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description=_("slot"), ordering="slot")
    def conversation(self, row: Message | Compression) -> str:
        """The slot's ids, spaced so that a narrow column wraps between them."""
        slot: Slot = row.slot
        ids = [slot.namespace] if slot.namespace else []
        return " / ".join(visible(i) for i in [*ids, slot.user_id, slot.session_id, slot.agent_id])


def _render(template: str, **context: Any) -> SafeString:
    # Rendered by a template with autoescaping on.
    return SafeString(render_to_string(f"admin/squad_memory/includes/{template}", context))


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    """The raw history, one row per accepted message."""

    list_display = ["conversation", "seq", "role", "preview", "time", "trimmed"]
    list_filter = [RoleFilter]
    # The columns an index orders (the slot's (slot, seq) key, the timestamp's own): sorting
    # by another would sort the whole history for one page.
    sortable_by = ["conversation", "time"]
    search_fields = ["slot__user_id", "slot__session_id", "slot__agent_id"]
    fields = ["slot", "seq", "role", "time", "trimmed", "rendered", "content", "citations"]
    readonly_fields = ["slot", "seq", "role", "time", "trimmed", "rendered", "content", "citations"]

    @admin.display(description=_("text"))
    def preview(self, message: Message) -> str:
        texts = [b.text or b.title for b in transcript.to_blocks(message.content)]
        return truncatechars(" ".join(texts), 200)

    @admin.display(description=_("time"), ordering="timestamp")
    def time(self, message: Message) -> str:
        """As the admin shows its own date fields (``DATETIME_FORMAT``, the current zone)."""
        when = transcript.message_time(message.timestamp)
        return display_for_value(when, self.get_empty_value_display())

    @admin.display(description=_("trimmed"))
    def trimmed(self, message: Message) -> str:
        """A mark on trimmed rows only: an untrimmed row is the ordinary case."""
        return display_for_value(True, "", boolean=True) if message.is_trimmed else ""

    @admin.display(description=_("message"))
    def rendered(self, message: Message) -> SafeString:
        return _render("entries.html", entries=[transcript.entry(message.slot, message.as_dict())])


@admin.register(Compression)
class CompressionAdmin(ReadOnlyAdmin):
    """The compression log: every compression and every failed attempt."""

    list_display = [
        "conversation",
        "started_at",
        "covered_range",
        "summarizer_path",
        "duration_ms",
        "outcome_attempt",
        "trigger",
    ]
    list_filter = ["outcome", TriggerFilter, "started_at"]
    search_fields = ["slot__user_id", "slot__session_id", "slot__agent_id", "summarizer"]
    date_hierarchy = "started_at"
    ordering = ["-started_at", "-id"]
    fields = [
        "slot",
        ("started_at", "finished_at", "duration_ms"),
        ("covered_range", "outcome"),
        ("summarizer_path", "trigger", "attempt"),
        "error",
        "before_after",
    ]
    readonly_fields = flatten(fields)

    def get_queryset(self, request: HttpRequest) -> Any:
        qs = super().get_queryset(request)
        match = request.resolver_match
        if match and (match.url_name or "").endswith("_change"):
            return qs
        return qs.defer("input", "output")  # the list never shows these (possibly large) documents

    @admin.display(description=_("covered range"))
    def covered_range(self, compression: Compression) -> str:
        return f"{compression.from_seq}..{compression.to_seq}"

    @admin.display(description=_("summarizer"), ordering="summarizer")
    def summarizer_path(self, compression: Compression) -> SafeString:
        """The dotted path, breakable after its dots only (not letter by letter)."""
        return transcript.dotted(compression.summarizer)

    @admin.display(description=_("outcome"), ordering="outcome")
    def outcome_attempt(self, compression: Compression) -> str:
        outcome = str(compression.get_outcome_display())
        if compression.attempt > 1:
            return str(
                _("%(outcome)s (attempt %(n)d)") % {"outcome": outcome, "n": compression.attempt}
            )
        return outcome

    @admin.display(description=_("before / after"))
    def before_after(self, compression: Compression) -> SafeString:
        before, after = log.rebuild([compression])[compression.pk]
        plain = transcript.plain_entries
        return _render("before_after.html", before=plain(before), after=plain(after))

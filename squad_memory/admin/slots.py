"""The slot admin: the list of conversations and the slot page (raw history beside the buffer)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from squad_memory.admin import transcript
from squad_memory.admin.ids import VisibleIdsAdmin, VisibleValuesFilter
from squad_memory.admin.search import SlotSearchAdmin, transcript_search
from squad_memory.admin.slot_actions import SlotActionsAdmin
from squad_memory.admin.slot_delete import SlotDeleteAdmin
from squad_memory.conf import app_settings
from squad_memory.models import Slot, SlotState
from squad_memory.permissions import COMPRESSION, MESSAGE, can_view

#: The admin's words for each state (the model's own labels).
STATE_LABELS = dict(SlotState.choices)


class StateFilter(admin.SimpleListFilter):
    """Filters slots by their summary state (the same rule as ``Slot.state``)."""

    title = _("summary state")
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return list(STATE_LABELS.items())

    def queryset(self, request: HttpRequest, queryset: QuerySet[Slot]) -> QuerySet[Slot]:
        value = self.value()
        if value not in SlotState.values:
            return queryset
        limits = (
            app_settings.trigger_at,
            app_settings.max_buffer_pairs,
            app_settings.max_buffer_tokens,
        )
        slots: QuerySet[Slot] = queryset.in_state(value, *limits)  # type: ignore[attr-defined]
        return slots


#: The per-slot token budgets (empty: the storage's values).
TOKEN_OVERRIDES = ["trigger_tokens", "max_buffer_tokens"]


class SlotForm(forms.ModelForm):  # type: ignore[type-arg]
    """Only the per-slot overrides are editable; everything else belongs to the storage."""

    class Meta:
        model = Slot
        fields = ["trigger_at", "keep_last", "max_buffer_pairs", *TOKEN_OVERRIDES]

    def clean_trigger_at(self) -> int | None:
        value: int | None = self.cleaned_data.get("trigger_at")
        if value is not None and value < 1:
            raise forms.ValidationError(_("Trigger at must be at least 1 (or empty)."))
        return value

    def clean(self) -> dict[str, Any]:
        """Compare the values that will apply: an empty field means the setting's value."""
        data = super().clean() or {}
        if self.has_error("trigger_at") or self.has_error("keep_last"):
            return data
        trigger_at = _or_default(data.get("trigger_at"), app_settings.trigger_at)
        keep_last = _or_default(data.get("keep_last"), app_settings.keep_last)
        pairs = data.get("max_buffer_pairs")
        if pairs is not None and pairs < trigger_at:
            raise forms.ValidationError(
                _("The hard limit must be at least trigger at (%(trigger)d), or empty.")
                % {"trigger": trigger_at}
            )
        _check_token_overrides(data)
        if keep_last >= trigger_at:
            raise forms.ValidationError(
                _(
                    "Keep last must be smaller than trigger at, or a compression cannot shorten "
                    "the buffer (here %(keep)d and %(trigger)d; an empty field uses the setting)."
                )
                % {"keep": keep_last, "trigger": trigger_at}
            )
        return data


def _or_default(value: int | None, default: int) -> int:
    return default if value is None else value


def _check_token_overrides(data: dict[str, Any]) -> None:
    """The token hard limit, where both apply, is not below the token trigger."""
    trigger = data.get("trigger_tokens") or app_settings.trigger_tokens
    limit = data.get("max_buffer_tokens") or app_settings.max_buffer_tokens
    if trigger is not None and limit is not None and limit < trigger:
        raise forms.ValidationError(
            _("The hard limit in tokens must be at least the token trigger (%(trigger)d).")
            % {"trigger": trigger}
        )


@admin.register(Slot)
class SlotAdmin(VisibleIdsAdmin, SlotSearchAdmin, SlotDeleteAdmin, SlotActionsAdmin):
    """Every conversation, with its raw history and its summary buffer side by side."""

    form = SlotForm
    actions = ["summarize_selected", "reset_selected", "export_selected"]
    change_form_template = "admin/squad_memory/slot/change_form.html"
    list_display = [
        "visible_user_id",
        "visible_session_id",
        "visible_agent_id",
        "message_count",
        "buffer_length",
        "buffer_tokens",
        "state_label",
        "updated_at",
    ]
    list_filter = [("agent_id", VisibleValuesFilter), StateFilter, "updated_at"]
    search_fields = ["user_id", "session_id", "agent_id"]
    date_hierarchy = "updated_at"
    ordering = ["-updated_at", "-id"]
    list_per_page = 50
    readonly_fields = [
        "namespace",
        "visible_user_id",
        "visible_session_id",
        "visible_agent_id",
        "state_label",
        "message_count",
        "buffer_length",
        "buffer_tokens",
        "summary_tokens",
        "visible_from_seq",
        "covered_seq",
        "version",
        "pending_since",
        "created_at",
        "updated_at",
    ]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "namespace",
                    ("visible_user_id", "visible_session_id", "visible_agent_id"),
                ]
            },
        ),
        (
            _("Buffer"),
            {
                "fields": [
                    ("state_label", "message_count", "buffer_length", "buffer_tokens"),
                    ("summary_tokens",),
                    ("covered_seq", "visible_from_seq", "version"),
                    ("pending_since", "created_at", "updated_at"),
                ]
            },
        ),
        (
            _("Per-slot settings"),
            {
                "classes": ["collapse"],
                "fields": [("trigger_at", "keep_last", "max_buffer_pairs"), tuple(TOKEN_OVERRIDES)],
            },
        ),
    ]

    #: Raw messages per page of the transcript.
    transcript_page_size = 100
    #: Newest buffer messages shown beside it (older ones are in the raw history).
    buffer_display_limit = 200
    #: Newest compressions shown on the slot page (the full log has its own admin).
    compression_log_limit = 10
    #: Hits listed by the slot page's search box.
    search_hit_limit = 50

    # -- list ----------------------------------------------------------------------------
    def get_list_display(self, request: HttpRequest) -> list[str | Callable[[Any], str | bool]]:
        columns = list(super().get_list_display(request))
        if Slot.objects.exclude(namespace="").exists():
            columns.insert(0, "namespace")
        return columns

    @admin.display(description=_("raw messages"), ordering="last_seq")
    def message_count(self, slot: Slot) -> int:
        return slot.message_count

    @admin.display(description=_("buffer length"))
    def buffer_length(self, slot: Slot) -> int:
        return slot.buffer_length

    @admin.display(description=_("buffer tokens"), ordering="buffer_tokens")
    def buffer_tokens(self, slot: Slot) -> int:
        return slot.buffer_tokens

    @admin.display(description=_("summary state"))
    def state_label(self, slot: Slot) -> str:
        return str(STATE_LABELS[slot.state])

    # -- permissions: slots are created by the storage (deleting one is forgetting it)
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Slot, form: Any, change: bool) -> None:
        # Never write back counters read at request time: a save may have moved them since.
        obj.save(update_fields=["trigger_at", "keep_last", "max_buffer_pairs", *TOKEN_OVERRIDES])

    # -- slot page -------------------------------------------------------------------------
    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Slot | None = None,
    ) -> HttpResponse:
        if obj is not None:
            context.update(self.slot_page_context(request, obj))
        return super().render_change_form(request, context, add, change, form_url, obj)

    def slot_page_context(self, request: HttpRequest, slot: Slot) -> dict[str, Any]:
        """The transcript, the buffer and the compression log (an overridable hook).

        The raw history and the buffer need ``view_message``, the compression log
        ``view_compression``, as on their own admin pages.
        """
        context: dict[str, Any] = {
            "slot": slot,
            "state_label": STATE_LABELS[slot.state],
            "show_messages": can_view(request.user, MESSAGE),
            "show_compressions": can_view(request.user, COMPRESSION),
            "slot_actions": self.slot_action_links(request, slot),
        }
        if context["show_messages"]:
            context["page"] = self._raw_page(request, slot)
            context["buffer"] = transcript.buffer_view(slot, self.buffer_display_limit)
            context["search"] = transcript_search(request, slot, self.search_hit_limit)
        if context["show_compressions"]:
            log, more = transcript.compression_log(slot, self.compression_log_limit)
            context.update(compressions=log, more_compressions=more)
            context["compression_log_url"] = self._compression_log_url(slot)
        return context

    def _raw_page(self, request: HttpRequest, slot: Slot) -> transcript.Page:
        size = self.transcript_page_size
        number = _int(request.GET.get("page"), 0)
        seq = _int(request.GET.get("seq"), 0)
        if seq:
            number = transcript.page_of(seq, size)
        return transcript.raw_page(slot, number or transcript.page_count(slot, size), size)

    def _compression_log_url(self, slot: Slot) -> str:
        url = reverse(f"{self.admin_site.name}:squad_memory_compression_changelist")
        return f"{url}?slot__id__exact={slot.pk}"


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default

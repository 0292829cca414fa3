"""The slot admin: the list of conversations and the slot page (raw history beside the
buffer). Ids show invisible and control characters as ``<U+202E>``; deleting a slot is
forgetting it (batched, and logged with the operator).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import display_for_value, flatten_fieldsets
from django.contrib.admin.views.main import SEARCH_VAR
from django.db.models import Exists, Max, OuterRef, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import SimpleTemplateResponse
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from squad_memory.admin import transcript
from squad_memory.admin.actions import SlotActionsAdmin
from squad_memory.admin.lists import BoundedListAdmin, FirstValuesFilter
from squad_memory.compression.policy import limits_problems
from squad_memory.exceptions import SearchTimeout
from squad_memory.models import Compression, Limits, Message, Slot, SlotState
from squad_memory.operations import forgetting
from squad_memory.permissions import COMPRESSION, MESSAGE, can_view
from squad_memory.rules import visible
from squad_memory.search import MAX_QUERY_LENGTH, indexed, is_rare, matching, searching

#: The admin's words for each state (the model's own labels).
STATE_LABELS = dict(SlotState.choices)
#: The per-slot token budgets (empty: the storage's values).
TOKEN_OVERRIDES = ["trigger_tokens", "max_buffer_tokens"]
#: The slot's ids, as shown (:func:`visible`).
KEY_COLUMNS = ("visible_user_id", "visible_session_id", "visible_agent_id")
CSS = {"all": ["squad_memory/admin.css"]}


class StateFilter(admin.SimpleListFilter):
    """Filters slots by their summary state (the same rule as ``Slot.state``)."""

    title = _("summary state")
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return list(STATE_LABELS.items())

    def queryset(self, request: HttpRequest, queryset: QuerySet[Slot]) -> QuerySet[Slot]:
        if self.value() not in SlotState.values:
            return queryset
        return queryset.in_state(self.value(), Limits.from_settings())  # type: ignore[attr-defined,no-any-return]


class VisibleValuesFilter(FirstValuesFilter):
    """``list_filter`` by a field's values (the first ones, read through its index), each
    value shown with :func:`visible`."""

    def choices(self, changelist: Any) -> Iterator[Any]:
        for choice in super().choices(changelist):
            display = choice.get("display")
            if isinstance(display, str):
                choice["display"] = visible(display)
            yield choice


class SlotForm(forms.ModelForm):  # type: ignore[type-arg]
    """Only the per-slot overrides are editable; everything else belongs to the storage."""

    class Meta:
        model = Slot
        fields = ["trigger_at", "keep_last", "max_buffer_pairs", *TOKEN_OVERRIDES]

    def clean(self) -> dict[str, Any]:
        """Check the sizes that will apply (an empty field means the setting's value) by the
        rule the system checks and the storages use."""
        data = super().clean() or {}
        if self.errors:
            return data
        defaults = Limits.from_settings()
        applied = {
            name: getattr(defaults, name) if data.get(name) is None else data[name]
            for name in SlotForm.Meta.fields
        }
        for _name, problem in limits_problems(Limits(**applied)):
            raise forms.ValidationError(f"{problem} An empty field uses the setting.")
        return data


@admin.register(Slot)
class SlotAdmin(BoundedListAdmin, SlotActionsAdmin):
    """Every conversation, with its raw history and its summary buffer side by side."""

    form = SlotForm
    actions = ["summarize_selected", "reset_selected", "export_selected"]
    change_form_template = "admin/squad_memory/slot/change_form.html"
    list_display = [
        *KEY_COLUMNS,
        "message_count",
        "buffer_length",
        "buffer_tokens",
        "state_label",
        "last_activity",
    ]
    list_filter = [("agent_id", VisibleValuesFilter), StateFilter, "updated_at"]
    search_fields = ["user_id", "session_id", "agent_id"]
    date_hierarchy = "updated_at"
    ordering = ["-updated_at", "-id"]
    list_per_page = 50
    #: No count of every slot beside a filtered or searched list's: it reads the whole table.
    show_full_result_count = False
    fieldsets = [
        (None, {"fields": ["namespace", KEY_COLUMNS]}),
        (
            _("Buffer"),
            {
                "fields": [
                    ("state_label", "message_count", "buffer_length", "buffer_tokens"),
                    ("summary_tokens",),
                    ("covered_seq", "visible_from_seq", "version"),
                    ("pending_since", "retry_after", "created_at", "updated_at"),
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
    readonly_fields = [f for f in flatten_fieldsets(fieldsets) if f not in SlotForm.Meta.fields]

    #: Raw messages per page of the transcript.
    transcript_page_size = 100
    #: Newest buffer messages shown beside it (older ones are in the raw history).
    buffer_display_limit = 200
    #: Newest compressions shown on the slot page (the full log has its own admin).
    compression_log_limit = 10
    #: Hits listed by the slot page's search box.
    search_hit_limit = 50
    #: Most slots a search of the list by message text finds (those with the newest matches
    #: or the latest activity first; more, and the list says so). A common word's costs a
    #: few messages read per slot found.
    text_search_slot_limit = 500

    class Media:
        css = CSS

    # -- list ----------------------------------------------------------------------------
    def get_list_display(self, request: HttpRequest) -> Any:
        columns = list(super().get_list_display(request))
        if _has_namespaces(request):
            columns.insert(0, "namespace")
        return columns

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """A list searched by message text is read and rendered as the API's searches run
        (:func:`squad_memory.search.searching`). The slots whose messages match are found
        first, once (:meth:`find_text_matches`); the list's count and page then read the
        slots by those ids. A page past ``SEARCH_TIMEOUT`` (its search, or any other of its
        queries) is stopped; the list then shows the slots found by id, and says so. An
        action posted from such a list: see :meth:`_posted_from_search`."""
        term = request.GET.get(SEARCH_VAR, "")
        if not self._searches_text(request, term):
            return super().changelist_view(request, extra_context)
        db = self.get_queryset(request).db
        if request.method not in ("GET", "HEAD"):
            return self._posted_from_search(request, db, term, extra_context)
        try:
            with searching(db):
                self.find_text_matches(request, db, term)
                response = super().changelist_view(request, extra_context)
                if isinstance(response, SimpleTemplateResponse):
                    response.render()  # its queries, inside the search's transaction
                return response
        except SearchTimeout as exc:
            request.squad_memory_text_search_stopped = True  # type: ignore[attr-defined]
            message = f"{exc} The list shows the slots whose ids match."
            self.message_user(request, message, messages.WARNING)
            return super().changelist_view(request, extra_context)

    def _posted_from_search(
        self, request: HttpRequest, db: str, term: str, extra_context: dict[str, Any] | None
    ) -> HttpResponse:
        """An action posted from a list searched by message text: the slots whose messages
        match are found first, as a search (their ids), then the action runs as Django runs
        it, outside the search's transaction (its writes and an inline compression must not
        be cut short). A search that is stopped does nothing, and says so."""
        try:
            with searching(db):
                self.find_text_matches(request, db, term)
        except SearchTimeout as exc:
            self.message_user(request, f"{exc} Nothing was done.", messages.WARNING)
            return HttpResponseRedirect(request.get_full_path())
        return super().changelist_view(request, extra_context)

    def find_text_matches(self, request: HttpRequest, db: str, term: str) -> list[int]:
        """The ids of the slots whose messages match a list's search (at most
        :attr:`text_search_slot_limit`, :func:`_text_matches`), kept on the request for
        :meth:`get_search_results`; more, and the list says so."""
        limit = self.text_search_slot_limit
        ids = _text_matches(db, term, limit + 1)
        if len(ids) > limit:
            ids = ids[:limit]
            self.message_user(
                request,
                f"More than {limit} slots have messages matching the search; the list shows "
                f"{limit} of them (the newest found). Search for rarer words to narrow it.",
                messages.WARNING,
            )
        request.squad_memory_text_matches = ids  # type: ignore[attr-defined]
        return ids

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        """A searched list has no date hierarchy: the search narrows it, and the hierarchy's
        links would read the dates of every slot found (two more queries)."""
        changelist = super().get_changelist_instance(request)
        if changelist.query:
            changelist.date_hierarchy = None
        return changelist

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Slot], search_term: str
    ) -> tuple[QuerySet[Slot], bool]:
        """By ids, and, for those who may read messages, by the text of their messages."""
        by_key, duplicates = super().get_search_results(request, queryset, search_term)
        if not self._searches_text(request, search_term):
            return by_key, duplicates
        found: Any = getattr(request, "squad_memory_text_matches", None)
        if found is None:  # another view's search (autocomplete)
            found = _text_matches(queryset.db, search_term, self.text_search_slot_limit)
        return by_key | queryset.filter(pk__in=found), duplicates

    def _searches_text(self, request: HttpRequest, search_term: str) -> bool:
        """Whether a search looks in message text: words, for a user who may read messages,
        unless that search was stopped."""
        term = search_term.strip()
        if (
            not term
            or "\x00" in term
            or getattr(request, "squad_memory_text_search_stopped", False)
        ):
            return False
        return can_view(request.user, MESSAGE)

    @admin.display(description=_("user id"), ordering="user_id")
    def visible_user_id(self, slot: Slot) -> str:
        return visible(slot.user_id)

    @admin.display(description=_("session id"), ordering="session_id")
    def visible_session_id(self, slot: Slot) -> str:
        return visible(slot.session_id)

    @admin.display(description=_("agent id"), ordering="agent_id")
    def visible_agent_id(self, slot: Slot) -> str:
        return visible(slot.agent_id)

    @admin.display(description=_("raw messages"), ordering="last_seq")
    def message_count(self, slot: Slot) -> int:
        return slot.message_count

    @admin.display(description=_("summary state"))
    def state_label(self, slot: Slot) -> str:
        return str(STATE_LABELS[slot.state])

    @admin.display(description=_("last activity"), ordering="updated_at")
    def last_activity(self, slot: Slot) -> str:
        return display_for_value(slot.updated_at, self.get_empty_value_display())

    # -- writes: slots are created by the storage; deleting one is forgetting it ---------
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Slot, form: Any, change: bool) -> None:
        # Never write back counters read at request time: a save may have moved them since.
        obj.save(update_fields=["trigger_at", "keep_last", "max_buffer_pairs", *TOKEN_OVERRIDES])

    def delete_model(self, request: HttpRequest, obj: Slot) -> None:
        forgetting.forget_slot(obj, actor=f"admin user pk={request.user.pk}")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Slot]) -> None:
        for slot in queryset.order_by("pk"):
            self.delete_model(request, slot)

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[Any, int], set[Any], list[Any]]:
        """Counts per kind, not one line per message (a history can be long), and no
        permission on messages needed: they are deleted as part of their slot."""
        slots = list(objs)
        counts = {Slot._meta.verbose_name_plural: len(slots)}
        for model in (Message, Compression):
            rows = model.objects.filter(slot_id__in=[slot.pk for slot in slots])
            counts[model._meta.verbose_name_plural] = rows.count()
        return [str(slot) for slot in slots], counts, set(), []

    # -- slot page -------------------------------------------------------------------------
    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any
    ) -> HttpResponse:
        if kwargs.get("obj") is not None:
            context.update(self.slot_page_context(request, kwargs["obj"]))
        return super().render_change_form(request, context, *args, **kwargs)

    def slot_page_context(self, request: HttpRequest, slot: Slot) -> dict[str, Any]:
        """The transcript and the buffer (with ``view_message``) and the compression log
        (with ``view_compression``) of the slot page: an overridable hook."""
        context: dict[str, Any] = {
            "slot": slot,
            "state_label": STATE_LABELS[slot.state],
            "show_messages": can_view(request.user, MESSAGE),
            "show_compressions": can_view(request.user, COMPRESSION),
            "slot_actions": self.slot_action_links(request, slot),
        }
        if context["show_messages"]:
            until = transcript.summarized_before(slot)
            context["kept_from"] = until if slot.active and until <= slot.covered_seq else None
            context["page"] = self._raw_page(request, slot, until)
            context["buffer"] = transcript.buffer_view(slot, self.buffer_display_limit)
            context["search"] = transcript.search(request, slot, self.search_hit_limit)
        if context["show_compressions"]:
            log, more = transcript.compression_log(slot, self.compression_log_limit)
            url = reverse(f"{self.admin_site.name}:squad_memory_compression_changelist")
            context.update(compressions=log, more_compressions=more)
            context["compression_log_url"] = f"{url}?slot__id__exact={slot.pk}"
        return context

    def _raw_page(self, request: HttpRequest, slot: Slot, until: int) -> transcript.Page:
        size = self.transcript_page_size
        number, seq = _int(request.GET.get("page")), _int(request.GET.get("seq"))
        if seq:
            number = max((seq - 1) // size + 1, 1)
        return transcript.raw_page(slot, number or transcript.page_count(slot, size), size, until)


def _text_matches(db: str, search_term: str, limit: int) -> list[int]:
    """The ids of at most ``limit`` slots whose messages' text matches a list's search, read
    by one statement. A rare word's (:func:`~squad_memory.search.is_rare`): the slots of its
    matches in the full-text index, the newest match first. A common word's: the slots
    active last that hold a match (each found at its first match, a few messages in)."""
    query = search_term.strip()[:MAX_QUERY_LENGTH]
    messages = Message.objects.using(db).order_by()
    if is_rare(messages, query):
        by_match = indexed(messages, query).values("slot_id").annotate(newest=Max("pk"))
        return [row["slot_id"] for row in by_match.order_by("-newest")[:limit]]
    holding = Exists(matching(messages.filter(slot=OuterRef("pk")), query))
    slots = Slot.objects.using(db).filter(holding).order_by("-updated_at", "-pk")
    return list(slots.values_list("pk", flat=True)[:limit])


def _has_namespaces(request: HttpRequest) -> bool:
    """Whether any slot has a namespace, asked once a request (Django asks for the columns
    more than once). "> ''" rather than "<> ''": a probe of the key's index, which leads
    with the namespace, not a scan of the table on every page where no slot has one."""
    found: bool | None = getattr(request, "squad_memory_namespaces", None)
    if found is None:
        found = Slot.objects.filter(namespace__gt="").exists()
        request.squad_memory_namespaces = found  # type: ignore[attr-defined]
    return found


def _int(value: str | None) -> int:
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0

"""Operator actions on slots (summarize now, reset the buffer, export), on its page or on a
selection. Each needs the change permission (export also the view permissions of what it
holds) and runs only on a confirmed POST, through the same library code as every path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponseBase,
    HttpResponseRedirect,
    StreamingHttpResponse,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from squad_memory import compression
from squad_memory.conf import app_settings
from squad_memory.exceptions import SquadMemoryError
from squad_memory.messages import MessageDict
from squad_memory.models import DJANGO_NAMESPACE, Outcome, Slot
from squad_memory.operations import transfer
from squad_memory.permissions import COMPRESSION, MESSAGE, can_view
from squad_memory.rules import validate_key
from squad_memory.storage import get_storage
from squad_memory.summarizers import is_summary

#: What an action view answers: a page or a download, or None (back to the list).
Answer = HttpResponseBase | None
#: Per-slot messages shown after a bulk action; the rest are counted.
MAX_REPORTED = 10


def where_it_runs(mode: str) -> str:
    """Where a compression asked for here runs, in the words of ``MODE``."""
    return {
        "inline": _("Inline mode: it runs now, in this request (a summarizer call per slot)."),
        "tasks": _("Tasks mode: it is queued for a db_worker of Django's Tasks framework."),
        "celery": _("Celery mode: it is queued for a Celery worker."),
    }.get(mode) or _("Mode %(mode)s: it is handed to that dispatcher.") % {"mode": mode}


#: Slots listed on a confirmation page; the rest are counted.
MAX_LISTED = 100


@dataclass
class Result:
    """What an action did to one slot, worded for an operator."""

    slot: Slot
    ok: bool
    message: str


#: What an operator reads for each outcome that applied nothing.
WORDS = {
    Outcome.QUEUED: gettext_lazy("the compression was queued for a worker"),
    Outcome.ALREADY_PENDING: gettext_lazy("a compression is queued or already running"),
    Outcome.DEFERRED: gettext_lazy("the compression runs when the transaction commits"),
    Outcome.NOT_QUEUED: gettext_lazy("the compression could not be queued; try again later"),
    Outcome.STALE: gettext_lazy("the buffer moved on meanwhile; nothing applied"),
    Outcome.SKIPPED: gettext_lazy("nothing to compress"),
    Outcome.FAILED: gettext_lazy("the summarizer failed"),
}
#: Outcomes that count as success: the work is under way.
STARTED = {Outcome.QUEUED, Outcome.ALREADY_PENDING, Outcome.DEFERRED}


def summarize(slot: Slot) -> Result:
    """Compress the slot's buffer now (enqueued in Celery mode), whatever its length."""
    if slot.namespace != DJANGO_NAMESPACE and not slot.active:
        message = _(
            "%(slot)s: its history is kept by the wrapped store %(ns)s, so its buffer can only "
            "be started by the application (a fetch through the storage)."
        )
        return Result(slot, False, message % {"slot": slot, "ns": slot.namespace})
    try:
        validate_key(*slot.key)  # today's limits on ids
        result = get_storage().memory.compress_slot(slot)
    except SquadMemoryError as exc:  # ON_ERROR="raise", or a key refused by today's limits
        message = _("%(slot)s: not summarized: %(error)s")
        return Result(slot, False, message % {"slot": slot, "error": exc})
    if result.applied:
        message = _("%(slot)s: summarized; the buffer now starts with %(head)s.")
        return Result(slot, True, message % {"slot": slot, "head": _head(result.output or [])})
    why = result.error or result.detail
    words = f"{slot}: {WORDS[result.outcome]}" + (f" ({why})" if why else "") + "."
    return Result(slot, result.outcome in STARTED, words)


def _head(output: list[Any]) -> str:
    """'one summary plus 5 recent messages' for a summarizer's output."""
    summaries = sum(1 for message in output if is_summary(message))
    recent = len(output) - summaries
    if summaries == 1:
        head = _("one summary")
    else:
        head = ngettext("%(n)d summary message", "%(n)d summary messages", summaries)
        head %= {"n": summaries}
    if not recent:
        return head
    tail = ngettext(" plus %(n)d recent message", " plus %(n)d recent messages", recent)
    return head + tail % {"n": recent}


def reset(slot: Slot) -> Result:
    """Deactivate the slot's buffer; the raw history is untouched."""
    if not compression.reset(slot.pk):
        return Result(slot, False, _("%(slot)s no longer exists.") % {"slot": slot})
    message = _("%(slot)s: buffer reset; the raw history is untouched.")
    return Result(slot, True, message % {"slot": slot})


def current_buffer(slot: Slot) -> list[MessageDict] | None:
    """What ``fetch_chat`` returns now, as stored dicts; None when a foreign store holds it."""
    if not slot.active and slot.namespace != DJANGO_NAMESPACE:
        return None
    memory = get_storage().memory
    _slot, rows = Slot.objects.read(slot.key, namespace=slot.namespace)
    if not slot.active or memory.policy is None:
        return rows  # type: ignore[return-value]
    return slot.buffer(rows, memory.policy.limits)  # type: ignore[return-value]


def export(slots: Iterable[Slot]) -> Iterator[str]:
    """The slots' histories, each after its state line (buffer and log), as JSON lines."""
    return transfer.export_lines(slots, state=True, buffer=current_buffer)


#: The slot actions: what each does to a slot (None: a download). Their labels are the
#: bulk actions' descriptions; their confirmation questions are in the template.
SLOT_ACTIONS: dict[str, Callable[[Slot], Result] | None] = {
    "summarize": summarize,
    "reset": reset,
    "export": None,
}


class SlotActionsAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """A ``ModelAdmin`` of :class:`Slot` with the slot actions (views, URLs, bulk actions)."""

    action_confirmation_template = "admin/squad_memory/slot/confirm_action.html"

    def _url_name(self, name: str) -> str:
        return f"{self.opts.app_label}_{self.opts.model_name}_{name}"

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.slot_action_view)
        urls = [
            path(f"<path:object_id>/{name}/", view, {"action": name}, name=self._url_name(name))
            for name in SLOT_ACTIONS
        ]
        return urls + super().get_urls()

    def label(self, name: str) -> Any:
        return getattr(self, f"{name}_selected").short_description

    def slot_action_links(self, request: HttpRequest, slot: Slot) -> list[tuple[Any, str]]:
        if not self.has_change_permission(request, slot):
            return []
        site = self.admin_site.name
        return [
            (self.label(name), reverse(f"{site}:{self._url_name(name)}", args=[slot.pk]))
            for name in SLOT_ACTIONS
            if name != "export" or self.has_export_permission(request)
        ]

    def has_export_permission(self, request: HttpRequest, obj: Slot | None = None) -> bool:
        """An export holds the raw history and the compression log: it needs their view
        permissions besides ``change_slot``."""
        readable = can_view(request.user, MESSAGE) and can_view(request.user, COMPRESSION)
        return readable and self.has_change_permission(request, obj)

    def slot_action_view(
        self, request: HttpRequest, object_id: str, action: str
    ) -> HttpResponseBase:
        """GET: the confirmation page; POST: run ``action`` on the slot."""
        slot = self.get_object(request, unquote(object_id))
        if slot is None:
            raise Http404(f"No slot with id {object_id!r}.")
        allowed = self.has_change_permission(request, slot)
        if not allowed or (action == "export" and not self.has_export_permission(request, slot)):
            raise PermissionDenied
        if request.method == "POST":
            response = self.run_slot_action(request, action, [slot])
            change = reverse(f"{self.admin_site.name}:{self._url_name('change')}", args=[slot.pk])
            return response or HttpResponseRedirect(change)
        this = Slot.objects.filter(pk=slot.pk)
        return self.confirm_slot_action(request, action, this, bulk=False)

    def run_slot_action(self, request: HttpRequest, name: str, slots: list[Slot]) -> Answer:
        """Run an action on slots; a download for export, else None after reporting each."""
        run = SLOT_ACTIONS[name]
        if run is None:
            filename = f"slot-{slots[0].pk}" if len(slots) == 1 else f"slots-{len(slots)}"
            response = StreamingHttpResponse(export(slots), content_type="application/x-ndjson")
            response["Content-Disposition"] = f'attachment; filename="{filename}.jsonl"'
            return response
        for index, slot in enumerate(slots):
            result = run(slot)
            if index < MAX_REPORTED or not result.ok:
                level = messages.SUCCESS if result.ok else messages.ERROR
                self.message_user(request, result.message, level)
            self.log_change(request, slot, str(self.label(name)))
        if len(slots) > MAX_REPORTED:
            more = len(slots) - MAX_REPORTED
            self.message_user(request, _("%(n)d more slots done.") % {"n": more})
        return None

    def confirm_slot_action(
        self, request: HttpRequest, name: str, slots: QuerySet[Slot], *, bulk: bool
    ) -> TemplateResponse:
        """The confirmation page; a bulk one posts back to the list with its filters. "Select
        all" is carried as ``select_across`` (the list's query string re-selects the slots),
        never as one field per slot, which could exceed ``DATA_UPLOAD_MAX_NUMBER_FIELDS``."""
        shown = list(slots[:MAX_LISTED])
        field = forms.BooleanField(required=False)
        across = bulk and bool(field.clean(request.POST.get("select_across")))
        context = {
            **self.admin_site.each_context(request),
            "title": _("Are you sure?"),
            "subtitle": self.label(name),
            "action": name,
            "slots": shown,
            "more_slots": max(slots.count() - len(shown), 0),
            "ids": _selected_ids(slots, shown, across) if bulk else [],
            "select_across": across,
            "form_url": request.get_full_path(),
            "bulk": bulk,
            "where_it_runs": where_it_runs(app_settings.mode),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "opts": self.opts,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.action_confirmation_template, context)

    def _bulk(self, request: HttpRequest, name: str, queryset: QuerySet[Slot]) -> Answer:
        if request.POST.get("post") == "yes":
            return self.run_slot_action(request, name, list(queryset))
        return self.confirm_slot_action(request, name, queryset, bulk=True)

    @admin.action(description=gettext_lazy("Summarize now"), permissions=["change"])
    def summarize_selected(self, request: HttpRequest, queryset: QuerySet[Slot]) -> Answer:
        return self._bulk(request, "summarize", queryset)

    @admin.action(description=gettext_lazy("Reset buffer"), permissions=["change"])
    def reset_selected(self, request: HttpRequest, queryset: QuerySet[Slot]) -> Answer:
        return self._bulk(request, "reset", queryset)

    @admin.action(description=gettext_lazy("Export as JSON Lines"), permissions=["export"])
    def export_selected(self, request: HttpRequest, queryset: QuerySet[Slot]) -> Answer:
        return self._bulk(request, "export", queryset)


def _selected_ids(slots: QuerySet[Slot], shown: list[Slot], across: bool) -> list[Any]:
    """The ids the confirmation posts back: all selected ones, or with select_across just one
    (the admin needs a non-empty selection to run an action; the query string decides)."""
    return [s.pk for s in shown[:1]] if across else list(slots.values_list("pk", flat=True))

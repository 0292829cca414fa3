"""Slot actions in the admin: on one slot (its page) or on a selection (the list).

Each action needs the change permission, runs only on POST (CSRF-protected by
``admin_site.admin_view``) and first shows a confirmation page. The work itself
is done by :mod:`squad_memory.actions`.
"""

from __future__ import annotations

from collections.abc import Callable
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
from django.utils.translation import gettext_lazy as _

from squad_memory.actions import Result, export, reset, summarize
from squad_memory.models import Slot
from squad_memory.permissions import COMPRESSION, MESSAGE, can_view


@dataclass(frozen=True)
class SlotAction:
    """An operator action: its label, its confirmation question, and what it does to a slot."""

    name: str
    label: Any
    question: Any
    run: Callable[[Slot], Result] | None = None


SLOT_ACTIONS = {
    a.name: a
    for a in (
        SlotAction(
            "summarize",
            _("Summarize now"),
            _(
                "Compress the buffer of these slots now, whatever its length? In Celery mode the "
                "compression is queued for a worker."
            ),
            summarize,
        ),
        SlotAction(
            "reset",
            _("Reset buffer"),
            _(
                "Reset the buffer of these slots? The summary is dropped and the buffer "
                "deactivated; the raw history is untouched."
            ),
            reset,
        ),
        SlotAction(
            "export",
            _("Export as JSON"),
            _("Download these slots as JSON: raw history, buffer and compression log?"),
        ),
    )
}

#: Per-slot messages shown after a bulk action; the rest are counted.
MAX_REPORTED = 10
#: Slots listed on a confirmation page; the rest are counted.
MAX_LISTED = 100


class SlotActionsAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """A ``ModelAdmin`` of :class:`Slot` with the slot actions (views, URLs, bulk actions)."""

    action_confirmation_template = "admin/squad_memory/slot/confirm_action.html"

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        site = self.admin_site
        urls = [
            path(
                f"<path:object_id>/{name}/",
                site.admin_view(self.slot_action_view),
                {"action": name},
                name="{}_{}_{}".format(*info, name),
            )
            for name in SLOT_ACTIONS
        ]
        return urls + super().get_urls()

    def slot_action_links(self, request: HttpRequest, slot: Slot) -> list[tuple[Any, str]]:
        if not self.has_change_permission(request, slot):
            return []
        info = self.opts.app_label, self.opts.model_name
        site = self.admin_site.name
        return [
            (a.label, reverse("{}:{}_{}_{}".format(site, *info, a.name), args=[slot.pk]))
            for a in SLOT_ACTIONS.values()
            if a.name != "export" or self.has_export_permission(request)
        ]

    def has_export_permission(self, request: HttpRequest, obj: Slot | None = None) -> bool:
        """An export holds the raw history and the compression log: it needs their view
        permissions besides ``change_slot``."""
        user = request.user
        return (
            self.has_change_permission(request, obj)
            and can_view(user, MESSAGE)
            and can_view(user, COMPRESSION)
        )

    def slot_action_view(
        self, request: HttpRequest, object_id: str, action: str
    ) -> HttpResponseBase:
        """GET: the confirmation page; POST: run ``action`` on the slot."""
        slot = self.get_object(request, unquote(object_id))
        if slot is None:
            raise Http404(f"No slot with id {object_id!r}.")
        if not self.has_change_permission(request, slot):
            raise PermissionDenied
        if action == "export" and not self.has_export_permission(request, slot):
            raise PermissionDenied
        if request.method == "POST":
            response = self.run_slot_action(request, action, [slot])
            change = f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_change"
            return response or HttpResponseRedirect(reverse(change, args=[slot.pk]))
        return self.confirm_slot_action(request, action, [slot], bulk=False)

    def run_slot_action(
        self, request: HttpRequest, name: str, slots: list[Slot]
    ) -> HttpResponseBase | None:
        """Run an action on slots; a download for export, else None after reporting each."""
        action = SLOT_ACTIONS[name]
        if action.run is None:
            filename = f"slot-{slots[0].pk}.json" if len(slots) == 1 else f"slots-{len(slots)}.json"
            response = StreamingHttpResponse(export(slots), content_type="application/json")
            response["Content-Disposition"] = f'attachment; filename="{filename}"'
            return response
        for index, slot in enumerate(slots):
            self._report(request, index, action.run(slot))
            self.log_change(request, slot, str(action.label))
        if len(slots) > MAX_REPORTED:
            self.message_user(
                request, _("%(n)d more slots done.") % {"n": len(slots) - MAX_REPORTED}
            )
        return None

    def _report(self, request: HttpRequest, index: int, result: Result) -> None:
        if index < MAX_REPORTED or not result.ok:
            level = messages.SUCCESS if result.ok else messages.ERROR
            self.message_user(request, result.message, level)

    def confirm_slot_action(
        self, request: HttpRequest, name: str, slots: list[Slot] | QuerySet[Slot], *, bulk: bool
    ) -> TemplateResponse:
        """The confirmation page; a bulk one posts back to the list with its filters.

        "Select all" is carried as ``select_across`` (the list's query string re-selects
        the slots), never as one field per slot, which could exceed
        ``DATA_UPLOAD_MAX_NUMBER_FIELDS``.
        """
        action = SLOT_ACTIONS[name]
        shown = list(slots[:MAX_LISTED])
        total = len(slots) if isinstance(slots, list) else slots.count()
        across = bulk and _select_across(request)
        context = {
            **self.admin_site.each_context(request),
            "title": _("Are you sure?"),
            "subtitle": action.label,
            "action": action,
            "slots": shown,
            "more_slots": max(total - len(shown), 0),
            "ids": _selected_ids(slots, shown, across) if bulk else [],
            "select_across": across,
            "form_url": request.get_full_path(),
            "bulk": bulk,
            "bulk_action": f"{name}_selected",
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "opts": self.opts,
            "app_label": self.opts.app_label,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.action_confirmation_template, context)

    def _bulk(
        self, request: HttpRequest, name: str, queryset: QuerySet[Slot]
    ) -> HttpResponseBase | None:
        if request.POST.get("post") == "yes":
            return self.run_slot_action(request, name, list(queryset))
        return self.confirm_slot_action(request, name, queryset, bulk=True)

    @admin.action(description=_("Summarize now"), permissions=["change"])
    def summarize_selected(
        self, request: HttpRequest, queryset: QuerySet[Slot]
    ) -> HttpResponseBase | None:
        return self._bulk(request, "summarize", queryset)

    @admin.action(description=_("Reset buffer"), permissions=["change"])
    def reset_selected(
        self, request: HttpRequest, queryset: QuerySet[Slot]
    ) -> HttpResponseBase | None:
        return self._bulk(request, "reset", queryset)

    @admin.action(description=_("Export as JSON"), permissions=["export"])
    def export_selected(
        self, request: HttpRequest, queryset: QuerySet[Slot]
    ) -> HttpResponseBase | None:
        return self._bulk(request, "export", queryset)


def _select_across(request: HttpRequest) -> bool:
    """Whether the list's "select all" was used (the admin's own ``select_across`` field)."""
    return bool(forms.BooleanField(required=False).clean(request.POST.get("select_across")))


def _selected_ids(slots: list[Slot] | QuerySet[Slot], shown: list[Slot], across: bool) -> list[Any]:
    """The ids the confirmation posts back: all selected ones, or with select_across just one
    (the admin needs a non-empty selection to run an action; the query string decides)."""
    if across:
        return [s.pk for s in shown[:1]]
    if isinstance(slots, list):
        return [s.pk for s in slots]
    return list(slots.values_list("pk", flat=True))

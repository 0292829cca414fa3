"""Ids as the admin shows them: invisible and control characters written as ``<U+202E>``.

An id such as ``ticket-\\u202e4321-gnp.exe`` would otherwise display as
``ticket-exe.png-1234``, and one made of zero-width spaces as a blank.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from squad_memory.models import Slot
from squad_memory.validation import visible


class VisibleIdsAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """The slot's ids as columns and read-only fields, made visible."""

    @admin.display(description=_("user id"), ordering="user_id")
    def visible_user_id(self, slot: Slot) -> str:
        return visible(slot.user_id)

    @admin.display(description=_("session id"), ordering="session_id")
    def visible_session_id(self, slot: Slot) -> str:
        return visible(slot.session_id)

    @admin.display(description=_("agent id"), ordering="agent_id")
    def visible_agent_id(self, slot: Slot) -> str:
        return visible(slot.agent_id)


class VisibleValuesFilter(admin.AllValuesFieldListFilter):
    """``list_filter`` by a field's values, each value shown with :func:`visible`."""

    def choices(self, changelist: Any) -> Iterator[Any]:
        for choice in super().choices(changelist):
            display = choice.get("display")
            if isinstance(display, str):
                choice["display"] = visible(display)
            yield choice

"""Deleting slots in the admin: the same forgetting as the command and the API.

A slot's delete (its page or the "delete selected" action) goes through
:func:`squad_memory.forgetting.forget_slot`: batched, logged with the operator,
and the confirmation page shows counts instead of listing every message.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from squad_memory import forgetting
from squad_memory.models import Compression, Message, Slot


def operator(request: HttpRequest) -> str:
    """Who deleted, for the forgetting log."""
    return f"admin user pk={getattr(request.user, 'pk', None)}"


class SlotDeleteAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Needs the ``delete_slot`` permission; the slot's messages and log go with it."""

    def delete_model(self, request: HttpRequest, obj: Slot) -> None:
        forgetting.forget_slot(obj, actor=operator(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Slot]) -> None:
        for slot in queryset.order_by("pk"):
            forgetting.forget_slot(slot, actor=operator(request))

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[Any, int], set[Any], list[Any]]:
        """Counts per kind, not one line per message (a history can be long), and no
        permission on messages needed: they are deleted as part of their slot."""
        slots = list(objs)
        ids = [slot.pk for slot in slots]
        counts = {
            Slot._meta.verbose_name_plural: len(slots),
            Message._meta.verbose_name_plural: Message.objects.filter(slot_id__in=ids).count(),
            Compression._meta.verbose_name_plural: Compression.objects.filter(
                slot_id__in=ids
            ).count(),
        }
        return [str(slot) for slot in slots], counts, set(), []

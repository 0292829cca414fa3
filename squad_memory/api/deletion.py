"""Deleting through the API: a slot, or a whole session, with everything stored for it.

The owner may always delete their own conversations; staff may delete anyone's
with the ``squad_memory.delete_slot`` permission. Deletion goes through
:mod:`squad_memory.forgetting`, so it is batched and logged like any forgetting.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from squad_memory import forgetting
from squad_memory.api import access, schema
from squad_memory.models import Slot

DELETE_PERMISSION = "squad_memory.delete_slot"


def may_delete(user: Any, user_id: str) -> bool:
    """Whether ``user`` may delete the conversations of ``user_id``."""
    if getattr(user, "is_staff", False) and user.has_perm(DELETE_PERMISSION):
        return True
    return user_id == access.user_id_for(user)


def check_may_delete(user: Any, user_id: str) -> None:
    if not may_delete(user, user_id):
        raise PermissionDenied("Deleting another user's conversations needs the delete permission.")


def actor(request: Request) -> str:
    """Who asked, for the forgetting log: the API user's primary key."""
    return f"API user pk={getattr(request.user, 'pk', None)}"


class SlotDeleteMixin:
    """``DELETE /slots/{id}/``: the slot, its raw messages, summary and compression log."""

    def get_permissions(self) -> list[BasePermission]:
        # The owner needs no model permission to delete (checked in destroy).
        if getattr(self, "action", None) == "destroy":
            return [IsAuthenticated()]
        return super().get_permissions()  # type: ignore[misc,no-any-return]

    @extend_schema(
        summary="Delete a slot",
        parameters=[schema.SLOT_ID],
        description="Deletes the slot with its raw messages, summary and compression log. "
        "Allowed to its owner, and to staff with the delete permission.",
        request=None,
        responses=schema.errors({204: None}, 401, 403, 404),
    )
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        slot: Slot = self.get_object()  # type: ignore[attr-defined]
        check_may_delete(request.user, slot.user_id)
        forgetting.forget_slot(slot, actor=actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class SessionDeleteMixin:
    """The deletion behind ``DELETE /sessions/{session_id}/`` (the view validates input)."""

    def get_permissions(self) -> list[BasePermission]:
        return [IsAuthenticated()]  # the owner needs no model permission (checked below)

    def delete_session(
        self, request: Request, session_id: str, given: str | None, namespace: str
    ) -> Response:
        user_id = access.user_id_for(request.user) if given is None else given
        if given is not None and not access.may_act_as(request.user, given):
            raise NotFound()
        check_may_delete(request.user, user_id)
        slots = Slot.objects.filter(namespace=namespace, user_id=user_id, session_id=session_id)
        if not slots.exists():
            raise NotFound()
        forgetting.forget(user_id, session_id, namespace=namespace, actor=actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)

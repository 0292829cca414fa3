"""Who owns which slots: the request user's ``user_id`` and the slots they may see.

Nothing here imports Django REST Framework, so the resolver setting can be
checked and used without it.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied

from squad_memory.conf import app_settings
from squad_memory.models import Slot, SlotQuerySet
from squad_memory.permissions import SLOT, can_view_all
from squad_memory.validation import id_problem

logger = logging.getLogger(__name__)

NO_IDENTITY = (
    "Your account has no conversation identity (SQUAD_MEMORY['USER_ID_RESOLVER'] gave no "
    "usable user_id for it)."
)


def default_user_id(user: Any) -> str:
    """The default ``SQUAD_MEMORY["USER_ID_RESOLVER"]``: the user's primary key as a string."""
    return str(user.pk)


def user_id_for(user: Any) -> str:
    """The ``user_id`` of the slots ``user`` owns, by the configured resolver (read live).

    A user the resolver gives no usable id (None, an empty string, a value that is not a
    valid id, or an error) has no slots: :class:`PermissionDenied`, never a shared id.
    """
    resolver = app_settings.import_callable("USER_ID_RESOLVER")
    try:
        value = resolver(user)
    except Exception as exc:  # a resolver bug must not become a 500 or someone else's id
        logger.exception("USER_ID_RESOLVER failed for user %r", getattr(user, "pk", None))
        raise PermissionDenied(NO_IDENTITY) from exc
    user_id = "" if value is None else str(value)
    if id_problem(user_id) is not None:
        raise PermissionDenied(NO_IDENTITY)
    return user_id


def visible_slots(user: Any, namespace: str) -> SlotQuerySet:
    """The slots of ``namespace`` that ``user`` may see: their own, or all for staff with
    ``view_slot`` (or ``change_slot``), as in the admin."""
    slots = Slot.objects.filter(namespace=namespace)
    if can_view_all(user, SLOT):
        return slots
    return slots.filter(user_id=user_id_for(user))


def may_read(user: Any, user_id: str, model_name: str) -> bool:
    """Whether ``user`` may read the ``model_name`` rows (``slot``, ``message``,
    ``compression``) of ``user_id``'s slots: their own, or as staff with its view permission."""
    return can_view_all(user, model_name) or user_id == user_id_for(user)


def may_act_as(user: Any, user_id: str) -> bool:
    """Whether ``user`` may write for ``user_id`` (the write's own permission is checked
    apart): their own id, or any as staff."""
    return bool(getattr(user, "is_staff", False)) or user_id == user_id_for(user)

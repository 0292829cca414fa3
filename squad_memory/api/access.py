"""Who owns which slots: the request user's ``user_id`` and the slots they may see.

Nothing here imports Django REST Framework, so the resolver setting can be
checked and used without it.
"""

from __future__ import annotations

from typing import Any

from squad_memory.conf import app_settings
from squad_memory.models import Slot, SlotQuerySet


def default_user_id(user: Any) -> str:
    """The default ``SQUAD_MEMORY["USER_ID_RESOLVER"]``: the user's primary key as a string."""
    return str(user.pk)


def user_id_for(user: Any) -> str:
    """The ``user_id`` of the slots ``user`` owns, by the configured resolver (read live)."""
    resolver = app_settings.import_callable("USER_ID_RESOLVER")
    return str(resolver(user))


def sees_everything(user: Any) -> bool:
    """Staff see every user's slots and may name any ``user_id``."""
    return bool(getattr(user, "is_staff", False))


def visible_slots(user: Any, namespace: str) -> SlotQuerySet:
    """The slots of ``namespace`` that ``user`` may see: their own, or all for staff."""
    slots = Slot.objects.filter(namespace=namespace)
    if sees_everything(user):
        return slots
    return slots.filter(user_id=user_id_for(user))


def may_act_as(user: Any, user_id: str) -> bool:
    """Whether ``user`` may read or write the slots of ``user_id``."""
    return sees_everything(user) or user_id == user_id_for(user)

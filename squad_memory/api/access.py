"""Who may do what through the API (no Django REST Framework import, so it works without it).

- Reading: any authenticated user, their own slots; staff read other users' slots with
  ``view_slot``, and their messages, buffers, histories and search with ``view_message``.
- Posting: ``SQUAD_MEMORY["API_POST_PERMISSION"]`` (``squad_memory.add_message``; ``None``:
  any authenticated user posts their own messages). For another user: staff with
  ``view_message`` too, the right to read that user's messages (nobody writes where they
  cannot read).
- Compressing or resetting: ``squad_memory.change_slot``. Deleting: the owner, or staff
  with ``squad_memory.delete_slot``.

Another user's slot answers 404 whatever the permissions, so nothing tells which exist.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied

from squad_memory.conf import app_settings
from squad_memory.models import Slot, SlotQuerySet
from squad_memory.permissions import MESSAGE, SLOT, can_view_all, has_perm
from squad_memory.rules import id_problem

logger = logging.getLogger(__name__)

MANAGE_PERMISSION = "squad_memory.change_slot"
DELETE_PERMISSION = "squad_memory.delete_slot"
NO_IDENTITY = (
    "Your account has no conversation identity (SQUAD_MEMORY['USER_ID_RESOLVER'] gave no "
    "usable user_id for it)."
)


def default_user_id(user: Any) -> str:
    """The default ``SQUAD_MEMORY["USER_ID_RESOLVER"]``: the user's primary key as a string."""
    return str(user.pk)


def user_id_for(user: Any) -> str:
    """The ``user_id`` of the slots ``user`` owns, by the configured resolver (read live); a
    user it gives no usable id (None, empty, invalid, an error) owns none: PermissionDenied."""
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


def post_permission() -> str | None:
    """The permission posting needs (``API_POST_PERMISSION``, read live); None: none."""
    value = app_settings.raw("API_POST_PERMISSION")
    return None if value is None else str(value)


def holds(user: Any, permission: str | None) -> bool:
    """Whether ``user`` holds the permission a write needs (None: it needs none)."""
    return permission is None or has_perm(user, permission)


def visible_slots(user: Any, namespace: str) -> SlotQuerySet:
    """The slots of ``namespace`` that ``user`` may see: their own, or all for staff with
    ``view_slot`` (or ``change_slot``), as in the admin."""
    slots = Slot.objects.filter(namespace=namespace)
    return slots if can_view_all(user, SLOT) else slots.filter(user_id=user_id_for(user))


def may_read(user: Any, user_id: str, model_name: str) -> bool:
    """Whether ``user`` may read the ``model_name`` rows of ``user_id``'s slots."""
    return can_view_all(user, model_name) or user_id == user_id_for(user)


def message_reader(user: Any) -> Callable[[str], bool]:
    """:func:`may_read` of messages for many ``user_id``s, the permissions checked once."""
    if can_view_all(user, MESSAGE):
        return lambda user_id: True
    try:
        own = user_id_for(user)
    except PermissionDenied:  # staff listing others' slots without an identity of their own
        return lambda user_id: False
    return lambda user_id: user_id == own


def may_act_as(user: Any, user_id: str) -> bool:
    """Whether ``user`` may write for ``user_id`` (the write's permission is checked apart)."""
    return bool(getattr(user, "is_staff", False)) or user_id == user_id_for(user)


def check_may_delete(user: Any, user_id: str) -> None:
    """The owner may delete their conversations; others need staff and ``delete_slot``."""
    staff = getattr(user, "is_staff", False) and has_perm(user, DELETE_PERMISSION)
    if not staff and user_id != user_id_for(user):
        raise PermissionDenied(f"Deleting another user's conversations needs {DELETE_PERMISSION}.")

"""Permissions of the API: the admin's model permissions, and ownership for end users.

- Reading (``GET``): any authenticated user, for the slots they own (see
  :mod:`squad_memory.api.access`). Ownership is the read permission, so a chat
  frontend needs no extra grants to show a user their conversations. Staff read
  other users' data with the admin's view permissions (:mod:`squad_memory.permissions`):
  slots with ``view_slot``, raw messages, buffers and histories with ``view_message``,
  summarizer error details with ``view_compression``.
- Posting messages: the ``squad_memory.add_message`` permission.
- Compressing or resetting a buffer: the ``squad_memory.change_slot`` permission.

Another user's slot answers 404 whatever the permissions, so nothing tells a
user which slots exist.
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

POST_PERMISSION = "squad_memory.add_message"
MANAGE_PERMISSION = "squad_memory.change_slot"


class SlotAccess(BasePermission):
    """Authenticated users read; writes need the permission the view names for its action.

    A view names it in ``write_permissions``: a dict from action name (or, for a
    plain view, the HTTP method in lower case) to a ``app_label.codename`` string.
    An unsafe request whose action names none is refused.
    """

    message = "You do not have permission to change conversations."

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        if request.method in SAFE_METHODS or request.method not in view.allowed_methods:
            return True  # reads are allowed; a method the view lacks is its 405
        needed = required_permission(view, request)
        return needed is not None and bool(user.has_perm(needed))


def required_permission(view: Any, request: Request) -> str | None:
    """The permission a write through ``view`` needs, or None if the view names none."""
    mapping: dict[str, str] = getattr(view, "write_permissions", {})
    action = getattr(view, "action", None) or (request.method or "").lower()
    return mapping.get(action)

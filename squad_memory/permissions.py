"""Who may read what, in the admin and the API alike: a staff user reads another user's
slots with ``view_slot``, their raw messages (and buffers) with ``view_message``, and the
compression log with ``view_compression``; a model's ``change_`` permission includes its
``view_`` one, as in Django's admin.
"""

from __future__ import annotations

from typing import Any

SLOT = "slot"
MESSAGE = "message"
COMPRESSION = "compression"


def can_view(user: Any, model_name: str) -> bool:
    """Whether ``user`` holds the view (or change) permission of squad_memory's ``model_name``."""
    if user is None or not getattr(user, "is_active", False):
        return False
    return bool(
        user.has_perm(f"squad_memory.view_{model_name}")
        or user.has_perm(f"squad_memory.change_{model_name}")
    )


def can_view_all(user: Any, model_name: str) -> bool:
    """Staff with the view permission of ``model_name`` read it for every user."""
    return bool(getattr(user, "is_staff", False)) and can_view(user, model_name)

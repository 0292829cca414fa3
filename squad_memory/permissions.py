"""Who may read what, in the admin and the API alike: a staff user reads another user's
slots with ``view_slot``, their raw messages (and buffers) with ``view_message``, and the
compression log with ``view_compression``; a model's ``change_`` permission includes its
``view_`` one, as in Django's admin.
"""

from __future__ import annotations

import functools
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.db import connections, router
from django.dispatch import receiver

SLOT = "slot"
MESSAGE = "message"
COMPRESSION = "compression"
#: The authentication backends whose permission rule :func:`has_perm` checks in one
#: statement: Django's default, ``ModelBackend`` alone.
MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"


def has_perm(user: Any, perm: str) -> bool:
    """``user.has_perm(perm)``, in one statement when Django's ``ModelBackend`` alone
    decides (the default). The backend loads every permission of the user and of their
    groups (two queries) to test one: on an API post, about 1 ms of CPU, more than the save
    itself. Any other case (other backends, a user model with a ``has_perm`` of its own,
    permissions already loaded on the user) asks ``user.has_perm``."""
    if not _model_backend_decides(user):
        return bool(user.has_perm(perm))
    if user.is_active and user.is_superuser:  # as PermissionsMixin.has_perm
        return True
    app_label, dot, codename = perm.partition(".")  # an app label holds no dot
    if not dot or not user.is_active or user.is_anonymous:  # as ModelBackend
        return False
    return _granted(user, app_label, codename)


def _model_backend_decides(user: Any) -> bool:
    from django.contrib.auth.models import PermissionsMixin

    return (
        list(settings.AUTHENTICATION_BACKENDS) == [MODEL_BACKEND]
        and isinstance(user, PermissionsMixin)
        and user.__class__.has_perm is PermissionsMixin.has_perm  # (a lazy user's class too)
        and not hasattr(user, "_perm_cache")
    )


def _granted(user: Any, app_label: str, codename: str) -> bool:
    """Whether ``ModelBackend`` finds ``app_label.codename`` among the permissions of the
    user or of their groups, on the database it reads the user's permissions from."""
    from django.contrib.auth.models import Permission

    alias = router.db_for_read(Permission, instance=user)
    user_pk = user._meta.pk.get_db_prep_value(user.pk, connections[alias])
    params = {"app_label": app_label, "codename": codename, "user": user_pk}
    with connections[alias].cursor() as cursor:
        cursor.execute(_granted_sql(user._meta.label, alias), params)
        return cursor.fetchone() is not None


@functools.cache
def _granted_sql(user_label: str, alias: str) -> str:
    """The statement of :func:`_granted`, its tables and columns from the models' ``_meta``
    (params: app_label, codename, user)."""
    from django.apps import apps
    from django.contrib.auth.models import Group, Permission
    from django.contrib.contenttypes.models import ContentType

    q = connections[alias].ops.quote_name
    user_model = apps.get_model(user_label)
    own = user_model._meta.get_field("user_permissions")
    groups = user_model._meta.get_field("groups")
    granted = Group._meta.get_field("permissions")
    pk, content_type = _column(Permission, "id"), _column(Permission, "content_type")
    return (
        f"SELECT 1 FROM {q(Permission._meta.db_table)} p "
        f"INNER JOIN {q(ContentType._meta.db_table)} ct "
        f"ON p.{q(content_type)} = ct.{q(_column(ContentType, 'id'))} "
        f"WHERE ct.{q(_column(ContentType, 'app_label'))} = %(app_label)s "
        f"AND p.{q(_column(Permission, 'codename'))} = %(codename)s "
        f"AND (p.{q(pk)} IN (SELECT {q(own.m2m_reverse_name())} FROM {q(own.m2m_db_table())} "
        f"WHERE {q(own.m2m_column_name())} = %(user)s) "
        f"OR p.{q(pk)} IN (SELECT g.{q(granted.m2m_reverse_name())} "
        f"FROM {q(granted.m2m_db_table())} g INNER JOIN {q(groups.m2m_db_table())} u "
        f"ON g.{q(granted.m2m_column_name())} = u.{q(groups.m2m_reverse_name())} "
        f"WHERE u.{q(groups.m2m_column_name())} = %(user)s))"
    )


def _column(model: Any, name: str) -> str:
    return str(model._meta.get_field(name).column)


@receiver(setting_changed)
def _auth_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in ("DATABASES", "AUTH_USER_MODEL"):
        _granted_sql.cache_clear()


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

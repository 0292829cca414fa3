"""``squad_memory.permissions.has_perm``: Django's answer, in one statement where it can."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import override_settings
from django.utils.functional import SimpleLazyObject

from squad_memory.permissions import has_perm

pytestmark = pytest.mark.django_db

PERMS = [
    "squad_memory.add_message",
    "squad_memory.change_slot",
    "auth.add_user",
    "add_message",  # no app label: nobody holds it
    "squad_memory.add_message.x",
    "other_app.add_message",
]


class GrantsEverything:
    """An authentication backend of a project's own: every permission to everyone."""

    def authenticate(self, request: Any, **credentials: Any) -> None:
        return None

    def has_perm(self, user: Any, perm: str, obj: Any = None) -> bool:
        return True


def _permission(codename: str) -> Permission:
    return Permission.objects.get(content_type__app_label="squad_memory", codename=codename)


def _users() -> dict[str, User]:
    """Users holding ``add_message`` in each way there is, and some who do not."""
    group = Group.objects.create(name="posters")
    group.permissions.add(_permission("add_message"))
    made = {
        "none": User.objects.create_user("none"),
        "own": User.objects.create_user("own"),
        "group": User.objects.create_user("group"),
        "superuser": User.objects.create_user("superuser", is_superuser=True),
        "inactive": User.objects.create_user("inactive", is_active=False),
        "inactive superuser": User.objects.create_user(
            "inactive_superuser", is_active=False, is_superuser=True
        ),
        "staff": User.objects.create_user("staff", is_staff=True),
    }
    for name in ("own", "inactive", "staff"):
        made[name].user_permissions.add(_permission("add_message"), _permission("change_slot"))
    made["group"].groups.add(group)
    return made


def _fresh(user: User) -> User:
    return User.objects.get(pk=user.pk)  # no permission cache


def test_has_perm_answers_as_user_has_perm(count_queries: Any) -> None:
    for name, user in _users().items():
        for perm in PERMS:
            expected = _fresh(user).has_perm(perm)
            fresh = _fresh(user)
            with count_queries() as counter:
                assert has_perm(fresh, perm) is expected, (name, perm)
            assert counter.count <= 1, (name, perm, counter.statements)


def test_has_perm_is_one_statement_instead_of_two(count_queries: Any) -> None:
    user = _fresh(_users()["group"])
    with count_queries() as counter:
        assert has_perm(user, "squad_memory.add_message")
    assert counter.count == 1, counter.statements
    with count_queries() as counter:
        assert _fresh(user).has_perm("squad_memory.add_message")
    assert counter.count == 3, counter.statements  # the user, their perms, their groups'


def test_permissions_loaded_on_the_user_are_used(count_queries: Any) -> None:
    user = _fresh(_users()["own"])
    assert user.has_perm("squad_memory.change_slot")  # loads them all
    with count_queries() as counter:
        assert has_perm(user, "squad_memory.add_message")
        assert not has_perm(user, "squad_memory.delete_slot")
    assert counter.count == 0, counter.statements


def test_other_backends_decide_as_django_does() -> None:
    user = _fresh(_users()["none"])
    assert not has_perm(user, "squad_memory.add_message")
    backends = ["django.contrib.auth.backends.ModelBackend", f"{__name__}.GrantsEverything"]
    with override_settings(AUTHENTICATION_BACKENDS=backends):
        assert has_perm(_fresh(user), "squad_memory.add_message")


def test_a_lazy_user_is_checked_as_the_user(count_queries: Any) -> None:
    """Session authentication hands a ``SimpleLazyObject``."""
    users = _users()
    for name in ("own", "group", "none"):
        lazy = SimpleLazyObject(functools.partial(_fresh, users[name]))
        with count_queries() as counter:
            assert has_perm(lazy, "squad_memory.add_message") is (name != "none")
        assert counter.count == 2, counter.statements  # the user, then the one check

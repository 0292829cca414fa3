"""DELETE /api/slots/{id}/ and DELETE /api/sessions/{session_id}/, and the admin's delete."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from squad_memory.models import Compression, Message, Slot
from tests.api_support import Users, client_for, fill, make_user
from tests.conftest import extra

extra("rest_framework", "api")  # every test here talks to the REST API

pytest_plugins = ["tests.api_fixtures"]
pytestmark = pytest.mark.django_db


def uid(user: Any) -> str:
    return str(user.pk)


def test_owner_deletes_a_slot_with_everything_stored_for_it(users: Users) -> None:
    slot = fill(users.reader, 6)  # no model permission: owning it is enough
    sibling = fill(users.reader, 4, agent="a2")
    neighbour = fill(users.other, 4)  # same session and agent ids
    response = client_for(users.reader).delete(f"/api/slots/{slot.pk}/")
    assert response.status_code == 204
    assert not Slot.objects.filter(pk=slot.pk).exists()
    assert not Message.objects.filter(slot_id=slot.pk).exists()
    assert Message.objects.filter(slot=sibling).count() == 4
    assert Message.objects.filter(slot=neighbour).count() == 4
    assert client_for(users.reader).delete(f"/api/slots/{slot.pk}/").status_code == 404


def test_another_users_slot_is_404_and_stays(users: Users) -> None:
    slot = fill(users.other, 4)
    assert client_for(users.owner).delete(f"/api/slots/{slot.pk}/").status_code == 404
    assert client_for(None).delete(f"/api/slots/{slot.pk}/").status_code == 401
    assert client_for(users.owner).delete("/api/slots/abc/").status_code == 404
    assert Message.objects.filter(slot=slot).count() == 4


def test_staff_need_the_delete_permission(users: Users) -> None:
    slot = fill(users.other, 4)
    assert client_for(users.staff).delete(f"/api/slots/{slot.pk}/").status_code == 403
    assert Slot.objects.filter(pk=slot.pk).exists()
    users.staff.user_permissions.add(Permission.objects.get(codename="delete_slot"))
    staff = type(users.staff).objects.get(pk=users.staff.pk)
    assert client_for(staff).delete(f"/api/slots/{slot.pk}/").status_code == 204
    assert not Slot.objects.filter(pk=slot.pk).exists()


def test_delete_a_session_leaves_other_users_and_sessions(users: Users) -> None:
    mine = [fill(users.owner, 4, "s1", "a1"), fill(users.owner, 3, "s1", "a2")]
    kept = fill(users.owner, 2, "s2", "a1")
    theirs = fill(users.other, 5, "s1", "a1")
    row = {"role": "user", "content": [{"text": "x"}]}
    foreign = Slot.objects.append((uid(users.owner), "s1", "a1"), [row], namespace="wrapped")
    client = client_for(users.owner)
    assert client.delete("/api/sessions/s1/").status_code == 204
    assert not Slot.objects.filter(pk__in=[s.pk for s in mine]).exists()
    assert Message.objects.filter(slot=kept).count() == 2
    assert Message.objects.filter(slot=theirs).count() == 5
    assert Slot.objects.filter(pk=foreign.slot.pk).exists()  # the API's namespace only
    assert client.delete("/api/sessions/s1/").status_code == 404


def test_session_delete_for_another_user(users: Users) -> None:
    theirs = fill(users.other, 5, "s1")
    path = f"/api/sessions/s1/?user_id={uid(users.other)}"
    assert client_for(users.owner).delete(path).status_code == 404
    assert client_for(users.staff).delete(path).status_code == 403
    users.staff.user_permissions.add(Permission.objects.get(codename="delete_slot"))
    staff = type(users.staff).objects.get(pk=users.staff.pk)
    assert Slot.objects.filter(pk=theirs.pk).exists()
    assert client_for(staff).delete(path).status_code == 204
    assert not Slot.objects.filter(pk=theirs.pk).exists()


def test_session_delete_validates_the_id(users: Users) -> None:
    assert client_for(users.owner).delete("/api/sessions/a%01b/").status_code == 400
    assert client_for(None).delete("/api/sessions/s1/").status_code == 401


def test_api_deletion_is_logged_with_the_user(
    users: Users, caplog: pytest.LogCaptureFixture
) -> None:
    slot = fill(users.owner, 4)
    with caplog.at_level(logging.INFO, logger="squad_memory"):
        client_for(users.owner).delete(f"/api/slots/{slot.pk}/")
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("Forgot"))
    assert f"API user pk={users.owner.pk}" in line and f"slot={slot.pk}" in line
    assert f"{Message._meta.db_table}: 4" in line and "m1" not in caplog.text


def test_admin_delete_forgets_the_slot(caplog: pytest.LogCaptureFixture) -> None:
    owner = make_user("deleter", staff=True, perms=("view_slot", "delete_slot"))
    client = Client()
    client.force_login(owner)
    slot, neighbour = fill(owner, 6), fill(make_user("n"), 3)
    url = reverse("admin:squad_memory_slot_delete", args=[slot.pk])
    page = client.get(url)
    # counts, not messages (attribute values left out: a random CSRF token may hold "m1")
    shown = re.sub(rb'value="[^"]*"', b"", page.content)
    assert page.status_code == 200 and b"m1" not in shown
    with caplog.at_level(logging.INFO, logger="squad_memory"):
        assert client.post(url, {"post": "yes"}).status_code == 302
    assert not Slot.objects.filter(pk=slot.pk).exists()
    assert not Message.objects.filter(slot_id=slot.pk).exists()
    assert Message.objects.filter(slot=neighbour).count() == 3
    assert f"admin user pk={owner.pk}" in caplog.text


def test_admin_bulk_delete_and_permission() -> None:
    viewer = make_user("viewer", staff=True, perms=("view_slot",))
    editor = make_user("editor", staff=True, perms=("view_slot", "delete_slot"))
    slots = [fill(viewer, 3, agent=f"a{i}") for i in range(3)]
    Compression.objects.create(
        slot=slots[0],
        started_at="2030-01-01T00:00Z",
        finished_at="2030-01-01T00:00Z",
        duration_ms=1,
        from_seq=1,
        to_seq=1,
        summarizer="x",
        outcome="applied",
    )
    client = Client()
    client.force_login(viewer)
    one = reverse("admin:squad_memory_slot_delete", args=[slots[0].pk])
    assert client.post(one, {"post": "yes"}).status_code == 403
    client.force_login(editor)
    data = {"action": "delete_selected", "_selected_action": [s.pk for s in slots[:2]]}
    changelist = reverse("admin:squad_memory_slot_changelist")
    assert client.post(changelist, data).status_code == 200  # the confirmation page
    assert client.post(changelist, {**data, "post": "yes"}).status_code == 302
    assert list(Slot.objects.values_list("pk", flat=True)) == [slots[2].pk]
    assert not Compression.objects.exists() and Message.objects.count() == 3

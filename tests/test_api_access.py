"""Access control: anonymous, owner, another user and staff, against every endpoint."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import override_settings

from squad_memory.models import Slot
from tests.api_support import Users, client_for, fill, make_user, one, post, text_of
from tests.conftest import extra

extra("rest_framework", "api")  # every test here talks to the REST API

pytest_plugins = ["tests.api_fixtures"]

# (name, request) -> the status per caller: anonymous, owner, other user, staff.
Call = Callable[[Any, Slot, User], Any]


def _post_own(client: Any, slot: Slot, owner: User) -> Any:
    return post(client, {"session_id": "s1", "agent_id": "a1", "messages": [one("user", "x")]})


def _post_as_owner(client: Any, slot: Slot, owner: User) -> Any:
    body = {
        "user_id": str(owner.pk),
        "session_id": "s1",
        "agent_id": "a1",
        "messages": [one("user", "x")],
    }
    return post(client, body)


MATRIX: list[tuple[str, Call, tuple[int, int, int, int]]] = [
    ("list", lambda c, s, o: c.get("/api/slots/"), (401, 200, 200, 200)),
    ("retrieve", lambda c, s, o: c.get(f"/api/slots/{s.pk}/"), (401, 200, 404, 200)),
    ("messages", lambda c, s, o: c.get(f"/api/slots/{s.pk}/messages/"), (401, 200, 404, 200)),
    ("buffer", lambda c, s, o: c.get(f"/api/slots/{s.pk}/buffer/"), (401, 200, 404, 200)),
    # Each caller's own session s1: only the owner has one (unknown sessions are 404).
    ("history", lambda c, s, o: c.get("/api/sessions/s1/history/"), (401, 200, 404, 404)),
    (
        "history of owner",
        lambda c, s, o: c.get(f"/api/sessions/s1/history/?user_id={o.pk}"),
        (401, 200, 404, 200),
    ),
    ("post own", _post_own, (401, 201, 201, 201)),
    ("post as owner", _post_as_owner, (401, 201, 403, 201)),
    ("compress", lambda c, s, o: c.post(f"/api/slots/{s.pk}/compress/"), (401, 200, 404, 200)),
    ("reset", lambda c, s, o: c.post(f"/api/slots/{s.pk}/reset/"), (401, 200, 404, 200)),
]


@pytest.mark.django_db(transaction=True)  # compresses on commit
@pytest.mark.parametrize(("name", "call", "expected"), MATRIX, ids=[m[0] for m in MATRIX])
def test_access_matrix(users: Users, name: str, call: Call, expected: tuple[int, ...]) -> None:
    slot = fill(users.owner, 4)
    callers = (None, users.owner, users.other, users.staff)
    got = tuple(call(client_for(user), slot, users.owner).status_code for user in callers)
    assert got == expected


def test_lists_and_histories_show_only_what_the_caller_may_see(users: Users) -> None:
    mine, theirs = fill(users.owner, 3), fill(users.other, 2)
    ids = lambda user: {s["id"] for s in client_for(user).get("/api/slots/").json()["results"]}  # noqa: E731
    assert ids(users.owner) == {mine.pk}
    assert ids(users.other) == {theirs.pk}
    assert ids(users.staff) == {mine.pk, theirs.pk}
    other_view = client_for(users.other).get("/api/slots/", {"user_id": str(users.owner.pk)})
    assert other_view.json()["results"] == []
    history = client_for(users.other).get("/api/sessions/s1/history/").json()  # their own
    assert history["user_id"] == str(users.other.pk)
    assert [m["content"][0]["text"] for m in history["messages"]] == [
        text_of(0),
        f"[a1] {text_of(1)}",
    ]


def test_anonymous_gets_401_with_a_token_challenge(users: Users) -> None:
    response = client_for(None).get("/api/slots/")
    assert response.status_code == 401 and response["WWW-Authenticate"] == "Token"


def test_a_bad_token_is_refused(users: Users) -> None:
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert client.get("/api/slots/").status_code == 401


def test_reading_needs_no_permission_but_writing_does(users: Users) -> None:
    slot = fill(users.reader, 4)
    client = client_for(users.reader)
    assert client.get(f"/api/slots/{slot.pk}/").status_code == 200
    assert client.get(f"/api/slots/{slot.pk}/messages/").status_code == 200
    assert (
        post(
            client, {"session_id": "s1", "agent_id": "a1", "message": one("assistant", "x")}
        ).status_code
        == 403
    )
    assert client.post(f"/api/slots/{slot.pk}/compress/").status_code == 403
    assert client.post(f"/api/slots/{slot.pk}/reset/").status_code == 403
    assert Slot.objects.get(pk=slot.pk).last_seq == 4


@pytest.mark.django_db(transaction=True)  # compresses on commit
def test_posting_and_managing_are_separate_permissions(users: Users) -> None:
    poster = make_user("poster", perms=("add_message",))
    slot = fill(poster, 2)
    client = client_for(poster)
    assert (
        post(
            client, {"session_id": "s1", "agent_id": "a1", "message": one("user", "x")}
        ).status_code
        == 201
    )
    assert client.post(f"/api/slots/{slot.pk}/compress/").status_code == 403
    manager = make_user("manager", perms=("change_slot",))
    managed = fill(manager, 2)
    client = client_for(manager)
    assert client.post(f"/api/slots/{managed.pk}/compress/").status_code == 200
    assert (
        post(
            client, {"session_id": "s1", "agent_id": "a1", "message": one("user", "x")}
        ).status_code
        == 403
    )


def test_staff_write_needs_the_permission_too(users: Users) -> None:
    slot = fill(users.owner, 2)
    viewing_staff = make_user("viewingstaff", staff=True, perms=("view_slot",))
    client = client_for(viewing_staff)
    assert client.get(f"/api/slots/{slot.pk}/").status_code == 200
    assert client.post(f"/api/slots/{slot.pk}/reset/").status_code == 403
    assert Slot.objects.get(pk=slot.pk).last_seq == 2


def _reads(client: Any, slot: Slot) -> dict[str, int]:
    return {
        "list": len(client.get("/api/slots/").json()["results"]),
        "retrieve": client.get(f"/api/slots/{slot.pk}/").status_code,
        "messages": client.get(f"/api/slots/{slot.pk}/messages/").status_code,
        "buffer": client.get(f"/api/slots/{slot.pk}/buffer/").status_code,
        "history": client.get(f"/api/sessions/s1/history/?user_id={slot.user_id}").status_code,
    }


@pytest.mark.parametrize(
    ("perms", "expected"),
    [
        ((), {"list": 1, "retrieve": 404, "messages": 404, "buffer": 404, "history": 404}),
        (
            ("view_slot",),
            {"list": 2, "retrieve": 200, "messages": 403, "buffer": 403, "history": 404},
        ),
        (
            ("view_slot", "view_message"),
            {"list": 2, "retrieve": 200, "messages": 200, "buffer": 200, "history": 200},
        ),
        (
            ("change_slot", "change_message"),  # as in the admin, change includes view
            {"list": 2, "retrieve": 200, "messages": 200, "buffer": 200, "history": 200},
        ),
    ],
)
def test_staff_read_other_users_data_with_the_admin_view_permissions(
    users: Users, perms: tuple[str, ...], expected: dict[str, int]
) -> None:
    slot = fill(users.owner, 4)
    member = make_user("member", staff=True, perms=perms)
    own = fill(member, 2)
    client = client_for(member)
    assert _reads(client, slot) == expected
    # Whatever the permissions, a staff user reads their own conversations like anyone.
    assert set(_reads(client, own).values()) <= {1, 2, 200}


def test_end_users_keep_reading_their_own_slots_without_permissions(users: Users) -> None:
    slot = fill(users.reader, 4)
    fill(users.owner, 2)
    got = _reads(client_for(users.reader), slot)
    assert got == {"list": 1, "retrieve": 200, "messages": 200, "buffer": 200, "history": 200}


def email_user_id(user: User) -> str:
    return f"mail:{user.username}"


def test_user_id_resolver_is_read_live_from_settings(users: Users) -> None:
    slot = Slot.objects.create(user_id="mail:owner", session_id="s", agent_id="a")
    client = client_for(users.owner)
    assert client.get(f"/api/slots/{slot.pk}/").status_code == 404
    resolver = f"{__name__}.email_user_id"
    with override_settings(SQUAD_MEMORY={"USER_ID_RESOLVER": resolver}):
        assert client.get(f"/api/slots/{slot.pk}/").status_code == 200
        response = post(client, {"session_id": "s", "agent_id": "a", "message": one("user", "x")})
        assert response.json()["slot"]["id"] == slot.pk


def _no_id(user: User) -> Any:
    return None


def _empty_id(user: User) -> str:
    return ""


def _bad_id(user: User) -> str:
    return "nul\x00"


def _broken_resolver(user: User) -> str:
    raise RuntimeError("directory unreachable")


@pytest.mark.parametrize("resolver", ["_no_id", "_empty_id", "_bad_id", "_broken_resolver"])
def test_a_user_without_a_usable_id_is_refused_not_merged(users: Users, resolver: str) -> None:
    for user_id in ("None", ""):  # what a shared, made-up identity would read
        Slot.objects.create(user_id=user_id, session_id="s", agent_id="a")
    client = client_for(users.owner)
    with override_settings(SQUAD_MEMORY={"USER_ID_RESOLVER": f"{__name__}.{resolver}"}):
        assert client.get("/api/slots/").status_code == 403
        assert client.get("/api/sessions/s/history/").status_code == 403
        response = post(client, {"session_id": "t", "agent_id": "a", "message": one("user", "x")})
        assert response.status_code == 403 and "USER_ID_RESOLVER" in response.json()["detail"]
        assert client_for(users.staff).get("/api/slots/").status_code == 200  # staff need no id
    assert not Slot.objects.filter(session_id="t").exists()


def test_methods_an_endpoint_lacks_are_405_not_403(users: Users) -> None:
    slot = fill(users.reader, 2)
    for user in (users.reader, users.owner):
        client = client_for(user)
        for method in ("put", "patch"):
            assert getattr(client, method)(f"/api/slots/{slot.pk}/").status_code == 405
        for method in ("delete", "put", "patch"):
            assert getattr(client, method)("/api/slots/messages/").status_code == 405
        assert client.post("/api/sessions/s1/history/").status_code == 405
        assert client.get("/api/sessions/s1/").status_code == 405
        assert client.get(f"/api/slots/{slot.pk}/compress/").status_code == 405
    assert client_for(None).delete(f"/api/slots/{slot.pk}/").status_code == 401
    assert Slot.objects.filter(pk=slot.pk).exists()


def test_the_403_for_posting_names_the_permission_not_a_server_setting(users: Users) -> None:
    body = {"session_id": "s1", "agent_id": "a1", "message": one("user", "x")}
    response = post(client_for(users.reader), body)
    assert response.status_code == 403
    detail = response.json()["detail"]
    assert "squad_memory.add_message" in detail and "administrator" in detail
    assert "API_POST_PERMISSION" not in detail and "SQUAD_MEMORY" not in detail


def test_without_a_post_permission_any_user_posts_their_own_messages(users: Users) -> None:
    own = {"session_id": "s1", "agent_id": "a1", "message": one("user", "x")}
    for_owner = {**own, "user_id": str(users.owner.pk)}
    reader = client_for(users.reader)
    with override_settings(SQUAD_MEMORY={"API_POST_PERMISSION": None}):
        assert post(reader, own).status_code == 201
        assert post(reader, for_owner).status_code == 403  # another user's: staff only
        slot = Slot.objects.get(user_id=str(users.reader.pk))
        assert reader.post(f"/api/slots/{slot.pk}/compress/").status_code == 403
    assert post(reader, own).status_code == 403  # read live: the default again


def test_the_post_permission_is_a_setting(users: Users) -> None:
    body = {"session_id": "s1", "agent_id": "a1", "message": one("user", "x")}
    with override_settings(SQUAD_MEMORY={"API_POST_PERMISSION": "squad_memory.change_message"}):
        response = post(client_for(users.owner), body)  # has add_message only
    assert response.status_code == 403
    assert "squad_memory.change_message" in response.json()["detail"]


@pytest.mark.parametrize("post_permission", [None, "squad_memory.add_message"])
def test_posting_for_another_user_needs_the_right_to_read_their_messages(
    users: Users, post_permission: str | None
) -> None:
    """Nobody writes where they cannot read: staff naming another user's user_id need
    view_message, whatever the post permission says."""
    slot = fill(users.owner, 2)
    body = {"user_id": str(users.owner.pk), "session_id": "s1", "agent_id": "a1"}
    body["message"] = one("user", "planted")
    blind = make_user("blindstaff", staff=True, perms=("add_message", "view_slot"))
    reader = make_user("readerstaff", staff=True, perms=("add_message", "view_message"))
    with override_settings(SQUAD_MEMORY={"API_POST_PERMISSION": post_permission}):
        assert client_for(blind).get(f"/api/slots/{slot.pk}/messages/").status_code == 403
        refused = post(client_for(blind), body)
        assert refused.status_code == 403
        assert "squad_memory.view_message" in refused.json()["detail"]
        assert Slot.objects.get(pk=slot.pk).last_seq == 2  # nothing planted
        assert post(client_for(reader), body).status_code == 201
    assert Slot.objects.get(pk=slot.pk).last_seq == 3


def test_the_post_permission_may_come_from_a_group(users: Users) -> None:
    body = {"session_id": "s1", "agent_id": "a1", "message": one("user", "x")}
    assert post(client_for(users.reader), body).status_code == 403
    group = Group.objects.create(name="posters")
    group.permissions.add(Permission.objects.get(codename="add_message"))
    users.reader.groups.add(group)
    assert post(client_for(users.reader), body).status_code == 201
    users.reader.groups.clear()  # read on every request: taken away at once
    assert post(client_for(users.reader), body).status_code == 403

"""GET /api/sessions/: a user's sessions for a chat sidebar, from one request."""

from __future__ import annotations

from typing import Any

from tests.api_support import Users, client_for, fill, make_user, one, post
from tests.conftest import extra

extra("rest_framework", "api")  # every test here talks to the REST API

pytest_plugins = ["tests.api_fixtures"]


def _sessions(client: Any, **params: Any) -> dict[str, Any]:
    response = client.get("/api/sessions/", params)
    assert response.status_code == 200, response.content[:300]
    return dict(response.json())


def test_lists_the_users_sessions_newest_first_with_agents_counts_and_preview(
    users: Users,
) -> None:
    client = client_for(users.owner)
    fill(users.owner, 4, session="old", agent="tech")
    fill(users.other, 3, session="theirs")
    post(client, {"session_id": "new", "agent_id": "tech", "message": one("user", "Hello")})
    text = "Unplug it for ten seconds. " * 10
    post(client, {"session_id": "new", "agent_id": "billing", "message": one("assistant", text)})

    body = _sessions(client)

    assert [s["session_id"] for s in body["results"]] == ["new", "old"]
    new, old = body["results"]
    assert new["user_id"] == str(users.owner.pk) and new["message_count"] == 2
    assert [a["agent_id"] for a in new["agents"]] == ["billing", "tech"]  # newest first
    assert new["last_message"] == {
        "agent_id": "billing",
        "role": "assistant",
        "preview": text[:100],
    }
    assert new["last_activity"] >= old["last_activity"]
    assert old["message_count"] == 4 and old["last_message"]["role"] == "assistant"
    for agent in new["agents"]:  # each entry links to its slot
        slot = client.get(agent["url"]).json()
        assert (slot["id"], slot["agent_id"]) == (agent["slot"], agent["agent_id"])
        assert agent["message_count"] == slot["message_count"] == 1
    history = client.get(new["history"]).json()
    assert [m["role"] for m in history["messages"]] == ["user", "assistant"]


def test_a_post_moves_its_session_to_the_top(users: Users) -> None:
    client = client_for(users.owner)
    for session in ("a", "b", "c"):
        fill(users.owner, 2, session=session)
    post(client, {"session_id": "a", "agent_id": "a1", "message": one("user", "again")})
    assert [s["session_id"] for s in _sessions(client)["results"]] == ["a", "c", "b"]


def test_pages_by_cursor(users: Users) -> None:
    client = client_for(users.owner)
    for session in range(5):
        fill(users.owner, 2, session=f"s{session}")
    first = _sessions(client, page_size=2)
    assert [s["session_id"] for s in first["results"]] == ["s4", "s3"]
    second = client.get(first["next"]).json()
    third = client.get(second["next"]).json()
    assert [s["session_id"] for s in second["results"] + third["results"]] == ["s2", "s1", "s0"]
    assert third["next"] is None
    assert client.get("/api/sessions/", {"cursor": "cD1ub3Q"}).status_code == 404  # p=not


def test_staff_list_everyones_sessions_and_filter_by_user(users: Users) -> None:
    fill(users.owner, 2, session="mine")
    fill(users.other, 2, session="theirs")
    staff = client_for(users.staff)
    everyone = {s["session_id"] for s in _sessions(staff)["results"]}
    assert everyone == {"mine", "theirs"}
    only = _sessions(staff, user_id=str(users.other.pk))["results"]
    assert [(s["user_id"], s["session_id"]) for s in only] == [(str(users.other.pk), "theirs")]
    # A user naming another user's id sees nothing of theirs.
    assert _sessions(client_for(users.owner), user_id=str(users.other.pk))["results"] == []


def test_the_preview_needs_the_right_to_read_the_messages(users: Users) -> None:
    fill(users.other, 2, session="theirs")
    slots_only = make_user("auditor", staff=True, perms=("view_slot",))
    (session,) = _sessions(client_for(slots_only))["results"]
    assert session["session_id"] == "theirs" and session["last_message"] is None
    assert session["agents"][0]["message_count"] == 2


def test_same_session_id_of_two_users_stays_apart(users: Users) -> None:
    fill(users.owner, 2, session="same", agent="a1")
    fill(users.other, 4, session="same", agent="a2")
    sessions = _sessions(client_for(users.staff))["results"]
    by_user = {s["user_id"]: [a["agent_id"] for a in s["agents"]] for s in sessions}
    assert by_user == {str(users.owner.pk): ["a1"], str(users.other.pk): ["a2"]}


def test_bad_input_and_anonymous(users: Users) -> None:
    client = client_for(users.owner)
    assert client.get("/api/sessions/", {"user_id": "a\x00b"}).status_code == 400
    assert client.get("/api/sessions/", {"page_size": "x"}).status_code == 400
    assert client_for(None).get("/api/sessions/").status_code == 401
    assert _sessions(client) == {"next": None, "previous": None, "results": []}


def test_queries_do_not_grow_with_the_sessions(users: Users, count_queries: Any) -> None:
    client = client_for(users.owner)

    def queries() -> int:
        with count_queries() as counter:
            _sessions(client)
        return int(counter.count)

    fill(users.owner, 2, session="first")
    few = queries()
    for session in range(30):
        fill(users.owner, 2, session=f"s{session}", agent=f"agent{session % 3}")
    assert queries() == few == 3  # the token, the page of sessions, their slots

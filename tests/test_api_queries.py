"""The number of SQL queries per request does not grow with the history's length."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from squad_memory.models import Slot
from tests.api_support import Users, client_for, fill, one, post
from tests.conftest import extra

extra("rest_framework", "api")  # every test here talks to the REST API

pytest_plugins = ["tests.api_fixtures"]

Request = Callable[[Any, Slot], Any]

REQUESTS: list[tuple[str, Request]] = [
    ("list", lambda c, s: c.get("/api/slots/", {"session_id": s.session_id})),
    ("retrieve", lambda c, s: c.get(f"/api/slots/{s.pk}/")),
    ("messages", lambda c, s: c.get(f"/api/slots/{s.pk}/messages/")),
    ("messages newest", lambda c, s: c.get(f"/api/slots/{s.pk}/messages/?ordering=-seq")),
    ("buffer", lambda c, s: c.get(f"/api/slots/{s.pk}/buffer/")),
    ("history", lambda c, s: c.get(f"/api/sessions/{s.session_id}/history/")),
    ("sessions", lambda c, s: c.get("/api/sessions/")),
    (
        "post one",
        lambda c, s: post(
            c, {"session_id": s.session_id, "agent_id": "a1", "message": one("user", "q")}
        ),
    ),
    (
        "post batch",
        lambda c, s: post(
            c,
            {
                "session_id": s.session_id,
                "agent_id": "a1",
                "messages": [one("user", "q"), one("assistant", "r")],
            },
        ),
    ),
    ("reset", lambda c, s: c.post(f"/api/slots/{s.pk}/reset/")),
]


def _queries(count_queries: Any, client: Any, slot: Slot, request: Request) -> int:
    client.get(f"/api/slots/{slot.pk}/buffer/")  # steady state: the buffer is active if due
    with count_queries() as counter:
        response = request(client, slot)
    assert response.status_code in (200, 201), response.content[:300]
    return int(counter.count)


@pytest.mark.parametrize(("name", "request_"), REQUESTS, ids=[r[0] for r in REQUESTS])
def test_queries_do_not_grow_with_history(
    users: Users, count_queries: Any, name: str, request_: Request
) -> None:
    client = client_for(users.owner)
    short = fill(users.owner, 10, session="short")
    long = fill(users.owner, 2000, session="long")
    small, big = (_queries(count_queries, client, s, request_) for s in (short, long))
    assert small == big, f"{name}: {small} queries at 10 messages, {big} at 2,000"
    assert big <= 12, f"{name}: {big} queries"


@pytest.mark.django_db(transaction=True)  # compresses on commit
def test_buffer_read_after_activation_is_constant(users: Users, count_queries: Any) -> None:
    client = client_for(users.owner)
    slot = fill(users.owner, 2000)
    client.post(f"/api/slots/{slot.pk}/compress/")
    with count_queries() as counter:
        body = client.get(f"/api/slots/{slot.pk}/buffer/").json()
    assert len(body["messages"]) < 10 and counter.count <= 6


def test_a_post_checks_its_permission_in_one_statement(users: Users, count_queries: Any) -> None:
    """Django's ModelBackend loads every permission of the user and of their groups (two
    queries) to test the one a post needs; the post asks for that one."""
    body = {"session_id": "s1", "agent_id": "a1", "messages": [one("user", "q")]}
    client = client_for(users.owner)
    with count_queries() as counter:
        assert post(client, body).status_code == 201
    checks = [sql for sql in counter.statements if "auth_permission" in sql]
    assert len(checks) == 1, checks

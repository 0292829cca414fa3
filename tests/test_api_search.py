"""GET /api/search/ and ?q= on a slot's messages."""

from __future__ import annotations

from typing import Any

import pytest

from squad_memory.models import Slot
from tests import search_support
from tests.api_support import Users, client_for, fill, make_user
from tests.conftest import extra
from tests.search_support import (
    long_histories,
    messages_locked,
    millions_planned,
    one_big_slot,
    plans_of_searches,
)

extra("rest_framework", "api")  # every test here talks to the REST API


pytest_plugins = ["tests.api_fixtures"]
pytestmark = [pytest.mark.django_db, pytest.mark.prepared]


def say(user: Any, session: str, agent: str, *texts: str) -> None:
    search_support.say(str(user.pk), session, agent, *texts)


def test_search_finds_own_messages_newest_first_with_excerpts(users: Users) -> None:
    say(users.owner, "s1", "a1", "where is the <needle>?", "no idea")
    say(users.owner, "s2", "a2", "found the needle", "great")
    say(users.other, "s1", "a1", "their needle")  # another user, same ids
    response = client_for(users.owner).get("/api/search/?q=needle")
    assert response.status_code == 200
    hits = response.json()["results"]
    assert [(h["session_id"], h["seq"], h["role"]) for h in hits] == [
        ("s2", 1, "user"),
        ("s1", 1, "user"),
    ]
    assert hits[1]["excerpt"] == "where is the &lt;<mark>needle</mark>&gt;?"
    assert {"slot", "agent_id", "timestamp"} <= set(hits[0])


def test_search_is_cursor_paginated(users: Users) -> None:
    say(users.owner, "s1", "a1", *[f"item {i}" for i in range(5)])
    client = client_for(users.owner)
    seen: list[int] = []
    url: str | None = "/api/search/?q=item&page_size=2"
    while url:
        body = client.get(url).json()
        seen += [h["seq"] for h in body["results"]]
        url = body["next"]
    assert seen == [5, 4, 3, 2, 1]


def test_staff_may_search_another_user(users: Users) -> None:
    say(users.other, "s1", "a1", "secret plan")
    path = f"/api/search/?q=secret&user_id={users.other.pk}"
    assert client_for(users.owner).get(path).status_code == 403
    assert client_for(users.owner).get("/api/search/?q=secret").json()["results"] == []
    assert len(client_for(users.staff).get(path).json()["results"]) == 1


def test_search_validates_the_query(users: Users) -> None:
    client = client_for(users.owner)
    assert client.get("/api/search/").status_code == 400
    assert client.get("/api/search/?q=").status_code == 400
    assert client.get("/api/search/?q=a%00b").status_code == 400
    assert client.get("/api/search/?q=" + "x" * 201).status_code == 400
    assert client_for(None).get("/api/search/?q=x").status_code == 401


def test_q_filters_one_slots_messages(users: Users) -> None:
    slot = fill(users.owner, 6)  # m0..m5
    say(users.owner, "s1", "a1", "apple pie", "apple tart")
    client = client_for(users.owner)
    body = client.get(f"/api/slots/{slot.pk}/messages/?q=apple&ordering=-seq").json()
    assert [m["seq"] for m in body["results"]] == [8, 7]
    assert len(client.get(f"/api/slots/{slot.pk}/messages/").json()["results"]) == 8
    assert client.get(f"/api/slots/{slot.pk}/messages/?q=a%01").status_code == 400


@pytest.mark.parametrize(
    ("perms", "expected"), [((), 403), (("view_slot",), 403), (("view_message",), 200)]
)
def test_searching_another_user_needs_view_message(
    users: Users, perms: tuple[str, ...], expected: int
) -> None:
    say(users.other, "s1", "a1", "secret plan")
    member = make_user("member", staff=True, perms=perms)
    response = client_for(member).get(f"/api/search/?q=secret&user_id={users.other.pk}")
    assert response.status_code == expected
    if expected == 403:
        assert "squad_memory.view_message" in response.json()["detail"]
        assert "secret" not in response.content.decode()


def test_staff_with_view_message_search_everyone_as_they_list_every_slot(users: Users) -> None:
    say(users.owner, "s1", "a1", "shared word from owner")
    say(users.other, "s1", "a1", "shared word from other")
    found = client_for(users.staff).get("/api/search/?q=shared").json()["results"]
    slots = {s["id"] for s in client_for(users.staff).get("/api/slots/").json()["results"]}
    assert {hit["slot"] for hit in found} == slots and len(found) == 2
    viewer = make_user("viewer", staff=True, perms=("view_slot",))
    assert client_for(viewer).get("/api/search/?q=shared").json()["results"] == []


def test_search_has_its_own_rate(users: Users, rates: Any) -> None:
    rates(user="100/minute", squad_memory_search="2/minute")  # the documented scope
    client = client_for(users.owner)
    assert [client.get("/api/search/?q=x").status_code for _ in range(2)] == [200, 200]
    assert client.get("/api/search/?q=x").status_code == 429
    assert client.get("/api/slots/").status_code == 200


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)  # another connection locks the table the test wrote
def test_a_slow_search_is_stopped_after_search_timeout(users: Users, settings: Any) -> None:
    """A search waiting on the message table (locked by another session, as a long
    migration or a bulk delete would) is cancelled by SEARCH_TIMEOUT, not left waiting."""
    say(users.owner, "s1", "a1", "needle in a haystack")
    settings.SQUAD_MEMORY = {**settings.SQUAD_MEMORY, "SEARCH_TIMEOUT": 0.5}
    with messages_locked():
        response = client_for(users.owner).get("/api/search/?q=needle")
    # 503, not the results the search finds once the timer releases the lock (after 10 s).
    assert response.status_code == 503, response.content
    assert "0.5 seconds" in response.json()["detail"] and int(response["Retry-After"]) > 0
    assert len(client_for(users.owner).get("/api/search/?q=needle").json()["results"]) == 1


@pytest.fixture
def long_messages(users: Users) -> Slot:
    return long_histories(str(users.owner.pk))


@pytest.mark.postgres
def test_every_search_the_api_sends_is_answered_by_the_full_text_index(
    users: Users, long_messages: Slot
) -> None:
    staff, owner = client_for(users.staff), client_for(users.owner)
    slot = long_messages
    first = owner.get("/api/search/?q=rareword&page_size=1").json()
    assert len(first["results"]) == 1 and first["next"]
    mine = f"/api/slots/{slot.pk}/messages/?q="
    requests = {
        "own, absent word": lambda: owner.get("/api/search/?q=absentword"),
        "own, rare word, next page": lambda: owner.get(first["next"]),
        "one user, absent word": lambda: staff.get(
            f"/api/search/?q=absentword&user_id={slot.user_id}"
        ),
        "everyone, absent word": lambda: staff.get("/api/search/?q=absentword"),
        "everyone, two words": lambda: staff.get("/api/search/?q=rareword%20absentword"),
        "one slot, absent word": lambda: owner.get(mine + "absentword"),
        "one slot, newest first": lambda: owner.get(mine + "rareword&ordering=-seq"),
    }
    for name, request in requests.items():
        plans = plans_of_searches(request)
        assert len(plans) == 1, (name, plans)
        assert "squad_memory_message_text_fts" in plans[0], (name, plans[0])


@pytest.mark.postgres
def test_a_word_outside_the_statistics_is_found_through_the_index_at_millions_of_rows(
    users: Users,
) -> None:
    """At millions of rows (as the planner sees them) it estimates a word it has no
    statistics for at 0.5% of them, and would walk the newest messages parsing each: all of
    them, for an absent word. Every match is looked up in the full-text index first, for
    everyone's messages and for one user's, and the pages stay newest first."""
    millions_planned(str(users.owner.pk))
    staff, owner = client_for(users.staff), client_for(users.owner)
    one_user = f"&user_id={users.owner.pk}"
    requests = {
        "everyone, absent word": lambda: staff.get("/api/search/?q=absentword"),
        "everyone, rare word": lambda: staff.get("/api/search/?q=rareword"),
        "one user, absent word": lambda: staff.get("/api/search/?q=absentword" + one_user),
        "own, rare word": lambda: owner.get("/api/search/?q=rareword"),
    }
    for name, request in requests.items():
        plans = plans_of_searches(request)
        assert len(plans) == 1, (name, plans)
        assert "squad_memory_message_text_fts" in plans[0], (name, plans[0])
    first = staff.get("/api/search/?q=rareword&page_size=1").json()
    assert [(hit["session_id"], hit["seq"]) for hit in first["results"]] == [("rare", 3)]
    second = staff.get(first["next"]).json()
    assert [hit["seq"] for hit in second["results"]] == [1] and second["next"] is None
    assert [hit["seq"] for hit in staff.get(second["previous"]).json()["results"]] == [3]


@pytest.mark.postgres
def test_a_common_word_is_found_by_reading_the_newest_messages(users: Users) -> None:
    millions_planned(str(users.owner.pk))
    staff = client_for(users.staff)
    (plan,) = plans_of_searches(lambda: staff.get("/api/search/?q=common&page_size=5"))
    assert "ANY" not in plan  # not every match of a word in every message
    body = staff.get("/api/search/?q=common&page_size=5").json()
    newest = [(hit["session_id"], hit["seq"]) for hit in body["results"]]
    assert newest == [("rare", 3), ("rare", 2), ("rare", 1), ("s19", 100), ("s19", 99)]
    assert body["next"]


@pytest.mark.postgres
def test_a_common_word_in_one_big_slot_walks_the_newest_messages_not_the_whole_slot(
    users: Users,
) -> None:
    """At millions of rows the planner counts a user's few slots as a few messages, and
    would read (and parse) every message of them before sorting: all of a slot of a hundred
    thousand. The user's messages, counted by their slots, are a share of the table that
    walking the newest messages fills a page from early: the plan walks the primary key,
    reading the rows of a page, in both directions of the cursor."""
    millions_planned(str(users.owner.pk))
    one_big_slot(str(users.other.pk))
    staff = client_for(users.staff)
    search = f"/api/search/?q=common&page_size=2&user_id={users.other.pk}"
    first = staff.get(search).json()
    assert [(hit["session_id"], hit["seq"]) for hit in first["results"]] == [
        ("big", 6000),
        ("big", 5999),
    ]
    second = staff.get(first["next"]).json()
    assert [hit["seq"] for hit in second["results"]] == [5998, 5997]
    assert [hit["seq"] for hit in staff.get(second["previous"]).json()["results"]] == [6000, 5999]
    for link in (search, first["next"], second["previous"]):
        (plan,) = plans_of_searches(lambda: staff.get(link))  # noqa: B023
        assert "Index Scan Backward using squad_memory_message_pkey" in plan or (
            "Index Scan using squad_memory_message_pkey" in plan
        ), plan
        assert "Sort" not in plan and "squad_memory_message_seq" not in plan, plan
    few = f"/api/search/?q=common&page_size=2&user_id={users.owner.pk}"  # 2,003 messages
    (plan,) = plans_of_searches(lambda: staff.get(few))
    assert "ANY" not in plan  # the planner's: parsing a few thousand beats walking millions

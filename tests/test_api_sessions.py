"""GET /api/sessions/: a user's sessions for a chat sidebar, from one request."""

from __future__ import annotations

import json
import re
from base64 import b64encode
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from squad_memory.models import Slot
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


def _slots(user_id: str, sessions: int, agents: int = 1, at: datetime | None = None) -> None:
    """``sessions`` sessions of ``user_id`` with ``agents`` empty slots each, made at once;
    with ``at``, every slot's last activity is that one moment."""
    made = Slot.objects.bulk_create(
        Slot(user_id=user_id, session_id=f"s{s:04}", agent_id=f"a{a}")
        for s in range(sessions)
        for a in range(agents)
    )
    if at is not None:
        Slot.objects.filter(pk__in=[slot.pk for slot in made]).update(updated_at=at)


def _walk(client: Any, link: str, key: str = "next") -> list[list[str]]:
    """The session ids of each page from ``link`` on, following ``key`` links."""
    pages = []
    while link:
        body = client.get(link).json()
        pages.append([s["session_id"] for s in body["results"]])
        link = body[key]
    return pages


def test_sessions_sharing_a_last_activity_are_each_listed_once(users: Users) -> None:
    """130 sessions (some of two agents) active at the same moment, 7 a page: every session
    once, forwards and backwards (grouped by time alone, pages skipped one, repeated one)."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    _slots(str(users.owner.pk), 100, at=at)
    Slot.objects.bulk_create(  # 30 of them with a second agent
        Slot(user_id=str(users.owner.pk), session_id=f"s{s:04}", agent_id="b") for s in range(30)
    )
    Slot.objects.bulk_create(
        Slot(user_id=str(users.owner.pk), session_id=f"s{s:04}", agent_id="a0")
        for s in range(100, 130)
    )
    Slot.objects.update(updated_at=at)
    client = client_for(users.owner)

    pages = _walk(client, "/api/sessions/?page_size=7")

    listed = [session for page in pages for session in page]
    assert sorted(listed) == [f"s{s:04}" for s in range(130)]
    assert [len(page) for page in pages] == [7] * 18 + [4]
    last = client.get("/api/sessions/?page_size=7").json()
    while last["next"]:
        last = client.get(last["next"]).json()
    backwards = _walk(client, last["previous"], key="previous")
    assert backwards == pages[-2::-1]  # the same pages, the other way


def test_a_session_that_moves_while_a_client_pages_is_not_listed_again(users: Users) -> None:
    """A new message moves its session to the front: a client paging on does not see it
    again (seen before) or at all (not reached yet); page 1 shows it first."""
    client = client_for(users.owner)
    for session in range(6):
        fill(users.owner, 2, session=f"s{session}")
    first = _sessions(client, page_size=2)
    assert [s["session_id"] for s in first["results"]] == ["s5", "s4"]
    post(client, {"session_id": "s5", "agent_id": "a1", "message": one("user", "seen")})
    post(client, {"session_id": "s0", "agent_id": "a1", "message": one("user", "not yet")})

    assert _walk(client, first["next"]) == [["s3", "s2"], ["s1"]]
    assert [s["session_id"] for s in _sessions(client)["results"]] == [
        "s0", "s5", "s4", "s3", "s2", "s1",
    ]  # fmt: skip


def _cursor(**tokens: str) -> str:
    return b64encode(urlencode(tokens).encode()).decode()


@pytest.mark.parametrize(
    "position",
    [
        "2024-02-30T00:00:00",  # an impossible date (a 500 once)
        "2024-02-30T00:00:00+00:00 1",
        "2024-01-01T00:00:00 1",  # no offset: not one this API writes
        "2024-01-01T00:00:00+00:00",  # no id
        "2024-01-01T00:00:00+00:00 x",
        "2024-01-01T00:00:00+00:00 99999999999999999999",
        "0001-01-01T00:00:00+14:00 1",  # before year 1 in UTC
        "9999-12-31T23:59:59-14:00 1",  # after year 9999 in UTC
        "",
        "not a date 1",
    ],
)
def test_a_crafted_cursor_is_not_found(users: Users, position: str) -> None:
    client = client_for(users.owner)
    for reverse in ("0", "1"):
        cursor = _cursor(p=position, r=reverse)
        assert client.get("/api/sessions/", {"cursor": cursor}).status_code == 404, position


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    when=st.one_of(
        st.text(max_size=40),
        st.datetimes(timezones=st.timezones()).map(lambda moment: moment.isoformat()),
        st.from_regex(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(:[0-9]{2})?Z?\Z"),
    ),
    pk=st.one_of(st.integers(-(2**70), 2**70).map(str), st.text(max_size=5)),
    reverse=st.sampled_from(["0", "1", "2"]),
)
def test_any_cursor_position_is_a_page_or_not_found(
    users: Users, when: str, pk: str, reverse: str
) -> None:
    position = f"{when} {pk}"
    try:
        cursor = _cursor(p=position, r=reverse)
    except UnicodeEncodeError:
        cursor = b64encode(urlencode({"p": position}).encode("utf-8")).decode()
    response = client_for(users.owner).get("/api/sessions/", {"cursor": cursor})
    assert response.status_code in (200, 404), (position, response.content[:200])


def test_a_page_of_sessions_reads_no_grouping_of_the_slots(
    users: Users, count_queries: Any
) -> None:
    """The page is found by walking slots newest first, not by grouping every slot; the
    counts come from the page's slots."""
    fill(users.owner, 4, session="one", agent="a")
    fill(users.owner, 2, session="one", agent="b")
    for staff in (False, True):
        client = client_for(users.staff if staff else users.owner)
        with CaptureQueriesContext(connection) as captured:
            (session,) = _sessions(client, user_id=str(users.owner.pk))["results"]
        assert len(captured) == (5 if staff else 3)  # staff: their permissions too
        assert not any("GROUP BY" in query["sql"].upper() for query in captured)
        assert session["message_count"] == 6
        assert [a["message_count"] for a in session["agents"]] == [2, 4]


def _page_plans(client: Any, path: str) -> list[dict[str, Any]]:
    """The plan (EXPLAIN ANALYZE, JSON) of the statement that reads a page of sessions."""
    plans: list[dict[str, Any]] = []

    def explain(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        page = f'FROM "{Slot._meta.db_table}"' in sql and re.search(r"LIMIT \d+$", sql)
        if page and not sql.startswith("EXPLAIN"):
            context["cursor"].execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
            (plan,) = context["cursor"].fetchone()[0]
            plans.append(plan["Plan"])
        return execute(sql, params, many, context)

    with connection.execute_wrapper(explain):
        response = client.get(path)
    assert response.status_code == 200, response.content[:300]
    assert len(plans) == 1
    return plans


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(child for plan in node.get("Plans", []) for child in _nodes(plan))]


@pytest.mark.postgres
@pytest.mark.parametrize("staff", [False, True])
def test_a_page_of_sessions_reads_its_slots_through_an_index(users: Users, staff: bool) -> None:
    """On PostgreSQL, 4,000 slots: a page of 20 sessions (the first, and one deep in the list)
    walks an index and touches a few dozen slot rows, with no aggregate of them all."""
    owner = str(users.owner.pk)
    _slots(owner, 150, agents=2)  # a user's few sessions among every user's, as users are
    for other in range(10):
        _slots(f"user{other}", 370)
    with connection.cursor() as cursor:  # planned as 60,000 slots (rolled back with the test)
        cursor.execute(f"ANALYZE {Slot._meta.db_table}")
        cursor.execute(
            "UPDATE pg_class SET reltuples = 60000, relpages = 15 * pg_relation_size(oid) / "
            "current_setting('block_size')::int WHERE oid = %s::regclass",
            [Slot._meta.db_table],
        )
    client = client_for(users.staff if staff else users.owner)
    path = "/api/sessions/?page_size=20" + ("" if staff else f"&user_id={owner}")
    deep = _page_plans(client, path)  # the first page's plan, then a later page's
    for _ in range(5):
        path = client.get(path).json()["next"]
    deep += _page_plans(client, path)

    for plan in deep:
        nodes = _nodes(plan)
        assert plan["Node Type"] == "Limit"
        assert not [n for n in nodes if n["Node Type"] in ("Aggregate", "Seq Scan")]
        for sort in (n for n in nodes if n["Node Type"] == "Sort"):  # a top-N of the walk's rows
            assert sum(c["Actual Rows"] * c["Actual Loops"] for c in sort["Plans"]) < 300
        slot_rows = sum(
            (n["Actual Rows"] + n.get("Rows Removed by Filter", 0)) * n["Actual Loops"]
            for n in nodes
            if n.get("Relation Name") == Slot._meta.db_table
        )
        assert slot_rows < 500, json.dumps(plan)[:2000]  # the walk and its probes, not the 4,000


def _history(client: Any, path: str) -> list[list[str]]:
    """The texts of each page of a session's history from ``path`` on, by next links."""
    pages = []
    while path:
        response = client.get(path)
        assert response.status_code == 200, response.content[:300]
        body = response.json()
        pages.append([m["content"][0]["text"] for m in body["messages"]])
        path = body["next"]
    return pages


def test_a_sessions_history_pages_newest_first(users: Users) -> None:
    client = client_for(users.owner)
    for turn in range(7):
        agent = {"session_id": "s", "agent_id": "tech" if turn % 2 else "travel"}
        post(client, {**agent, "message": one("user", f"q{turn}")})
        post(client, {**agent, "message": one("assistant", f"a{turn}")})
    (whole,) = _history(client, "/api/sessions/s/history/?page_size=500")
    assert len(whole) == 14 and whole[:2] == ["q0", "[travel] a0"]

    pages = _history(client, "/api/sessions/s/history/?page_size=4")

    assert [len(page) for page in pages] == [4, 4, 4, 2]
    assert pages[0] == ["q5", "[tech] a5", "q6", "[travel] a6"]
    assert [text for page in reversed(pages) for text in page] == whole
    first = client.get("/api/sessions/s/history/").json()  # 50 a page by default
    assert len(first["messages"]) == 14 and first["next"] is None


@pytest.mark.parametrize(
    "position",
    ["", "x", "1", "1.", "1.2 ", "1.-2", "1.2.3", "1.2,3.4", "1.99999999999999999999", "é.1"],
)
def test_a_crafted_history_cursor_is_not_found(users: Users, position: str) -> None:
    client = client_for(users.owner)
    fill(users.owner, 4, session="s")
    cursor = b64encode(urlencode({"p": position}).encode()).decode()
    response = client.get("/api/sessions/s/history/", {"cursor": cursor})
    assert response.status_code == 404, position


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    position=st.one_of(
        st.text(max_size=30),
        st.lists(st.tuples(st.integers(-5, 2**64), st.integers(-5, 2**64)), max_size=4).map(
            lambda pairs: " ".join(f"{a}.{b}" for a, b in pairs)
        ),
    ),
    reverse=st.sampled_from(["0", "1"]),
)
def test_any_history_cursor_is_a_page_or_not_found(
    users: Users, position: str, reverse: str
) -> None:
    client = client_for(users.owner)
    fill(users.owner, 4, session="s")
    cursor = b64encode(urlencode({"p": position, "r": reverse}).encode()).decode()
    response = client.get("/api/sessions/s/history/", {"cursor": cursor})
    assert response.status_code in (200, 404), (position, response.content[:200])
    if response.status_code == 200:
        assert len(response.json()["messages"]) <= 50  # a page

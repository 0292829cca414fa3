"""The slot page's search box and the slot list's search over message text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.views.main import SEARCH_VAR
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from squad_memory.admin.slots import SlotAdmin
from squad_memory.models import Slot
from squad_memory.search import TextMatch
from tests.search_support import long_histories, millions_planned, plans_of_searches

pytestmark = pytest.mark.django_db


def slot_with(user: str, *texts: str) -> Slot:
    batch = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": [{"text": t}]}
        for i, t in enumerate(texts)
    ]
    return Slot.objects.append((user, "s", "a"), batch).slot


def test_slot_page_search_lists_hits_that_jump_to_the_message(admin_client: Client) -> None:
    filler = [f"filler {i}" for i in range(150)]
    slot = slot_with("u", "the <b>needle</b> here", *filler, "another needle")
    url = reverse("admin:squad_memory_slot_change", args=[slot.pk])
    page = admin_client.get(url, {"q": "needle"}).content.decode()
    assert 'href="?seq=1&amp;q=needle#m-1"' in page
    assert 'href="?seq=152&amp;q=needle#m-152"' in page
    assert "the &lt;b&gt;<mark>needle</mark>&lt;/b&gt; here" in page
    assert "<b>needle</b>" not in page
    jumped = admin_client.get(url, {"seq": 152, "q": "needle"}).content.decode()
    assert 'id="m-152"' in jumped  # the page holding the hit
    assert "No message matches." in admin_client.get(url, {"q": "absent"}).content.decode()


def test_slot_list_searches_message_text(admin_client: Client) -> None:
    found = slot_with("alice", "talk about volcanoes")
    slot_with("bob", "talk about rivers")
    by_id = slot_with("volcanoes-fan", "hello")
    page = admin_client.get(reverse("admin:squad_memory_slot_changelist"), {"q": "volcanoes"})
    assert set(page.context["cl"].result_list) == {found, by_id}


def test_slot_list_finds_the_slots_searched_by_text_once(admin_client: Client) -> None:
    """The slots whose messages match are found by one statement, whatever their number;
    the list's count and page read slots by id, and there is no count of every slot and
    no date hierarchy (each would have run the text match again)."""
    changelist = reverse("admin:squad_memory_slot_changelist")

    def statements(matching: int) -> list[str]:
        for i in range(matching):
            slot_with(f"user-{matching}-{i}", "talk about volcanoes")
        with CaptureQueriesContext(connection) as queries:
            page = admin_client.get(changelist, {"q": "volcanoes"})
        assert page.context["cl"].result_count == Slot.objects.count()
        return [query["sql"] for query in queries]

    few, more = statements(2), statements(60)  # 62 found: two pages
    assert len(few) == len(more)
    read_messages = [sql for sql in more if '"squad_memory_message"' in sql]
    assert len([sql for sql in read_messages if not sql.startswith("EXPLAIN")]) == 1
    assert len([sql for sql in more if "COUNT(" in sql]) == 1  # the page's, of the slots found
    assert 'MIN("squad_memory_slot"."updated_at")' not in "\n".join(more)  # date hierarchy


def test_slot_list_search_by_text_is_bounded_and_says_so(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(SlotAdmin, "text_search_slot_limit", 2)
    slots = [slot_with(f"user-{i}", "talk about volcanoes") for i in range(4)]
    page = admin_client.get(reverse("admin:squad_memory_slot_changelist"), {"q": "volcanoes"})
    assert set(page.context["cl"].result_list) == set(slots[2:])  # the newest found
    shown = [str(message) for message in get_messages(page.wsgi_request)]
    assert shown == [
        "More than 2 slots have messages matching the search; the list shows 2 of them "
        "(the newest found). Search for rarer words to narrow it."
    ]


@pytest.mark.parametrize(
    ("perms", "finds"), [(("view_slot",), False), (("view_slot", "view_message"), True)]
)
def test_slot_list_searches_message_text_only_with_view_message(
    client: Client, perms: tuple[str, ...], finds: bool
) -> None:
    found = slot_with("alice", "talk about volcanoes")
    staff = User.objects.create_user("viewer", password="pw", is_staff=True)
    staff.user_permissions.set(Permission.objects.filter(codename__in=perms))
    client.force_login(staff)
    page = client.get(reverse("admin:squad_memory_slot_changelist"), {"q": "volcanoes"})
    assert page.status_code == 200
    assert (found in page.context["cl"].result_list) == finds


@pytest.mark.postgres
def test_every_search_the_admin_sends_is_answered_by_the_full_text_index(
    admin_client: Client,
) -> None:
    """The slot list's and the slot page's searches run as the API's do: with the planner
    setting that makes the full-text index the plan (a long message's words take
    milliseconds to parse, so a plan that parses every row takes seconds)."""
    slot = long_histories("u-long")
    changelist = reverse("admin:squad_memory_slot_changelist")
    page = reverse("admin:squad_memory_slot_change", args=[slot.pk])
    requests = {
        "slot list, absent word": lambda: admin_client.get(changelist, {"q": "absentword"}),
        "slot list, rare word": lambda: admin_client.get(changelist, {"q": "rareword"}),
        "slot page, absent word": lambda: admin_client.get(page, {"q": "absentword"}),
    }
    for name, request in requests.items():
        plans = plans_of_searches(request)
        assert plans, name
        for plan in plans:
            assert "squad_memory_message_text_fts" in plan, (name, plan)


@pytest.mark.postgres
def test_slot_list_finds_a_word_outside_the_statistics_through_the_index_at_millions(
    admin_client: Client,
) -> None:
    millions_planned("u-many")
    changelist = reverse("admin:squad_memory_slot_changelist")
    for word in ("absentword", "rareword"):
        plans = plans_of_searches(lambda q=word: admin_client.get(changelist, {"q": q}))
        assert len(plans) == 1 and "squad_memory_message_text_fts" in plans[0], plans
    page = admin_client.get(changelist, {"q": "rareword"})
    assert [slot.session_id for slot in page.context["cl"].result_list] == ["rare"]


@pytest.fixture
def slow_text_search(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    """Every statement matching message text takes 2 s; ``SEARCH_TIMEOUT`` is 0.5 s."""
    settings.SQUAD_MEMORY = {**settings.SQUAD_MEMORY, "SEARCH_TIMEOUT": 0.5}
    as_sql = TextMatch.as_sql

    def slow(self: TextMatch, *args: Any, **kwargs: Any) -> Any:
        sql, params = as_sql(self, *args, **kwargs)
        return f"({sql} AND (SELECT pg_sleep(2)) IS NOT NULL)", params

    monkeypatch.setattr(TextMatch, "as_sql", slow)


@pytest.mark.postgres
@pytest.mark.usefixtures("slow_text_search")
def test_a_slow_search_of_the_slot_list_is_stopped_and_lists_the_ids_found(
    admin_client: Client,
) -> None:
    by_id = slot_with("needle-fan", "hello")
    slot_with("alice", "a needle here")
    page = admin_client.get(reverse("admin:squad_memory_slot_changelist"), {"q": "needle"})
    assert page.status_code == 200
    assert list(page.context["cl"].result_list) == [by_id]
    shown = [str(message) for message in get_messages(page.wsgi_request)]
    assert shown == [
        "The search took longer than 0.5 seconds and was stopped; search for "
        "rarer words, or retry later. The list shows the slots whose ids match."
    ]


@pytest.mark.postgres
@pytest.mark.usefixtures("slow_text_search")
def test_a_slow_search_of_the_slot_page_is_stopped_and_says_so(admin_client: Client) -> None:
    slot = slot_with("alice", "a needle here")
    page = admin_client.get(
        reverse("admin:squad_memory_slot_change", args=[slot.pk]), {"q": "needle"}
    )
    assert page.status_code == 200
    text = page.content.decode()
    assert "took longer than 0.5 seconds and was stopped" in text
    assert "go to message #1" not in text and "No message matches." not in text
    assert 'id="m-1"' in text  # the rest of the page is there


def export_from_search(client: Client, term: str, selected: Slot) -> Any:
    """The action "Export as JSON Lines", confirmed, for every slot of the list searched
    for ``term``."""
    data = {
        "action": "export_selected",
        ACTION_CHECKBOX_NAME: [selected.pk],
        "select_across": "1",
        "post": "yes",
    }
    changelist = reverse("admin:squad_memory_slot_changelist")
    return client.post(f"{changelist}?{SEARCH_VAR}={term}", data)


def exported_users(response: Any) -> list[str]:
    """The users of the slots an export holds (each slot's state line names its slot)."""
    lines = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    return sorted(line["slot"]["user_id"] for line in lines if "slot" in line)


def test_an_action_on_a_list_searched_by_text_acts_on_the_slots_found(
    admin_client: Client,
) -> None:
    found = slot_with("alice", "talk about volcanoes")
    slot_with("bob", "talk about rivers")
    response = export_from_search(admin_client, "volcanoes", found)
    assert response.status_code == 200
    assert exported_users(response) == ["alice"]


@pytest.mark.postgres
def test_an_action_on_a_list_searched_by_text_finds_them_through_the_index(
    admin_client: Client,
) -> None:
    slot = long_histories("u-long")
    plans = plans_of_searches(lambda: export_from_search(admin_client, "absentword", slot))
    assert plans and all("squad_memory_message_text_fts" in plan for plan in plans), plans


@pytest.mark.postgres
@pytest.mark.usefixtures("slow_text_search")
def test_an_action_whose_search_is_stopped_does_nothing_and_says_so(
    admin_client: Client,
) -> None:
    found = slot_with("alice", "a needle here")
    response = export_from_search(admin_client, "needle", found)
    assert response.status_code == 302  # back to the list, nothing exported
    (message,) = get_messages(response.wsgi_request)
    assert "took longer than 0.5 seconds" in str(message) and "Nothing was done." in str(message)

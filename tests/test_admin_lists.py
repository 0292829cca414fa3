"""The admin's lists at scale: bounded counts, bounded pages, filters without a DISTINCT
over the table (squad_memory.admin.lists)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from squad_memory.admin.lists import BoundedPaginator, FirstValuesFilter, first_values
from squad_memory.models import Compression, Message, Slot
from tests.test_admin import log_compression, make_slot

pytestmark = pytest.mark.django_db

OFFSET = re.compile(r"\bOFFSET\s+(\d+)", re.I)
NOT_EMPTY_NAMESPACE = re.compile(r"NOT \(\S*namespace\S* = ''\)")


def url(name: str) -> str:
    return reverse(f"admin:squad_memory_{name}_changelist")


def statements_of(client: Client, name: str, count_queries: Any, **params: Any) -> Any:
    with count_queries() as counter:
        response = client.get(url(name), params)
    response.statements = counter.statements
    return response


def assert_bounded(statements: list[str], limit: int) -> None:
    """No DISTINCT, no count(*) without a LIMIT under it, no OFFSET past the limit."""
    for sql in statements:
        upper = sql.upper()
        assert "DISTINCT" not in upper, sql
        if "COUNT(" in upper:
            assert re.search(r"COUNT\(.*\bFROM \(SELECT .* LIMIT \d+", upper), sql
        assert all(int(n) < limit for n in OFFSET.findall(sql)), sql


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(BoundedPaginator, "limit", 5)
    return 5


@pytest.fixture
def short_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    for model in (Message, Slot, Compression):
        monkeypatch.setattr(admin.site._registry[model], "list_per_page", 2)


# -- messages ----------------------------------------------------------------------------------
def test_the_role_filter_lists_the_roles_without_a_query_and_filters(
    admin_client: Client, count_queries: Any
) -> None:
    make_slot(4)
    response = statements_of(admin_client, "message", count_queries, role="user")
    assert {m.role for m in response.context["cl"].result_list} == {"user"}
    assert len(response.context["cl"].result_list) == 2
    page = response.content.decode()
    assert 'href="?role=assistant"' in page and 'href="?role=user"' in page
    assert_bounded(response.statements, BoundedPaginator.limit)


def test_a_list_counts_at_most_the_limit_and_says_more_than(
    admin_client: Client, count_queries: Any, small_limit: int
) -> None:
    slot = make_slot(12)
    response = statements_of(admin_client, "message", count_queries, slot__id__exact=slot.pk)
    page = response.content.decode()
    assert "more than 5 messages" in " ".join(page.split())
    assert_bounded(response.statements, small_limit)
    counts = [s for s in response.statements if "COUNT(" in s.upper()]
    assert len(counts) == 1  # the filtered count only: no full count beside it
    exact = statements_of(admin_client, "message", count_queries, role="user", seq=99)
    assert "0 messages" in " ".join(exact.content.decode().split())


def test_every_count_of_a_capped_slot_list_says_more_than(
    admin_client: Client, small_limit: int
) -> None:
    for n in range(7):
        make_slot(0, user=f"u{n}")
    page = " ".join(admin_client.get(url("slot"), {"q": "u"}).content.decode().split())
    assert "more than 5 slots </p>" in page  # the pager
    assert "more than 5 results (" in page  # beside the search box
    assert "Select all (more than 5) slots" in page and "All of more than 5 selected" in page


def test_a_short_list_counts_exactly(admin_client: Client, small_limit: int) -> None:
    make_slot(4)
    page = " ".join(admin_client.get(url("message")).content.decode().split())
    assert "4 messages" in page and "more than" not in page


def test_a_page_past_the_limit_asks_to_narrow_the_list_and_reads_nothing(
    admin_client: Client, count_queries: Any, small_limit: int, short_pages: None
) -> None:
    slot = make_slot(12)
    shown = statements_of(admin_client, "message", count_queries, slot__id__exact=slot.pk, p=3)
    assert [m.seq for m in shown.context["cl"].result_list] == [5]  # the last counted row
    assert_bounded(shown.statements, small_limit)
    deep = statements_of(admin_client, "message", count_queries, slot__id__exact=slot.pk, p=4)
    assert deep.status_code == 302
    assert deep["Location"] == f"{url('message')}?slot__id__exact={slot.pk}"
    assert not [s for s in deep.statements if Message._meta.db_table in s]
    warning = [str(m) for m in get_messages(deep.wsgi_request)]
    assert warning == [
        "This list shows its first 5 messages, in 3 pages. To reach the others, narrow it "
        "with a filter or a search, or sort it the other way."
    ]
    assert "narrow it with a filter" in admin_client.get(deep["Location"]).content.decode()


def test_the_message_list_sorts_only_by_indexed_columns(
    admin_client: Client, count_queries: Any
) -> None:
    make_slot(4)

    def order_of(o: str) -> str:
        response = statements_of(admin_client, "message", count_queries, o=o)
        pages = [s for s in response.statements if "ORDER BY" in s]
        assert len(pages) == 1
        order = re.sub(r'[`"]', "", pages[0].split("ORDER BY")[1])
        return order.replace("squad_memory_message.", "")

    columns = ["conversation", "seq", "role", "preview", "time", "trimmed"]
    assert admin.site._registry[Message].list_display == columns
    assert order_of("1").startswith(" slot_id ASC, seq ASC")  # seq: not sortable
    assert order_of("2").startswith(" slot_id ASC, seq ASC")  # role: not sortable
    assert order_of("4").startswith(" timestamp ASC")
    assert order_of("-0").startswith(" slot_id DESC")
    page = admin_client.get(url("message")).content.decode()
    assert 'class="sortable column-time' in page and 'class="column-seq"' in page


# -- compression log ---------------------------------------------------------------------------
def test_the_compression_log_filters_triggers_without_a_query(
    admin_client: Client, count_queries: Any
) -> None:
    slot = make_slot(2)
    log_compression(slot, trigger="sweep")
    log_compression(slot, trigger="save", outcome="failed")
    response = statements_of(admin_client, "compression", count_queries, trigger="sweep")
    assert [c.trigger for c in response.context["cl"].result_list] == ["sweep"]
    page = response.content.decode()
    for trigger in ("save", "manual", "sweep", "celery", "tasks"):
        assert f'href="?trigger={trigger}"' in page
    assert_bounded(response.statements, BoundedPaginator.limit)
    other = admin_client.get(url("compression"), {"trigger": "custom-dispatcher"})
    assert list(other.context["cl"].result_list) == []


def test_the_compression_logs_dates_link_every_year_between_the_first_and_last(
    admin_client: Client, count_queries: Any
) -> None:
    slot = make_slot(2)
    for year in (2022, 2025):
        at = timezone.make_aware(datetime(year, 6, 1, 12))
        log_compression(slot, started_at=at, finished_at=at)
    response = statements_of(admin_client, "compression", count_queries)
    titles = [c["title"] for c in response.context["cl"].date_links["choices"]]
    assert titles == ["2022", "2023", "2024", "2025"]
    assert 'href="?started_at__year=2023"' in response.content.decode()
    assert_bounded(response.statements, BoundedPaginator.limit)


@pytest.mark.postgres
def test_the_compression_logs_first_page_and_dates_read_the_start_index(
    admin_client: Client, count_queries: Any
) -> None:
    """Newest first through the (started_at, id) index, not a sort of the whole log; the
    drill-down's Min/Max read its two ends."""
    slots = [make_slot(0, user=f"u{n}") for n in range(20)]
    at = timezone.make_aware(datetime(2025, 6, 1, 12))
    Compression.objects.bulk_create(
        Compression(
            slot=slots[n % 20],
            started_at=at - timedelta(minutes=n),
            finished_at=at,
            duration_ms=2,
            from_seq=1,
            to_seq=4,
            summarizer="tests.summarize",
            outcome="applied",
        )
        for n in range(5_000)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE squad_memory_compression")
        response = statements_of(admin_client, "compression", count_queries)
        assert len(response.context["cl"].result_list) == 100
        plans = {}
        for sql in response.statements:
            if "squad_memory_compression" in sql and kind(sql) in ("page", "dates"):
                cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}")
                plans[kind(sql)] = cursor.fetchone()[0][0]["Plan"]
    assert set(plans) == {"page", "dates"}, response.statements
    for name, plan in plans.items():
        log = [n for n in nodes(plan) if n.get("Relation Name") == "squad_memory_compression"]
        assert log and all(n.get("Index Name") == "squad_memory_comp_started" for n in log), plan
        assert all(n["Node Type"] != "Sort" for n in nodes(plan)), (name, plan)
    [scan] = [n for n in nodes(plans["page"]) if n.get("Index Name") == "squad_memory_comp_started"]
    assert scan["Scan Direction"] == "Backward", plans["page"]


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A plan's nodes (EXPLAIN's JSON), depth first."""
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


# -- slots -------------------------------------------------------------------------------------
def test_the_slot_list_filters_by_agent_and_dates_without_a_distinct(
    admin_client: Client, count_queries: Any
) -> None:
    for agent in ("planner", "coder", "coder", "writer"):
        make_slot(2, agent=agent, user=f"{agent}-{Slot.objects.count()}")
    response = statements_of(admin_client, "slot", count_queries, agent_id="coder")
    assert {s.agent_id for s in response.context["cl"].result_list} == {"coder"}
    page = response.content.decode()
    for agent in ("coder", "planner", "writer"):
        assert f'href="?agent_id={agent}"' in page
    assert_bounded(response.statements, BoundedPaginator.limit)
    assert not [s for s in response.statements if NOT_EMPTY_NAMESPACE.search(s)]  # a scan
    this_year = timezone.localtime().year
    assert response.context["cl"].date_links["choices"]  # the months, or days, of this year
    dated = statements_of(admin_client, "slot", count_queries, updated_at__year=this_year)
    assert len(dated.context["cl"].result_list) == 4
    assert_bounded(dated.statements, BoundedPaginator.limit)


def test_the_slot_lists_dates_drill_down_from_years_to_days(admin_client: Client) -> None:
    for n, at in enumerate([datetime(2023, 3, 30, 12), datetime(2024, 5, 2, 12)]):
        slot = make_slot(2, user=f"u{n}")
        Slot.objects.filter(pk=slot.pk).update(updated_at=timezone.make_aware(at))

    def titles(**params: Any) -> list[str]:
        links = admin_client.get(url("slot"), params).context["cl"].date_links
        return [c["title"] for c in links["choices"]]

    assert titles() == ["2023", "2024"]
    assert titles(updated_at__year=2023) == ["March 2023"]
    assert titles(updated_at__year=2023, updated_at__month=3) == ["March 30"]
    assert titles(updated_at__year=2022) == []


def test_the_agent_filter_lists_the_first_agents_then_points_to_the_search(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(FirstValuesFilter, "limit", 2)
    for n, agent in enumerate(["a1", "a2", "a3", "a4"]):
        make_slot(2, agent=agent, user=f"u{n}")
    page = admin_client.get(url("slot"), {"agent_id": "a4"}).content.decode()
    assert 'href="?agent_id=a1"' in page and 'href="?agent_id=a2"' in page
    assert 'href="?agent_id=a3"' not in page
    assert re.search(r'class="selected">\s*<a href="\?agent_id=a4">a4<', page)  # chosen
    assert "more (search for the others)" in page


@pytest.mark.parametrize("mysql", [False, True])
def test_first_values_reads_the_distinct_values_in_order_with_the_lists_filters(
    mysql: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if mysql:  # MySQL's own DISTINCT, not the recursive query it refuses
        monkeypatch.setattr(connection, "vendor", "mysql")
        monkeypatch.setattr(connection, "mysql_is_mariadb", False, raising=False)
    for n, agent in enumerate(["b", "a", "b", "c", "a", ""]):
        make_slot(0, agent=agent, user=f"u{n}")
    with CaptureQueriesContext(connection) as captured:
        first_values(Slot.objects.all(), "agent_id", 10)
    assert ("RECURSIVE" in captured[0]["sql"]) is not mysql
    assert first_values(Slot.objects.all(), "agent_id", 10) == ["", "a", "b", "c"]
    assert first_values(Slot.objects.all(), "agent_id", 2) == ["", "a"]
    assert first_values(Slot.objects.exclude(agent_id="a"), "agent_id", 10) == ["", "b", "c"]
    assert first_values(Slot.objects.filter(pk=-1), "agent_id", 10) == []
    assert first_values(Slot.objects.none(), "agent_id", 10) == []


@pytest.mark.postgres
def test_first_values_probes_the_index_once_a_value() -> None:
    for n in range(300):
        make_slot(0, agent=f"agent-{n % 3}", user=f"u{n}")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE squad_memory_slot")
        with CaptureQueriesContext(connection) as captured:
            assert first_values(Slot.objects.all(), "agent_id", 10) == [
                "agent-0",
                "agent-1",
                "agent-2",
            ]
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {captured[0]['sql']}")
        plan = json.dumps(cursor.fetchone()[0])
    scans = re.findall(r'"Index Name": "squad_memory_slot_agent"', plan)
    assert len(scans) == 2 and "Seq Scan" not in plan, plan  # the first value, then the next
    assert '"Actual Loops": 3' in plan, plan  # one probe a value found


def test_the_lists_statements_do_not_grow_with_their_agents_or_pages(
    admin_client: Client, count_queries: Any
) -> None:
    def count() -> int:
        return len(statements_of(admin_client, "slot", count_queries).statements)

    make_slot(2, agent="a0", user="u0")
    few = count()
    for n in range(1, 40):
        make_slot(0, agent=f"a{n}", user=f"u{n}")
    assert count() == few


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("message", ["count", "page"]),
        ("compression", ["count", "page", "dates"]),
        ("slot", ["namespace", "agents", "count", "page", "dates"]),
    ],
)
def test_each_list_reads_its_page_in_a_fixed_set_of_bounded_statements(
    admin_client: Client, count_queries: Any, name: str, expected: list[str]
) -> None:
    slot = make_slot(4, agent="planner")
    log_compression(slot)
    response = statements_of(admin_client, name, count_queries)
    ours = [s for s in response.statements if "squad_memory_" in s]
    assert [kind(s) for s in ours] == expected, ours
    assert_bounded(ours, BoundedPaginator.limit)


def kind(sql: str) -> str:
    """What a list's statement is for, by its shape."""
    upper = re.sub(r'[`"]', "", sql.upper())
    shapes = {
        "agents": "WITH RECURSIVE",
        "count": "SELECT COUNT(*) FROM (SELECT",
        "dates": "SELECT MIN(",
        "namespace": "SELECT 1 AS A FROM",
    }
    found = [name for name, start in shapes.items() if upper.startswith(start)]
    return found[0] if found else "page" if " ORDER BY " in upper else sql

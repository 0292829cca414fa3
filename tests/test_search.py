"""Plain text extracted at save, matching on PostgreSQL (full text) and elsewhere, excerpts."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction

import squad_memory
from squad_memory import search
from squad_memory.messages import extract_text
from squad_memory.models import Message, Slot
from squad_memory.search import excerpt, matching, searching, terms
from tests.conftest import msg
from tests.search_support import millions_planned

pytestmark = [pytest.mark.django_db, pytest.mark.prepared]

TOOL_USE = {"toolUse": {"toolUseId": "t1", "name": "weather", "input": {"city": "Zürich", "n": 3}}}
TOOL_RESULT = {
    "toolResult": {"toolUseId": "t1", "content": [{"text": "sunny"}, {"json": {"temp": 21}}]}
}


def test_extract_text_reads_text_and_tool_blocks() -> None:
    assert extract_text([{"text": "hello"}, {"text": "world"}]) == "hello\nworld"
    assert extract_text([TOOL_USE]) == "weather Zürich 3"
    assert extract_text([TOOL_RESULT]) == "sunny 21"
    anthropic = {"type": "tool_use", "id": "x", "name": "calc", "input": {"expr": "1+1"}}
    assert extract_text([anthropic]) == "calc 1+1"
    result = {"type": "tool_result", "tool_use_id": "x", "content": "2", "is_error": False}
    assert extract_text([result]) == "2"
    assert extract_text([{"image": {"format": "png"}}]) == ""
    assert extract_text("not a list") == "not a list"


def test_saves_store_the_text_once() -> None:
    storage = squad_memory.get_storage()
    storage.save_chat_message_sync("u", "s", "a", msg("user", "find the needle"))
    storage.save_chat_messages_sync(
        "u", "s", "a", [{"role": "assistant", "content": [TOOL_USE]}, msg("user", "more")]
    )
    assert list(Message.objects.order_by("seq").values_list("text", flat=True)) == [
        "find the needle",
        "weather Zürich 3",
        "more",
    ]


def store(*texts: str, user: str = "u") -> list[Message]:
    batch: list[Any] = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": [{"text": t}]}
        for i, t in enumerate(texts)
    ]
    slot = Slot.objects.append((user, "s", "a"), batch).slot
    return list(Message.objects.filter(slot=slot).order_by("seq"))


def found(query: str) -> list[str]:
    return list(matching(Message.objects.order_by("id"), query).values_list("text", flat=True))


def test_matching_finds_every_word_case_insensitively() -> None:
    store("The Quick brown fox", "a lazy dog", "quick dog", "nothing here")
    assert found("quick") == ["The Quick brown fox", "quick dog"]
    assert found("QUICK dog") == ["quick dog"]
    assert found("cat") == []
    assert found("   ") == []


@pytest.mark.postgres
def test_postgres_uses_full_text_words_and_the_gin_index() -> None:
    store("deploy the service", "redeployment", "undeployed", "deploy now")
    assert found("deploy") == ["deploy the service", "deploy now"]  # words, not substrings
    assert found('"deploy now"') == ["deploy now"]
    assert found("deploy -now") == ["deploy the service"]
    with connection.cursor() as cursor:
        # Only bitmap scans left, which need a condition an index answers: the full-text
        # index is then the plan if the query matches its expression, whatever statistics
        # other tests left behind (ANALYZE's row counts outlive a rolled-back test).
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_indexscan = off")
        sql, params = matching(Message.objects.all(), "deploy").query.sql_with_params()
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "squad_memory_message_text_fts" in plan


def test_excerpt_escapes_and_marks_hits() -> None:
    text = "x" * 200 + " <b>Needle</b> and needle " + "y" * 200
    html = excerpt(text, "needle")
    assert html.startswith("…") and html.endswith("…")
    assert "&lt;b&gt;<mark>Needle</mark>&lt;/b&gt; and <mark>needle</mark>" in html
    assert "<b>" not in html
    assert excerpt("plain <i>", "absent") == "plain &lt;i&gt;"


def test_terms_follow_the_web_search_syntax() -> None:
    assert terms('"a phrase" or -not word') == ["a", "phrase", "word"]


def test_the_query_matches_the_indexed_expression() -> None:
    from importlib import import_module

    migration = import_module("squad_memory.migrations.0003_message_text")
    assert migration.TSVECTOR == search.TSVECTOR


@pytest.mark.postgres
def test_a_search_inside_a_transaction_leaves_its_settings_behind_it() -> None:
    """Inside a caller's transaction (the admin's slot page, ATOMIC_REQUESTS) a search is a
    savepoint; its planner setting and statement_timeout leave with it."""

    def settings() -> tuple[str, ...]:
        names = ["statement_timeout", "cpu_operator_cost", "jit", "max_parallel_workers_per_gather"]
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {', '.join(['current_setting(%s)'] * len(names))}", names)
            return tuple(cursor.fetchone())

    with transaction.atomic():
        before = settings()
        with searching(connection.alias):
            # No JIT and no parallel workers: a search's costs, raised by the planner
            # setting, would otherwise pay for both on every statement.
            assert settings() == ("5s", "1", "off", "0")
        assert settings() == before


def plan(rows: Any) -> str:
    with connection.cursor() as cursor:
        sql, params = rows.query.sql_with_params()
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.postgres
def test_a_search_across_slots_finds_a_word_outside_the_statistics_through_the_index() -> None:
    """At millions of rows the planner estimates a word it has no statistics for at 0.5% of
    them, and would walk the newest messages parsing each (all of them, for an absent
    word); search.found() looks every match up in the index first, then pages through those."""
    millions_planned("u")
    newest_first = Message.objects.filter(slot__namespace="").order_by("-id")
    with searching(connection.alias):
        assert search.is_rare(Message.objects.all(), "absentword")
        assert search.is_rare(Message.objects.all(), "rareword or absentword")
        for rows in (newest_first, newest_first.filter(slot__user_id="u")):
            for query in ("absentword", "rareword"):
                assert "squad_memory_message_text_fts" in plan(search.found(rows, query)[:51])
        hits = search.found(newest_first, "rareword").values_list("id", "slot__session_id", "seq")
        assert [hit[1:] for hit in hits] == [("rare", 3), ("rare", 1)]
        older = search.found(newest_first.filter(id__lt=hits[0][0]), "rareword")  # next page
        assert list(older.values_list("seq", flat=True)) == [1]


@pytest.mark.postgres
def test_a_common_word_is_left_to_the_planner() -> None:
    """A word the statistics know to be in most messages is found by reading the newest
    rows until a page is full: no lookup of its every match."""
    millions_planned("u")
    rows = Message.objects.order_by("-id")
    with searching(connection.alias):
        assert not search.is_rare(Message.objects.all(), "common")
        common = search.found(rows, "common")[:51]
        assert "ANY(ARRAY" not in str(common.query)
        assert "squad_memory_message_pkey" in plan(common)
        assert len(common) == 51

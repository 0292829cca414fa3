"""The one write path and the one read (``squad_memory.models.append``): the statements and
their Python twin decide the same, rows are stored as the ORM stores them, slots load as
the ORM loads them, and what signals a save sends."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.db import connection
from django.db.models.signals import post_save
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from squad_memory.models import Message, Slot, append

pytestmark = [pytest.mark.django_db, pytest.mark.prepared, pytest.mark.mariadb]

ROLES = ("user", "assistant")


def batch(first_role: str, count: int, text: str = "m") -> list[dict[str, Any]]:
    start = ROLES.index(first_role)
    return [
        {
            "role": ROLES[(start + i) % 2],
            "content": [{"text": f"{text}{i} é\u2028"}],
            "citations": None,
        }
        for i in range(count)
    ]


@pytest.fixture
def twin(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Run a block on the Python twin: no database counts as one the statements serve."""

    class Twin:
        def __enter__(self) -> None:
            monkeypatch.setattr(append, "SQL_VENDORS", ())

        def __exit__(self, *exc: object) -> None:
            monkeypatch.undo()

    return Twin()


def slot_state(key: tuple[str, str, str]) -> tuple[Any, ...]:
    s = Slot.objects.for_key(*key).get()
    return (s.last_seq, s.last_role, s.visible_from_seq, s.buffer_tokens, s.active, s.covered_seq)


def stored(key: tuple[str, str, str]) -> list[tuple[Any, ...]]:
    rows = Message.objects.filter(slot__user_id=key[0]).order_by("seq")
    return list(rows.values_list("seq", "role", "content", "citations", "text", "tokens"))


saves = st.lists(
    st.tuples(
        st.sampled_from(ROLES),
        st.integers(1, 3),
        st.booleans(),
        st.sampled_from([None, 0, 1, 2, 3, 4, 7]),
    ),
    max_size=10,
)


@pytest.mark.skipif(connection.vendor not in append.SQL_VENDORS, reason="the twin runs alone")
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=saves)
def test_the_statements_and_their_python_twin_decide_the_same(twin: Any, ops: list[Any]) -> None:
    Slot.objects.all().delete()
    sql, python = ("sql", "s", "a"), ("twin", "s", "a")
    for role, count, check, size in ops:
        kwargs: dict[str, Any] = {"check_role": check, "max_history_size": size, "view": "visible"}
        by_sql = Slot.objects.append(sql, batch(role, count), **kwargs)
        with twin:
            by_twin = Slot.objects.append(python, batch(role, count), **kwargs)
        assert by_sql.skipped == by_twin.skipped
        assert [r.seq for r in by_sql.rows] == [r.seq for r in by_twin.rows]
        assert by_sql.view() == by_twin.view()
    if ops:
        assert slot_state(sql) == slot_state(python)
        assert stored(sql) == stored(python)


@pytest.mark.skipif(connection.vendor not in append.SQL_VENDORS, reason="the twin runs alone")
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    length=st.integers(1, 12),
    trim=st.integers(0, 12),
    covered=st.integers(0, 12),
    active=st.booleans(),
    newest=st.sampled_from([None, 1, 3, 50]),
)
def test_the_read_statement_and_its_twin_read_the_same(
    twin: Any, length: int, trim: int, covered: int, active: bool, newest: int | None
) -> None:
    Slot.objects.all().delete()
    key = ("u", "s", "a")
    Slot.objects.append(key, batch("user", length))
    visible_from = min(trim, length) + 1
    Slot.objects.update(
        visible_from_seq=visible_from, active=active, covered_seq=min(covered, length)
    )
    for start in ("buffer", "visible"):
        found = Slot.objects.read(key, start=start, newest=newest)
        with twin:
            expected = Slot.objects.read(key, start=start, newest=newest)
        assert found[0] == expected[0] and found[1] == expected[1]


CONTENT = [
    {"text": "plain"},
    {"text": 'é中文\u2028\u00a0 "quoted" \\ back'},
    {"toolUse": {"name": "f", "input": {"n": 1e-7, "big": 2**53 + 1, "flag": True, "none": None}}},
]


def test_a_save_stores_json_as_the_orm_stores_it() -> None:
    saved = Slot.objects.append(("u", "s", "a"), batch("user", 1))  # creates the slot
    saved = Slot.objects.append(
        ("u", "s", "a"), [{"role": "assistant", "content": CONTENT, "citations": [{"url": "é"}]}]
    )
    orm = Message.objects.create(
        slot=saved.slot,
        seq=99,
        role="assistant",
        content=CONTENT,
        citations=[{"url": "é"}],
        timestamp=1,
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT content, citations FROM squad_memory_message WHERE id IN (%s, %s) ORDER BY seq",
            [Message.objects.get(seq=2).pk, orm.pk],
        )
        ours, theirs = cursor.fetchall()
    assert ours == theirs
    assert Message.objects.get(seq=2).content == CONTENT


@pytest.mark.parametrize("zone", ["UTC", "America/Sao_Paulo"])
@pytest.mark.parametrize("use_tz", [True, False])
def test_a_slot_read_by_the_statements_equals_the_orms(zone: str, use_tz: bool) -> None:
    with override_settings(TIME_ZONE=zone, USE_TZ=use_tz):
        key = ("u", "s", "a")
        Slot.objects.append(key, batch("user", 2))
        Slot.objects.update(summary=[{"role": "user", "content": [{"text": "é"}]}], active=True)
        Slot.objects.update(pending_since=Slot.objects.get().updated_at)
        loaded, _ = Slot.objects.read(key)
        expected = Slot.objects.get()
        assert loaded is not None
        for field in Slot._meta.concrete_fields:
            assert getattr(loaded, field.attname) == getattr(expected, field.attname), field.name
        assert isinstance(loaded.updated_at, datetime.datetime)
        assert (loaded.updated_at.tzinfo is not None) == use_tz
        Slot.objects.all().delete()


def test_creating_a_slot_sends_post_save_and_appending_sends_no_signal() -> None:
    sent: list[tuple[str, bool]] = []

    def record(sender: type[Any], instance: Any, created: bool, **kwargs: Any) -> None:
        sent.append((sender.__name__, created))

    post_save.connect(record)
    try:
        Slot.objects.append(("u", "s", "a"), batch("user", 1))
        Slot.objects.append(("u", "s", "a"), batch("assistant", 2))
        Slot.objects.append(("u", "s", "a"), batch("assistant", 1), check_role=True)
    finally:
        post_save.disconnect(record)
    assert sent == [("Slot", True)]
    assert Slot.objects.get().last_seq == 4


def test_the_save_statements_store_every_column_of_the_message_model() -> None:
    """The hand-written statements take their tables, columns and casts from the models'
    ``_meta``: a field added to ``Message`` is stored by every save path."""
    columns = [f.column for f in Message._meta.concrete_fields if f.name != "id"]
    if connection.vendor == "postgresql":  # one statement: the slot's UPDATE and the INSERT
        sql = append._save_sql("default", "postgresql", "buffer", 2)
    else:
        sql = append._insert_sql(2)
    assert all(f'"{column}"' in sql for column in columns), sql


@pytest.mark.postgres
@pytest.mark.parametrize("view", ["buffer", "visible"])
def test_reading_the_newest_rows_of_a_long_history_reads_only_those(view: str) -> None:
    """The read and the save take a slot's newest rows through the (slot, seq) index: at
    5,000 messages, a read of the newest 40 touches about 40 rows, not the whole history
    (an index on slot_id alone once let the planner read them all and sort them)."""
    for i in range(30):  # many short slots, as a site has: a few rows per slot_id, on average
        Slot.objects.append(("u", f"short-{i}", "a"), batch("user", 20))
    key = ("u", "long", "a")
    for _ in range(50):
        Slot.objects.append(key, batch("user", 100))
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Message._meta.db_table}")
    sql = append._read_sql(connection.alias, connection.vendor, view)
    with connection.cursor() as cursor:
        params = {**append._key_params(key, ""), **append._tail_params(view, 40)}
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params)
        (plan,) = cursor.fetchone()[0]

    def touched(node: dict[str, Any]) -> int:
        here = 0
        if node.get("Relation Name") == Message._meta.db_table:
            here = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
        return here + sum(touched(child) for child in node.get("Plans", []))

    assert touched(plan["Plan"]) <= 41

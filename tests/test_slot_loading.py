"""A slot row made a ``Slot`` (:func:`squad_memory.loading.load_slot`): the same values as the
ORM gives, with the last conversion of each datetime and JSON column remembered."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

from squad_memory import loading, sql
from squad_memory.models import Slot

pytestmark = pytest.mark.django_db

SUMMARY = [{"role": "user", "content": [{"text": "summary"}], "citations": None}]


def slot_row(**text: str) -> list[Any]:
    """A stored slot's row as the driver returns it, with some columns as the given text
    (the native SQLite driver reads datetimes as text; JSON is text on every backend)."""
    slot = Slot.objects.create(user_id="u", session_id="s", agent_id="a", summary=SUMMARY)
    with connection.cursor() as cursor:
        cursor.execute(
            sql.statements(connection.alias).select_slot, [slot.namespace, "u", "s", "a"]
        )
        row = list(cursor.fetchone())
    names = [f.attname for f in Slot._meta.concrete_fields]
    for name, value in text.items():
        row[names.index(name)] = value
    return row


def load(row: list[Any]) -> Slot:
    return loading.load_slot(connection.alias, connection, row)


def values(slot: Slot) -> dict[str, Any]:
    return {f.attname: getattr(slot, f.attname) for f in Slot._meta.concrete_fields}


def test_a_row_loaded_again_gives_equal_values_and_its_own_summary() -> None:
    row = slot_row()
    first, second = load(row), load(row)
    assert values(first) == values(second) == values(Slot.objects.get())
    assert first.summary == SUMMARY and first.summary is not second.summary
    first.summary[0]["content"][0]["text"] = "changed by a caller"
    first.summary.append({"role": "assistant", "content": []})
    assert load(row).summary == SUMMARY  # what one caller did to its slot stays its own


def test_changed_text_is_converted_again() -> None:
    row = slot_row()
    assert load(row).summary == SUMMARY
    other = [{"role": "user", "content": [{"text": "another summary"}], "citations": None}]
    row[[f.attname for f in Slot._meta.concrete_fields].index("summary")] = (
        '[{"role": "user", "content": [{"text": "another summary"}], "citations": null}]'
    )
    assert load(row).summary == other
    assert load(row).summary == other


def test_a_time_zone_setting_change_forgets_remembered_conversions() -> None:
    """SQLite's text datetimes are remembered converted (aware under USE_TZ); a change of
    USE_TZ converts them again (naive), as a fresh conversion does."""
    text = {"created_at": "2026-01-02 03:04:05.000006"} if connection.vendor == "sqlite" else {}
    row = slot_row(**text)
    before = load(row).created_at
    with override_settings(USE_TZ=False):
        after = load(row).created_at
        loading.clear_converted()
        assert after == load(row).created_at and after.tzinfo == load(row).created_at.tzinfo
    if text:
        assert before.tzinfo is not None and after.tzinfo is None


@pytest.mark.parametrize(
    "content,citations",
    [
        ([{"text": "plain"}], None),
        ([{"text": "ünïcödé ✓", "n": 1.5, "ok": True, "none": None}], [{"url": "x"}]),
        ([{"toolUse": {"input": {"1": [1, 2, {"deep": "x"}]}}}], []),
    ],
)
def test_a_saved_row_is_cached_as_its_insert_values_read_back(
    content: list[Any], citations: Any
) -> None:
    """The tail cache's copy of a saved row, from the INSERT's own JSON where the backend
    stores text, equals the one made by encoding the content again; neither is the
    caller's object."""
    from squad_memory.rows import build_rows, cached_row

    slot = Slot.objects.create(user_id="u", session_id="s", agent_id="a")
    rows = build_rows(slot, 0, [{"role": "user", "content": content, "citations": citations}])
    stored = sql.message_params(connection, rows)
    from_insert, encoded = cached_row(rows[0], stored), cached_row(rows[0])
    assert (
        from_insert
        == encoded
        == {"seq": 1, "role": "user", "content": content, "citations": citations}
    )
    assert from_insert["content"] is not content and from_insert["content"][0] is not content[0]


@pytest.mark.parametrize("whole_second", [False, True])
def test_a_saves_updated_at_reads_back_as_the_time_it_wrote(whole_second: bool) -> None:
    """The save's timestamp, written as Django's adapter writes it and remembered as
    written, is what converting its text gives (``str`` drops zero microseconds)."""
    from django.utils import timezone

    from squad_memory import saving
    from squad_memory.rows import build_rows

    now = timezone.now().replace(microsecond=0) if whole_second else timezone.now()
    rows = build_rows(None, 0, [{"role": "user", "content": [{"text": "x"}], "citations": None}])
    params = saving.save_params(
        connection, ("", "u", "s", "a"), rows, check_role=True, keep=0, now=now
    )
    updated = params[5]
    assert updated == Slot._meta.get_field("updated_at").get_db_prep_save(now, connection)
    row = slot_row(updated_at=updated) if type(updated) is str else slot_row()
    remembered = load(row).updated_at
    loading.clear_converted()
    converted = load(row).updated_at
    assert remembered == converted and remembered.tzinfo == converted.tzinfo
    if type(updated) is str:  # the text SQLite stores
        assert remembered == now


@pytest.mark.parametrize(
    "content",
    [
        [{"text": "plain"}],
        [{"text": 'ünïcödé ✓ \\u2028 "quoted"', "n": 1.5e-7, "big": 10**20, "ok": False}],
        [{"toolUse": {"input": {"1": [1, 2, {"deep": None}]}}}],
    ],
)
def test_the_insert_stores_the_json_the_orm_would(content: list[Any]) -> None:
    """The INSERT's value of validated content, whether validation's own text is taken
    or the backend adapts it again, is what ``get_db_prep_save`` gives."""
    from squad_memory.messages import encoded, to_dicts
    from squad_memory.models import Message
    from squad_memory.rows import build_rows

    slot = Slot.objects.create(user_id="u", session_id="s", agent_id="a")
    field = Message._meta.get_field("content")
    expected = field.get_db_prep_save(content, connection)
    rows = build_rows(slot, 0, to_dicts([{"role": "user", "content": content}]))
    assert encoded(rows[0].content) is not None  # validation's text is at hand
    stored = sql.message_params(connection, rows)[sql.MESSAGE_COLUMNS.index("content")]
    assert type(stored) is type(expected)
    if isinstance(expected, str):
        assert stored == expected
    else:  # psycopg's Jsonb: the same object adapted
        assert stored.obj == expected.obj


def test_a_databases_change_forgets_the_statements_written_for_it() -> None:
    """The fixed statements are quoted for the alias's backend; a change of DATABASES (an
    alias may now name another backend) writes them again on next use."""
    from django.core.signals import setting_changed

    from squad_memory import saving

    alias = connection.alias
    caches = (sql.statements, sql.insert_statement, saving.save_update, saving.one_statement)
    before = (sql.statements(alias), sql.insert_statement(alias, 2), saving.save_update(alias))
    with pytest.warns(UserWarning, match="DATABASES"):  # Django's own word on it
        setting_changed.send(sender=None, setting="DATABASES", value={}, enter=True)
    assert [cache.cache_info().currsize for cache in caches] == [0, 0, 0, 0]
    after = (sql.statements(alias), sql.insert_statement(alias, 2), saving.save_update(alias))
    assert after == before and all(a is not b for a, b in zip(after, before, strict=True))

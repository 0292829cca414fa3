"""Fixed SQL for the statements every save and fetch runs.

The ORM compiles each query anew on every call, which costs more than the
database round trip itself. These statements never change shape, so they are
written once here; values go through the model fields' own adapters
(``get_db_prep_save``, ``from_db_value``), so JSON and datetimes are stored and
read exactly as the ORM would on every backend.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field

from squad_memory.models import Message, Slot

#: Rows per INSERT statement: rows x columns stays under SQLite's 999-variable limit.
INSERT_CHUNK = 120

_MESSAGE_COLUMNS = ("slot", "seq", "role", "content", "citations", "timestamp", "text", "tokens")
_READ_COLUMNS = ("seq", "role", "content", "citations")


@dataclass(frozen=True)
class Statements:
    """The fixed statements of one database alias, built once."""

    select_slot: str
    lock_slot: str
    insert_head: str
    insert_row: str
    messages_after: str
    messages_between: str
    newest_after: str


def _connection() -> BaseDatabaseWrapper:
    return connections[router.db_for_write(Message)]


def _field(model: type[Any], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, Field)
    return field


@functools.cache
def statements(alias: str) -> Statements:
    """Every fixed statement for ``alias``, quoted for its backend (cached per alias)."""
    connection = connections[alias]
    quote = connection.ops.quote_name

    def column(model: type[Any], name: str) -> str:
        return str(quote(str(_field(model, name).column)))

    def columns(model: type[Any], names: Sequence[str]) -> str:
        return ", ".join(column(model, name) for name in names)

    slot_table, message_table = quote(Slot._meta.db_table), quote(Message._meta.db_table)
    slot_columns = ", ".join(str(quote(str(f.column))) for f in Slot._meta.concrete_fields)
    key = ("namespace", "user_id", "session_id", "agent_id")
    where = " AND ".join(f"{column(Slot, name)} = %s" for name in key)
    select = f"SELECT {slot_columns} FROM {slot_table} WHERE {where}"
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    seq = column(Message, "seq")
    read = (
        f"SELECT {columns(Message, _READ_COLUMNS)} FROM {message_table} "
        f"WHERE {column(Message, 'slot')} = %s AND {seq} > %s"
    )
    return Statements(
        select_slot=select,
        lock_slot=select + lock,
        insert_head=f"INSERT INTO {message_table} ({columns(Message, _MESSAGE_COLUMNS)}) VALUES ",
        insert_row="(" + ", ".join(["%s"] * len(_MESSAGE_COLUMNS)) + ")",
        messages_after=f"{read} ORDER BY {seq}",
        messages_between=f"{read} AND {seq} <= %s ORDER BY {seq}",
        newest_after=f"{read} ORDER BY {seq} DESC LIMIT %s",
    )


def lock_slot(namespace: str, user_id: str, session_id: str, agent_id: str) -> Slot | None:
    """The slot's row, locked (``FOR UPDATE`` where the database has it), or None."""
    return select_slot(namespace, user_id, session_id, agent_id, lock=True)


def select_slot(
    namespace: str, user_id: str, session_id: str, agent_id: str, *, lock: bool = False
) -> Slot | None:
    """The slot's row by its key, or None; ``lock`` takes its row lock."""
    alias = router.db_for_write(Slot)
    connection = connections[alias]
    sql = statements(alias)
    with connection.cursor() as cursor:
        cursor.execute(
            sql.lock_slot if lock else sql.select_slot, [namespace, user_id, session_id, agent_id]
        )
        row = cursor.fetchone()
    if row is None:
        return None
    names, converters = _slot_loader(alias)
    values = [
        _convert(value, convert, connection) for value, convert in zip(row, converters, strict=True)
    ]
    return Slot.from_db(alias, names, values)


Converter = tuple[Any, list[Any]]


@functools.cache
def _slot_loader(alias: str) -> tuple[list[str], list[Converter]]:
    """The slot's attribute names and, per column, the converters the ORM would apply."""
    connection = connections[alias]
    names, converters = [], []
    for field in Slot._meta.concrete_fields:
        column = field.get_col(Slot._meta.db_table)
        found = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
        names.append(field.attname)
        converters.append((column, found))
    return names, converters


def _convert(value: Any, converter: Converter, connection: BaseDatabaseWrapper) -> Any:
    column, functions = converter
    for function in functions:
        value = function(value, column, connection)
    return value


def insert_messages(rows: Sequence[Message]) -> None:
    """INSERT the given (unsaved) messages, in chunks; no ids are read back."""
    connection = _connection()
    sql = statements(connection.alias)
    fields = [_field(Message, name) for name in _MESSAGE_COLUMNS]
    with connection.cursor() as cursor:
        for start in range(0, len(rows), INSERT_CHUNK):
            chunk = rows[start : start + INSERT_CHUNK]
            params = [
                field.get_db_prep_save(getattr(row, field.attname), connection)
                for row in chunk
                for field in fields
            ]
            cursor.execute(sql.insert_head + ", ".join([sql.insert_row] * len(chunk)), params)


def update_slot(slot: Slot, names: Sequence[str]) -> None:
    """UPDATE the named fields of a slot row from the instance's values."""
    connection = _connection()
    quote = connection.ops.quote_name
    fields = [_field(Slot, name) for name in names]
    assignments = ", ".join(f"{quote(str(field.column))} = %s" for field in fields)
    params = [field.get_db_prep_save(getattr(slot, field.attname), connection) for field in fields]
    sql = f"UPDATE {quote(Slot._meta.db_table)} SET {assignments} WHERE {quote('id')} = %s"
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, slot.pk])


def messages_after(
    slot_id: int, after_seq: int, up_to: int | None = None, *, newest: int | None = None
) -> list[dict[str, Any]]:
    """``seq``, ``role``, ``content`` and ``citations`` of the messages after ``after_seq``,
    oldest first; ``newest`` keeps only that many of the newest."""
    connection = _connection()
    sql = statements(connection.alias)
    if newest is not None:
        query, params = sql.newest_after, [slot_id, after_seq, newest]
    elif up_to is None:
        query, params = sql.messages_after, [slot_id, after_seq]
    else:
        query, params = sql.messages_between, [slot_id, after_seq, up_to]
    content, citations = _field(Message, "content"), _field(Message, "citations")
    decode: Any = None  # from_db_value reads no expression for a plain column
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        fetched = cursor.fetchall()
        if newest is not None:
            fetched.reverse()
        return [
            {
                "seq": row[0],
                "role": row[1],
                "content": content.from_db_value(row[2], decode, connection),  # type: ignore[attr-defined]
                "citations": citations.from_db_value(row[3], decode, connection),  # type: ignore[attr-defined]
            }
            for row in fetched
        ]


# -- a save in one statement (PostgreSQL) ------------------------------------------------------
#: Messages per one-statement save; a longer batch takes the general path.
ONE_STATEMENT_MAX = 50


def one_statement_saves(alias: str) -> bool:
    """Whether ``alias`` can save with :func:`save_in_one_statement` (data-modifying CTEs)."""
    return connections[alias].vendor == "postgresql"


@functools.cache
def _one_statement(alias: str, count: int) -> str:
    connection = connections[alias]
    quote = connection.ops.quote_name
    sql = statements(alias)
    slot_table, message_table = quote(Slot._meta.db_table), quote(Message._meta.db_table)
    columns = ", ".join(str(quote(str(f.column))) for f in Slot._meta.concrete_fields)
    col = {name: str(quote(str(_field(Slot, name).column))) for name in _SLOT_SAVE}
    values = ", ".join(["(%s::int, %s, %s::jsonb, %s::jsonb, %s::bigint, %s, %s::int)"] * count)
    message_columns = ", ".join(
        str(quote(str(_field(Message, name).column))) for name in _MESSAGE_COLUMNS
    )
    where = sql.select_slot.split(" WHERE ", 1)[1]
    # The role rule and the trim are those of history.append (is_same_role, trim_size):
    # the last role must differ unless unchecked; visible_from_seq only moves forward.
    return (
        f"WITH s AS (UPDATE {slot_table} SET "
        f"{col['last_seq']} = {col['last_seq']} + %s, {col['last_role']} = %s, "
        f"{col['visible_from_seq']} = CASE WHEN %s > 0 THEN GREATEST("
        f"{col['visible_from_seq']}, {col['last_seq']} + %s - %s + 1) "
        f"ELSE {col['visible_from_seq']} END, {col['updated_at']} = %s, "
        f"{col['buffer_tokens']} = {col['buffer_tokens']} + %s "
        f"WHERE {where} AND NOT (%s AND {col['last_role']} <> '' AND {col['last_role']} = %s) "
        f"RETURNING {columns}), "
        f"ins AS (INSERT INTO {message_table} ({message_columns}) "
        f"SELECT s.{quote('id')}, s.{col['last_seq']} - %s + v.i, v.role, v.content, "
        f"v.citations, v.ts, v.text, v.tokens FROM s, (VALUES {values}) "
        f"AS v(i, role, content, citations, ts, text, tokens)) SELECT {columns} FROM s"
    )


_SLOT_SAVE = ("last_seq", "last_role", "visible_from_seq", "updated_at", "buffer_tokens")


def save_in_one_statement(
    key: Sequence[str], rows: Sequence[Message], *, check_role: bool, keep: int, now: Any
) -> Slot | None:
    """Lock the slot, apply the role rule, bump the counters and insert ``rows`` in one
    statement; the slot as left, or None when it does not exist or the role rule refused
    (the caller then takes the general path, which tells the two apart)."""
    alias = router.db_for_write(Slot)
    connection = connections[alias]
    count, last_role = len(rows), rows[-1].role
    updated = _field(Slot, "updated_at").get_db_prep_save(now, connection)
    added = sum(row.tokens for row in rows)  # the running total (tokens.py)
    params: list[Any] = [count, last_role, keep, count, keep, updated, added, *key]
    params += [check_role, rows[0].role, count]
    fields = [_field(Message, name) for name in ("content", "citations")]
    for i, row in enumerate(rows, start=1):
        content, citations = (
            f.get_db_prep_save(getattr(row, f.attname), connection) for f in fields
        )
        params += [i, row.role, content, citations, row.timestamp, row.text, row.tokens]
    with connection.cursor() as cursor:
        cursor.execute(_one_statement(alias, count), params)
        found = cursor.fetchone()
    if found is None:
        return None
    names, converters = _slot_loader(alias)
    values = [_convert(v, c, connection) for v, c in zip(found, converters, strict=True)]
    return Slot.from_db(alias, names, values)

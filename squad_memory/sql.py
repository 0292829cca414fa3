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

from django.core.signals import setting_changed
from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.base.operations import BaseDatabaseOperations
from django.db.models import Field
from django.dispatch import receiver

from squad_memory.loading import load_slot
from squad_memory.messages import encoded
from squad_memory.models import Message, Slot

#: Rows per INSERT statement: rows x columns stays under SQLite's 999-variable limit.
INSERT_CHUNK = 120

MESSAGE_COLUMNS = ("slot", "seq", "role", "content", "citations", "timestamp", "text", "tokens")
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


def field(model: type[Any], name: str) -> Field[Any, Any]:
    """A concrete field of ``model``, typed."""
    found = model._meta.get_field(name)
    assert isinstance(found, Field)
    return found


@functools.cache
def statements(alias: str) -> Statements:
    """Every fixed statement for ``alias``, quoted for its backend (cached per alias)."""
    connection = connections[alias]
    quote = connection.ops.quote_name

    def column(model: type[Any], name: str) -> str:
        return str(quote(str(field(model, name).column)))

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
        insert_head=f"INSERT INTO {message_table} ({columns(Message, MESSAGE_COLUMNS)}) VALUES ",
        insert_row="(" + ", ".join(["%s"] * len(MESSAGE_COLUMNS)) + ")",
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
    return None if row is None else load_slot(alias, connection, row)


@functools.lru_cache(maxsize=256)
def insert_statement(alias: str, count: int) -> str:
    """The INSERT of ``count`` message rows (values from :func:`message_params`)."""
    sql = statements(alias)
    return sql.insert_head + ", ".join([sql.insert_row] * count)


def insert_messages(rows: Sequence[Message]) -> None:
    """INSERT the given (unsaved) messages, in chunks; no ids are read back."""
    connection = _connection()
    with connection.cursor() as cursor:
        for start in range(0, len(rows), INSERT_CHUNK):
            chunk = rows[start : start + INSERT_CHUNK]
            params = message_params(connection, chunk)
            cursor.execute(insert_statement(connection.alias, len(chunk)), params)


def update_slot(slot: Slot, names: Sequence[str]) -> None:
    """UPDATE the named fields of a slot row from the instance's values."""
    connection = _connection()
    quote = connection.ops.quote_name
    fields = [field(Slot, name) for name in names]
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
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        fetched = cursor.fetchall()
    if newest is not None:
        fetched.reverse()
    return decode_messages(connection, fetched)


def decode_messages(connection: BaseDatabaseWrapper, fetched: list[Any]) -> list[dict[str, Any]]:
    """Rows of the message statements (seq, role, content, citations) as dicts, decoded
    by the JSON fields as the ORM would."""
    content, citations = field(Message, "content"), field(Message, "citations")
    decode: Any = None  # from_db_value reads no expression for a plain column
    return [
        {
            "seq": row[0],
            "role": row[1],
            "content": content.from_db_value(row[2], decode, connection),  # type: ignore[attr-defined]
            "citations": citations.from_db_value(row[3], decode, connection),  # type: ignore[attr-defined]
        }
        for row in fetched
    ]


#: Field types whose value, when exactly an int or a str, the database takes as it is.
_PLAIN_FIELDS = {"BigIntegerField", "CharField", "ForeignKey", "IntegerField", "TextField"}


@functools.cache
def _message_fields() -> list[tuple[str, Field[Any, Any], str]]:
    found = [field(Message, name) for name in MESSAGE_COLUMNS]
    kinds = {"JSONField": "json"} | dict.fromkeys(_PLAIN_FIELDS, "plain")
    return [(f.attname, f, kinds.get(f.get_internal_type(), "")) for f in found]


def message_params(connection: BaseDatabaseWrapper, rows: Sequence[Message]) -> list[Any]:
    """The column values of ``rows`` for :attr:`Statements.insert_row`, row after row, as
    ``get_db_prep_save`` makes them. An int or str of a plain column is taken as it is; a
    JSON list is already prepared (``get_prep_value`` would return it unchanged), so
    only the backend's adaptation runs."""
    params = []
    for row in rows:
        for attname, model_field, kind in _message_fields():
            value = getattr(row, attname)
            if kind == "plain" and type(value) in (int, str):
                pass
            elif kind == "json":
                value = json_param(model_field, value, connection)
            else:
                value = model_field.get_db_prep_save(value, connection)
            params.append(value)
    return params


def json_param(model_field: Field[Any, Any], value: Any, connection: BaseDatabaseWrapper) -> Any:
    """A JSON column's value as ``get_db_prep_save`` makes it; a list (validated content)
    is already prepared, so only the backend's adaptation runs, and where that is
    ``json.dumps`` the text validation wrote is taken as it is."""
    if type(value) is not list:
        return model_field.get_db_prep_save(value, connection)
    text = encoded(value)
    if (
        text is not None
        and type(connection.ops).adapt_json_value is BaseDatabaseOperations.adapt_json_value
        and getattr(model_field, "encoder", None) is None
    ):
        return text  # what json.dumps (SQLite's, MySQL's adaptation) would write again
    return model_field.get_db_prep_value(value, connection, prepared=True)


@receiver(setting_changed, dispatch_uid="squad_memory.sql")
def _setting_changed(*, setting: str, **kwargs: Any) -> None:
    """Statements written for the old ``DATABASES`` (its backends' quoting) are forgotten."""
    if setting == "DATABASES":
        statements.cache_clear()
        insert_statement.cache_clear()

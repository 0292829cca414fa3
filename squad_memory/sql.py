"""Fixed SQL for the statements every save and fetch runs.

The ORM compiles each query anew on every call, which costs more than the
database round trip itself. These statements never change shape, so they are
written once here; values go through the model fields' own adapters
(``get_db_prep_save``, ``from_db_value``), so JSON and datetimes are stored and
read exactly as the ORM would on every backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field

from squad_memory.models import Message, Slot

#: Rows per INSERT statement: 7 parameters each stays under SQLite's 999-variable limit.
INSERT_CHUNK = 140

_MESSAGE_COLUMNS = ("slot", "seq", "role", "content", "citations", "timestamp", "text")
_READ_COLUMNS = ("seq", "role", "content", "citations")


def _connection() -> BaseDatabaseWrapper:
    return connections[router.db_for_write(Message)]


def _field(model: type[Any], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, Field)
    return field


def _column(model: type[Any], name: str) -> str:
    return str(_connection().ops.quote_name(str(_field(model, name).column)))


def _columns(model: type[Any], names: Sequence[str]) -> str:
    return ", ".join(_column(model, name) for name in names)


def _table(model: type[Any]) -> str:
    return str(_connection().ops.quote_name(model._meta.db_table))


def lock_slot(namespace: str, user_id: str, session_id: str, agent_id: str) -> Slot | None:
    """The slot's row, locked (``FOR UPDATE`` where the database has it), or None."""
    return select_slot(namespace, user_id, session_id, agent_id, lock=True)


def select_slot(
    namespace: str, user_id: str, session_id: str, agent_id: str, *, lock: bool = False
) -> Slot | None:
    """The slot's row by its key, or None; ``lock`` takes its row lock."""
    connection = _connection()
    columns = ", ".join(
        str(connection.ops.quote_name(str(field.column))) for field in Slot._meta.concrete_fields
    )
    key = ("namespace", "user_id", "session_id", "agent_id")
    where = " AND ".join(f"{_column(Slot, name)} = %s" for name in key)
    suffix = " FOR UPDATE" if lock and connection.features.has_select_for_update else ""
    sql = f"SELECT {columns} FROM {_table(Slot)} WHERE {where}{suffix}"
    rows = list(Slot.objects.raw(sql, [namespace, user_id, session_id, agent_id]))
    return rows[0] if rows else None


def insert_messages(rows: Sequence[Message]) -> None:
    """INSERT the given (unsaved) messages, in chunks; no ids are read back."""
    connection = _connection()
    fields = [_field(Message, name) for name in _MESSAGE_COLUMNS]
    head = f"INSERT INTO {_table(Message)} ({_columns(Message, _MESSAGE_COLUMNS)}) VALUES "
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    with connection.cursor() as cursor:
        for start in range(0, len(rows), INSERT_CHUNK):
            chunk = rows[start : start + INSERT_CHUNK]
            params = [
                field.get_db_prep_save(getattr(row, field.attname), connection)
                for row in chunk
                for field in fields
            ]
            cursor.execute(head + ", ".join([one] * len(chunk)), params)


def update_slot(slot: Slot, names: Sequence[str]) -> None:
    """UPDATE the named fields of a slot row from the instance's values."""
    connection = _connection()
    fields = [_field(Slot, name) for name in names]
    assignments = ", ".join(f"{_column(Slot, name)} = %s" for name in names)
    params = [field.get_db_prep_save(getattr(slot, field.attname), connection) for field in fields]
    pk = _column(Slot, "id")
    with connection.cursor() as cursor:
        sql = f"UPDATE {_table(Slot)} SET {assignments} WHERE {pk} = %s"
        cursor.execute(sql, [*params, slot.pk])


def messages_after(slot_id: int, after_seq: int, up_to: int | None = None) -> list[dict[str, Any]]:
    """``seq``, ``role``, ``content`` and ``citations`` of the messages after ``after_seq``."""
    connection = _connection()
    seq = _column(Message, "seq")
    where = f"{_column(Message, 'slot')} = %s AND {seq} > %s"
    params: list[Any] = [slot_id, after_seq]
    if up_to is not None:
        where += f" AND {seq} <= %s"
        params.append(up_to)
    sql = (
        f"SELECT {_columns(Message, _READ_COLUMNS)} FROM {_table(Message)} "
        f"WHERE {where} ORDER BY {seq}"
    )
    content, citations = _field(Message, "content"), _field(Message, "citations")
    decode: Any = None  # from_db_value reads no expression for a plain column
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [
            {
                "seq": row[0],
                "role": row[1],
                "content": content.from_db_value(row[2], decode, connection),  # type: ignore[attr-defined]
                "citations": citations.from_db_value(row[3], decode, connection),  # type: ignore[attr-defined]
            }
            for row in cursor.fetchall()
        ]

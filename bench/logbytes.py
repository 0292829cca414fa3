"""Bytes of the compression log against bytes of the raw messages, for one run's slots.

A row's bytes are the sum of the text lengths of all its columns, counted by the
database (``octet_length`` of each value cast to text on PostgreSQL, ``length`` of
each value cast to a blob on SQLite), so the figure does not depend on which
columns a compression log row has. PostgreSQL also reports each table's whole
on-disk size (every run's rows, indexes and TOAST included) for context.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.db import connection


def _table(model: str) -> str:
    return str(apps.get_model("squad_memory", model)._meta.db_table)


def _row_bytes(cursor: Any, table: str, slots: str, run: str) -> int:
    columns = [c.name for c in connection.introspection.get_table_description(cursor, table)]
    quote = connection.ops.quote_name
    if connection.vendor == "postgresql":
        sizes = [f"coalesce(octet_length(CAST({quote(c)} AS text)), 0)" for c in columns]
    else:
        sizes = [f"coalesce(length(CAST({quote(c)} AS BLOB)), 0)" for c in columns]
    cursor.execute(
        f"SELECT coalesce(sum({' + '.join(sizes)}), 0) FROM {quote(table)} "
        f"WHERE slot_id IN ({slots})",
        [run],
    )
    return int(cursor.fetchone()[0])


def measure(run: str) -> dict[str, Any]:
    """``log_bytes``, ``raw_bytes`` and their counts for the slots of user ``run``."""
    quote = connection.ops.quote_name
    slots = f"SELECT id FROM {quote(_table('Slot'))} WHERE user_id = %s"
    with connection.cursor() as cursor:
        log = _row_bytes(cursor, _table("Compression"), slots, run)
        raw = _row_bytes(cursor, _table("Message"), slots, run)
        result: dict[str, Any] = {"log_bytes": log, "raw_bytes": raw}
        for name, model in (("log_rows", "Compression"), ("raw_rows", "Message")):
            table = quote(_table(model))
            cursor.execute(f"SELECT count(*) FROM {table} WHERE slot_id IN ({slots})", [run])
            result[name] = int(cursor.fetchone()[0])
        if connection.vendor == "postgresql":
            for name, model in (("log_table_bytes", "Compression"), ("raw_table_bytes", "Message")):
                cursor.execute("SELECT pg_total_relation_size(%s)", [_table(model)])
                result[name] = int(cursor.fetchone()[0])
    return result

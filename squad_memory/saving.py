"""The statements of a save: the slot's UPDATE under the role rule, and on PostgreSQL the
whole save (that UPDATE and the INSERT of the messages) in one statement.

Used by :mod:`squad_memory.history` (the thread path) and :mod:`squad_memory.native`
(the event loop's own connection): both run the same SQL with the same parameters.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from django.core.signals import setting_changed
from django.db import connections, router, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.dispatch import receiver

from squad_memory.loading import load_slot, written_time
from squad_memory.models import Message, Slot
from squad_memory.sql import (
    MESSAGE_COLUMNS,
    field,
    insert_messages,
    json_param,
    statements,
)

#: Messages per one-statement save; a longer batch takes the general path.
ONE_STATEMENT_MAX = 50


def returning_saves(alias: str) -> bool:
    """Whether ``alias`` can save with :func:`save_returning` (``UPDATE ... RETURNING``)."""
    return connections[alias].vendor in ("postgresql", "sqlite")


@functools.cache
def save_update(alias: str) -> str:
    """The slot half of a save: bump the counters under the role rule, RETURNING the row.

    Parameters: count, last role, keep, count, keep, updated_at, tokens added, the four
    key parts, check_role, the first message's role (:func:`save_params`). The role rule
    and the trim are those of history.append (is_same_role, trim_size): the last role
    must differ unless unchecked; visible_from_seq only moves forward.
    """
    connection = connections[alias]
    quote = connection.ops.quote_name
    slot_table = quote(Slot._meta.db_table)
    columns = ", ".join(str(quote(str(f.column))) for f in Slot._meta.concrete_fields)
    col = {name: str(quote(str(field(Slot, name).column))) for name in _SLOT_SAVE}
    where = statements(alias).select_slot.split(" WHERE ", 1)[1]
    greatest = "GREATEST" if connection.vendor == "postgresql" else "MAX"
    return (
        f"UPDATE {slot_table} SET "
        f"{col['last_seq']} = {col['last_seq']} + %s, {col['last_role']} = %s, "
        f"{col['visible_from_seq']} = CASE WHEN %s > 0 THEN {greatest}("
        f"{col['visible_from_seq']}, {col['last_seq']} + %s - %s + 1) "
        f"ELSE {col['visible_from_seq']} END, {col['updated_at']} = %s, "
        f"{col['buffer_tokens']} = {col['buffer_tokens']} + %s "
        f"WHERE {where} AND NOT (%s AND {col['last_role']} <> '' AND {col['last_role']} = %s) "
        f"RETURNING {columns}"
    )


@functools.cache
def one_statement(alias: str, count: int) -> str:
    """A whole save on PostgreSQL: :func:`save_update` and the INSERT in one CTE."""
    quote = connections[alias].ops.quote_name
    message_table = quote(Message._meta.db_table)
    columns = ", ".join(str(quote(str(f.column))) for f in Slot._meta.concrete_fields)
    last_seq = quote(str(field(Slot, "last_seq").column))
    values = ", ".join(["(%s::int, %s, %s::jsonb, %s::jsonb, %s::bigint, %s, %s::int)"] * count)
    message_columns = ", ".join(
        str(quote(str(field(Message, name).column))) for name in MESSAGE_COLUMNS
    )
    return (
        f"WITH s AS ({save_update(alias)}), "
        f"ins AS (INSERT INTO {message_table} ({message_columns}) "
        f"SELECT s.{quote('id')}, s.{last_seq} - %s + v.i, v.role, v.content, "
        f"v.citations, v.ts, v.text, v.tokens FROM s, (VALUES {values}) "
        f"AS v(i, role, content, citations, ts, text, tokens)) SELECT {columns} FROM s"
    )


_SLOT_SAVE = ("last_seq", "last_role", "visible_from_seq", "updated_at", "buffer_tokens")


def save_params(
    connection: BaseDatabaseWrapper,
    key: Sequence[str],
    rows: Sequence[Message],
    *,
    check_role: bool,
    keep: int,
    now: Any,
) -> list[Any]:
    """The parameters of :func:`save_update` for a save of ``rows``."""
    count, last_role = len(rows), rows[-1].role
    # ``now`` is timezone.now(): prepared as it is (get_prep_value returns it unchanged);
    # the RETURNING row holds it again.
    updated = written_time(connection, field(Slot, "updated_at"), now)
    added = sum(row.tokens for row in rows)  # the running total (tokens.py)
    return [count, last_role, keep, count, keep, updated, added, *key, check_role, rows[0].role]


def one_statement_params(
    connection: BaseDatabaseWrapper,
    key: Sequence[str],
    rows: Sequence[Message],
    *,
    check_role: bool,
    keep: int,
    now: Any,
) -> list[Any]:
    """The parameters of :func:`one_statement` for a save of ``rows``."""
    params = save_params(connection, key, rows, check_role=check_role, keep=keep, now=now)
    params.append(len(rows))
    content_field, citations_field = field(Message, "content"), field(Message, "citations")
    for i, row in enumerate(rows, start=1):
        content = json_param(content_field, row.content, connection)
        citations = json_param(citations_field, row.citations, connection)
        params += [i, row.role, content, citations, row.timestamp, row.text, row.tokens]
    return params


def save_returning(
    key: Sequence[str],
    rows: Sequence[Message],
    *,
    check_role: bool,
    keep: int,
    now: Any,
    locked: Callable[[Slot], None] | None = None,
) -> Slot | None:
    """Lock the slot, apply the role rule, bump the counters and insert ``rows``: one
    statement on PostgreSQL; on SQLite the slot's UPDATE (which takes the write lock)
    and the INSERT in one transaction, then ``locked(slot)`` while the lock is held. The
    slot as left, or None (nothing written) when it does not exist or the role rule
    refused: the caller then takes the general path, which tells the two apart."""
    alias = router.db_for_write(Slot)
    connection = connections[alias]
    if connection.vendor == "postgresql":
        params = one_statement_params(
            connection, key, rows, check_role=check_role, keep=keep, now=now
        )
        with connection.cursor() as cursor:
            cursor.execute(one_statement(alias, len(rows)), params)
            found = cursor.fetchone()
        return None if found is None else load_slot(alias, connection, found)
    params = save_params(connection, key, rows, check_role=check_role, keep=keep, now=now)
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        cursor.execute(save_update(alias), params)
        found = cursor.fetchone()
        if found is None:
            return None
        slot = load_slot(alias, connection, found)
        for seq, row in enumerate(rows, start=slot.last_seq - len(rows) + 1):
            row.slot, row.seq = slot, seq
        insert_messages(rows)
        if locked is not None:
            locked(slot)
    return slot


@receiver(setting_changed, dispatch_uid="squad_memory.saving")
def _setting_changed(*, setting: str, **kwargs: Any) -> None:
    """Statements written for the old ``DATABASES`` (its backends' SQL) are forgotten."""
    if setting == "DATABASES":
        save_update.cache_clear()
        one_statement.cache_clear()

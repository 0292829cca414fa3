"""The one write path of raw messages, and the one read of a slot with its rows.

:meth:`SlotManager.append` is the only code that appends messages and bumps a slot's
counters, for every caller (the storage, the API, the importer, a compression's seed
of a foreign store). It locks the slot's row, applies the role rule against its
``last_role``, inserts the rows with the next sequence numbers and moves the
counters, in one transaction that never reads the history: a save costs the same at
10 and at 10,000 stored messages, and writers in any number of processes keep a
gapless, ordered sequence.

On PostgreSQL and SQLite an existing slot is saved by ``UPDATE ... RETURNING`` and the
INSERT (on PostgreSQL one statement), through Django's cursor, which also return the
rows the caller's view held before the save (so a save answers without another
query); everywhere else, and for a new slot or a message the role rule refuses, by
its Python twin (``select_for_update``). ``tests/test_models.py`` holds the two to the
same decisions. Appending sends no model signals (as ``bulk_create`` and
``QuerySet.update`` send none); creating a slot sends ``post_save`` with
``created=True``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from django.core.signals import setting_changed
from django.db import OperationalError, connections, models, router, transaction
from django.dispatch import receiver
from django.utils import timezone

from squad_memory.messages import MessageDict, extract_text, now_ms
from squad_memory.models.messages import Message
from squad_memory.rules import count_tokens, is_same_role, trim_size

if TYPE_CHECKING:
    from squad_memory.models.slots import Slot

logger = logging.getLogger("squad_memory")

SlotKey = tuple[str, str, str]
Rows = list[dict[str, Any]]
#: Where a slot's view starts: after the buffer's pointer, or after the trim.
View = Literal["buffer", "visible"]
T = TypeVar("T")

#: Databases whose saves and reads run as the statements below.
SQL_VENDORS = ("postgresql", "sqlite")
#: Messages per one-statement save (a longer batch takes the Python twin).
ONE_STATEMENT_MAX = 50
#: Attempts of a save that finds SQLite locked by another process's writer.
LOCKED_ATTEMPTS = 5


@dataclass
class Appended:
    """What one save did: the slot as it left it, the rows it stored, whether the role rule
    refused the message (nothing stored then), and, when asked for, the rows of the view
    before this save (``before``; the view is ``before`` plus ``rows``)."""

    slot: Slot
    rows: list[Message]
    skipped: bool = False
    before: Rows | None = field(default=None, repr=False)
    start: View = "buffer"

    def view(self) -> Rows | None:
        """The rows of the view this save asked for, after it (None: not read)."""
        if self.before is None:
            return None
        slot = self.slot
        first = slot.buffer_from_seq if self.start == "buffer" else slot.visible_from_seq
        return self.before + [_row_dict(row) for row in self.rows if row.seq >= first]


class SlotManager(models.Manager["Slot"]):
    def write_db(self) -> str:
        """The database every save, and every read a write depends on, uses (never a replica)."""
        return router.db_for_write(self.model)

    def append(
        self,
        key: SlotKey,
        messages: Sequence[MessageDict],
        *,
        namespace: str = "",
        check_role: bool = False,
        max_history_size: int | None = None,
        rows_while_inactive: bool = True,
        view: View | None = None,
        newest: int | None = None,
    ) -> Appended:
        """Append validated messages to a slot, creating it if new (see the module's text).

        ``check_role``: skip a message repeating the last role (``save_chat_message``).
        ``max_history_size``: trim the visible history as agent-squad does (rows stay).
        ``rows_while_inactive=False``: store rows only while the buffer is active (a
        foreign store keeps the history; the counters move either way).
        ``view``, ``newest``: also return the view's rows before the save (its ``newest``).
        """
        alias = self.write_db()
        if not messages:  # nothing to store: no slot is created
            slot = self.using(alias).for_key(*key, namespace=namespace).first()  # type: ignore[attr-defined]
            return Appended(slot or self.model(namespace=namespace, **_key_fields(key)), [])
        rows = _rows(messages)
        keep = trim_size(max_history_size)
        vendor = connections[alias].vendor
        if rows_while_inactive and vendor in SQL_VENDORS and len(rows) <= ONE_STATEMENT_MAX:
            saved = _retry_locked(
                alias,
                lambda: self._append_sql(
                    alias, key, namespace, rows, check_role, keep, view, newest
                ),
            )
            if saved is not None:
                return saved
        appended = _retry_locked(
            alias,
            lambda: self._append_locked(
                alias, key, namespace, rows, check_role, keep, rows_while_inactive
            ),
        )
        if view is not None:
            appended.before = _view_before(alias, appended, view, newest)
            appended.start = view
        return appended

    def _append_locked(
        self,
        alias: str,
        key: SlotKey,
        namespace: str,
        rows: list[Message],
        check_role: bool,
        keep: int,
        rows_while_inactive: bool,
    ) -> Appended:
        """The Python twin of the statements: lock, role rule, insert, counters."""
        with transaction.atomic(using=alias):
            slots: Any = self.using(alias).select_for_update()
            fields = dict(_key_fields(key), namespace=namespace)
            slot = slots.filter(**fields).first() or slots.get_or_create(**fields)[0]
            if check_role and is_same_role(slot.last_role, rows[0].role):
                return Appended(slot, [], skipped=True)
            stored = rows if rows_while_inactive or slot.active else []
            slot.last_seq += len(rows)
            _number(slot, rows)
            Message.objects.using(alias).bulk_create(stored)
            slot.last_role = rows[-1].role
            if keep:
                slot.visible_from_seq = max(slot.visible_from_seq, slot.last_seq - keep + 1)
            slot.buffer_tokens += sum(row.tokens for row in stored)
            slot.updated_at = timezone.now()
            self.using(alias).filter(pk=slot.pk).update(
                **{name: getattr(slot, name) for name in _COUNTERS}
            )
        return Appended(slot, rows)

    def _append_sql(
        self,
        alias: str,
        key: SlotKey,
        namespace: str,
        rows: list[Message],
        check_role: bool,
        keep: int,
        view: View | None,
        newest: int | None,
    ) -> Appended | None:
        """The save as ``UPDATE ... RETURNING`` and the INSERT; None when no row matched
        (a new slot, or the role rule refused): the twin then tells the two apart."""
        connection = connections[alias]
        now = self.model._meta.get_field("updated_at").get_db_prep_save(timezone.now(), connection)
        count, tokens = len(rows), sum(row.tokens for row in rows)
        params: dict[str, Any] = dict(
            _key_params(key, namespace),
            count=count,
            last_role=rows[-1].role,
            keep=keep,
            now=now,
            tokens=tokens,
            check_role=check_role,
            first_role=rows[0].role,
            **_tail_params(view, newest),
        )
        values = [_column_values(row, connection) for row in rows]
        pg = connection.vendor == "postgresql"
        if pg:
            params.update(_values_params(values))
        # One statement on PostgreSQL is a transaction of its own (no BEGIN and COMMIT
        # round trips); SQLite's two need one.
        in_transaction = contextlib.nullcontext() if pg else transaction.atomic(using=alias)
        with in_transaction, connection.cursor() as cursor:
            cursor.execute(_save_sql(alias, connection.vendor, view, count), params)
            found = cursor.fetchone()
            if found is None:
                return None
            slot, before = _load(alias, found)
            _number(slot, rows)
            if not pg:
                seqs = {f"seq{n}": row.seq for n, row in enumerate(rows)}
                cursor.execute(
                    _insert_sql(count), {"slot": slot.pk, **seqs, **_values_params(values)}
                )
        if view is None:
            return Appended(slot, rows)
        appended = Appended(slot, rows, before=before, start=view)
        if pg and not _reaches(appended, view):
            # The statement read its snapshot before it waited for the slot's lock: the
            # rows that writer committed meanwhile are missing. Read the view again.
            appended.before = _view_before(alias, appended, view, newest)
        return appended

    def read(
        self,
        key: SlotKey,
        *,
        namespace: str = "",
        start: View = "buffer",
        newest: int | None = None,
    ) -> tuple[Slot | None, Rows]:
        """A slot and the rows of its view, oldest first: after the buffer's pointer
        (``"buffer"``: the tail after the summary, or the visible history while inactive)
        or after the trim (``"visible"``); ``newest`` keeps only that many of the newest.
        Rows are dicts of ``seq``, ``role``, ``content``, ``citations`` and ``tokens``.
        One statement on PostgreSQL and SQLite."""
        alias = self.write_db()
        connection = connections[alias]
        if connection.vendor not in SQL_VENDORS:
            return self._read_orm(alias, key, namespace, start, newest)
        with connection.cursor() as cursor:
            sql = _read_sql(alias, connection.vendor, start)
            cursor.execute(sql, {**_key_params(key, namespace), **_tail_params(start, newest)})
            found = cursor.fetchone()
        return (None, []) if found is None else _load(alias, found)

    def _read_orm(
        self, alias: str, key: SlotKey, namespace: str, start: View, newest: int | None
    ) -> tuple[Slot | None, Rows]:
        """The Python twin of the read statement."""
        slot = self.using(alias).for_key(*key, namespace=namespace).first()  # type: ignore[attr-defined]
        if slot is None:
            return None, []
        after = slot.buffer_from_seq - 1 if start == "buffer" else slot.visible_from_seq - 1
        rows = Message.objects.using(alias).filter(slot_id=slot.pk, seq__gt=after)
        newest_first = rows.order_by("-seq").values(*_ROW_COLUMNS)
        found = list(newest_first[:newest] if newest is not None else newest_first)
        return slot, found[::-1]


def _first_seq(slot: Slot, view: View) -> int:
    return slot.buffer_from_seq if view == "buffer" else slot.visible_from_seq


def _reaches(appended: Appended, view: View) -> bool:
    """Whether the rows a save read before it reach the row right before its own."""
    last_before = appended.slot.last_seq - len(appended.rows)
    if appended.before:
        return bool(appended.before[-1]["seq"] == last_before)
    return last_before < _first_seq(appended.slot, view)


def _view_before(alias: str, appended: Appended, view: View, newest: int | None) -> Rows:
    """The rows of a saved slot's view up to the save's own (a read after its commit, which
    leaves out what other writers stored after it)."""
    slot = appended.slot
    rows = Message.objects.using(alias).filter(
        slot_id=slot.pk,
        seq__gte=_first_seq(slot, view),
        seq__lte=slot.last_seq - len(appended.rows),
    )
    newest_first = rows.order_by("-seq").values(*_ROW_COLUMNS)
    return list(newest_first[:newest] if newest is not None else newest_first)[::-1]


def _key_fields(key: SlotKey) -> dict[str, str]:
    return dict(zip(("user_id", "session_id", "agent_id"), key, strict=True))


def _key_params(key: SlotKey, namespace: str) -> dict[str, str]:
    """The statements' parameters naming a slot (as :func:`_where_key` names them)."""
    return dict(_key_fields(key), namespace=namespace)


def _rows(messages: Sequence[MessageDict]) -> list[Message]:
    """Unsaved rows of validated messages: text extracted and tokens counted once, here."""
    stamp = now_ms()
    return [
        Message(
            role=m["role"],
            content=m["content"],
            citations=m.get("citations"),
            timestamp=m.get("timestamp") or stamp,  # importers keep the original time
            text=extract_text(m["content"]),
            tokens=count_tokens(m),
        )
        for m in messages
    ]


def _number(slot: Slot, rows: list[Message]) -> None:
    """Give ``rows`` their slot and the sequence numbers that end at ``slot.last_seq``."""
    first = slot.last_seq - len(rows)
    for i, row in enumerate(rows, start=1):
        row.slot, row.seq = slot, first + i


def _row_dict(row: Message) -> dict[str, Any]:
    return {name: getattr(row, name) for name in _ROW_COLUMNS}


def _column_values(row: Message, connection: Any) -> list[Any]:
    """A row's stored columns (:func:`_stored_fields`), as Django adapts them."""
    return [f.get_db_prep_save(getattr(row, f.attname), connection) for f in _stored_fields()]


@dataclass(frozen=True)
class _Loader:
    """How rows of every slot column become a ``Slot``: the attribute names, the columns
    (in the same order) and the converters the ORM applies to those that have any."""

    names: list[str]
    columns: list[str]
    converters: list[tuple[int, list[Any], Any]]

    def select(self, table: str) -> str:
        return ", ".join(f'{table}."{column}"' for column in self.columns)


@functools.cache
def _loader(alias: str) -> _Loader:
    """The slot's :class:`_Loader` for a database (a ``RawQuerySet`` computes the same
    converters again on every query)."""
    connection = connections[alias]
    loader = _Loader([], [], [])
    for index, model_field in enumerate(_slot_model()._meta.concrete_fields):
        column = model_field.get_col(model_field.model._meta.db_table)
        functions = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
        loader.names.append(model_field.attname)
        loader.columns.append(str(model_field.column))
        if functions:
            loader.converters.append((index, functions, column))
    return loader


@receiver(setting_changed)
def _databases_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in ("DATABASES", "USE_TZ", "TIME_ZONE"):
        for cached in (_loader, _save_sql, _read_sql):
            cached.cache_clear()


def _load(alias: str, row: Sequence[Any]) -> tuple[Slot, Rows]:
    """A slot instance (``Model.from_db``) from a statement's row of every slot column,
    converted as the ORM converts them, and the view's rows in its last column.

    A ``RawQuerySet`` computes the converters and the statement's text again on every
    query; here they are built once per database (the benchmark's turn profile shows
    what that saves)."""
    connection = connections[alias]
    loader = _loader(alias)
    names = loader.names
    values = list(row[: len(names)])
    for index, functions, column in loader.converters:
        for function in functions:
            values[index] = function(values[index], column, connection)
    tail = row[len(names)]
    if isinstance(tail, str | bytes):
        tail = json.loads(tail)
    ordered = sorted(tail or [], key=itemgetter(0))  # by seq, the first of _ROW_COLUMNS
    rows = [dict(zip(_ROW_COLUMNS, found, strict=True)) for found in ordered]
    return _slot_model().from_db(alias, names, values), rows


def _slot_model() -> type[Slot]:
    return Message._meta.get_field("slot").related_model  # type: ignore[return-value]


def _retry_locked(alias: str, write: Callable[[], T]) -> T:
    """Run ``write`` (one whole transaction), retrying SQLite's "database is locked" a few
    times: a second process may hold the one write lock past the connection's timeout.
    Inside a caller's transaction nothing is retried: it is the caller's to retry."""
    if connections[alias].in_atomic_block:
        return write()
    for attempt in range(1, LOCKED_ATTEMPTS):
        try:
            return write()
        except OperationalError as exc:
            if "is locked" not in str(exc):
                raise
            delay = 0.05 * 2 ** (attempt - 1)
            logger.warning(
                "A save found the database locked (%s), attempt %s of %s; retrying in %.2f s.",
                exc,
                attempt,
                LOCKED_ATTEMPTS,
                delay,
            )
            time.sleep(delay)
    return write()


_COUNTERS = ("last_seq", "last_role", "visible_from_seq", "buffer_tokens", "updated_at")
_ROW_COLUMNS = ("seq", "role", "content", "citations", "tokens")


@functools.cache
def _stored_fields() -> tuple[Any, ...]:
    """The message fields a save writes besides its slot and sequence number: every concrete
    field of :class:`Message` but those three (a field added to the model is stored)."""
    return tuple(f for f in Message._meta.concrete_fields if f.name not in ("id", "slot", "seq"))


def _c(model: type[models.Model], name: str) -> str:
    """A model field's quoted column (PostgreSQL and SQLite quote with double quotes)."""
    return f'"{model._meta.get_field(name).column}"'  # type: ignore[union-attr]


def _where_key(prefix: str = "") -> str:
    """The condition on a slot's key, its parameters named after the fields."""
    names = ("namespace", "user_id", "session_id", "agent_id")
    return " AND ".join(f"{prefix}{_c(_slot_model(), n)} = %({n})s" for n in names)


# The statements, for PostgreSQL and SQLite, built from the models' ``_meta``. The role
# rule and the trim are those of ``_append_locked``: the last role must differ unless
# unchecked; ``visible_from_seq`` only moves forward. SET reads the old values, RETURNING
# the new ones; the view's rows are read before the INSERT (SQLite) or from the statement's
# snapshot (PostgreSQL), so they are the rows before the save. Parameters are named: Django's
# SQLite backend rewrites a statement's positional ``%s`` marks with a regular expression on
# every call (58 µs for the save's), named ones by a plain ``%`` (3 µs).
def _update(greatest: str) -> str:
    """The save's UPDATE of the slot's row (params: count, last_role, keep, now, tokens,
    check_role, first_role and the key's)."""
    slot = _slot_model()
    seq, role, visible = (_c(slot, n) for n in ("last_seq", "last_role", "visible_from_seq"))
    tokens = _c(slot, "buffer_tokens")
    return (
        f'UPDATE "{slot._meta.db_table}" SET {seq} = {seq} + %(count)s, {role} = %(last_role)s, '
        f"{visible} = CASE WHEN %(keep)s > 0 "
        f"THEN {greatest}({visible}, {seq} + %(count)s - %(keep)s + 1) ELSE {visible} END, "
        f"{_c(slot, 'updated_at')} = %(now)s, {tokens} = {tokens} + %(tokens)s "
        f"WHERE {_where_key()} "
        f"AND NOT (%(check_role)s AND {role} <> '' AND {role} = %(first_role)s)"
    )


def _insert() -> str:
    """``INSERT INTO`` the message table with its slot, sequence and stored columns."""
    columns = [
        _c(Message, "slot"),
        _c(Message, "seq"),
        *(f'"{f.column}"' for f in _stored_fields()),
    ]
    return f'INSERT INTO "{Message._meta.db_table}" ({", ".join(columns)})'


def _value_marks(n: int, casts: Sequence[str] = ()) -> list[str]:
    """The marks of the ``n``-th row's stored columns (:func:`_values_params`), with casts."""
    return [f"%(v{n}_{j})s{cast}" for j, cast in enumerate(casts or [""] * len(_stored_fields()))]


def _values_params(values: list[list[Any]]) -> dict[str, Any]:
    """The parameters of :func:`_value_marks`: each row's stored columns."""
    return {f"v{n}_{j}": v for n, row in enumerate(values) for j, v in enumerate(row)}


@functools.cache
def _insert_sql(count: int) -> str:
    """SQLite's INSERT of ``count`` rows (params: slot, each row's seqN and columns)."""
    rows = (", ".join(["%(slot)s", f"%(seq{n})s", *_value_marks(n)]) for n in range(count))
    return f"{_insert()} VALUES " + ", ".join(f"({row})" for row in rows)


def _pg_values(connection: Any, count: int) -> str:
    """PostgreSQL's ``VALUES`` of ``count`` rows, each its index then the stored columns,
    cast to their column types, named ``v(i, <columns>)``."""
    casts = [f"::{f.cast_db_type(connection)}" for f in _stored_fields()]
    names = ", ".join(f'"{f.column}"' for f in _stored_fields())
    rows = ", ".join(f"({n + 1}, {', '.join(_value_marks(n, casts))})" for n in range(count))
    return f"(VALUES {rows}) AS v(i, {names})"


_AGGREGATE = {  # vendor: the JSON aggregate, array, and value functions
    "postgresql": ("json_agg", "json_build_array", ""),
    "sqlite": ("json_group_array", "json_array", "json"),
}


def _after(view: View, slot: str) -> str:
    """The last sequence number before the view of the slot row ``slot``."""
    model = _slot_model()
    active, covered, visible = (
        f"{slot}.{_c(model, n)}" for n in ("active", "covered_seq", "visible_from_seq")
    )
    if view == "visible":
        return f"{visible} - 1"
    return f"CASE WHEN {active} THEN {covered} ELSE {visible} - 1 END"


def _tail(vendor: str, view: View | None, slot: str = "s") -> str:
    """The view's rows (:data:`_ROW_COLUMNS`) of the slot row ``slot``, newest first, as one
    JSON array (param: newest, how many)."""
    if view is None:
        return "NULL"
    agg, array, value = _AGGREGATE[vendor]
    columns = [_c(Message, name) for name in _ROW_COLUMNS]
    values = ", ".join(
        f"{value}(m.{column})"
        if isinstance(Message._meta.get_field(name), models.JSONField)
        else f"m.{column}"
        for name, column in zip(_ROW_COLUMNS, columns, strict=True)
    )
    seq = _c(Message, "seq")
    return (
        f"(SELECT {agg}({array}({values})) FROM (SELECT {', '.join(columns)} "
        f'FROM "{Message._meta.db_table}" WHERE {_c(Message, "slot")} = {slot}."id" '
        f"AND {seq} > {_after(view, slot)} ORDER BY {seq} DESC LIMIT %(newest)s) m)"
    )


def _tail_params(view: View | None, newest: int | None) -> dict[str, int]:
    if view is None:
        return {}
    return {"newest": 2**62 if newest is None else newest}


@functools.cache
def _save_sql(alias: str, vendor: str, view: View | None, count: int) -> str:
    """The save: on PostgreSQL, the UPDATE and the INSERT of ``count`` rows in one statement
    (params: the UPDATE's, the rows', the view's); on SQLite the UPDATE alone (the
    UPDATE's, the view's)."""
    table = f'"{_slot_model()._meta.db_table}"'
    if vendor == "sqlite":  # RETURNING names the table itself
        returning = f"{_loader(alias).select(table)}, {_tail(vendor, view, table)}"
        return f"{_update('MAX')} RETURNING {returning}"
    columns = ", ".join(f'v."{f.column}"' for f in _stored_fields())
    last_seq = _c(_slot_model(), "last_seq")
    return (
        f"WITH s AS ({_update('GREATEST')} RETURNING *), "
        f'ins AS ({_insert()} SELECT s."id", s.{last_seq} - %(count)s + v.i, {columns} '
        f"FROM s, {_pg_values(connections[alias], count)}) "
        f"SELECT {_loader(alias).select('s')}, {_tail(vendor, view)} FROM s"
    )


@functools.cache
def _read_sql(alias: str, vendor: str, view: View) -> str:
    """A slot by its key and its view's rows (params: the key's and the view's)."""
    return (
        f"SELECT {_loader(alias).select('s')}, {_tail(vendor, view)} "
        f'FROM "{_slot_model()._meta.db_table}" s WHERE {_where_key("s.")}'
    )

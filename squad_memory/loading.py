"""Rows made model instances as the ORM would make them, without its per-row work.

:func:`load_slot` applies the converters Django would (a datetime parsed, JSON
decoded), remembering each column's last conversion; :func:`instance` builds a
model instance without the constructor's per-field work.
"""

from __future__ import annotations

import datetime
import functools
import marshal
from collections.abc import Sequence
from typing import Any, TypeVar

from django.core.signals import setting_changed
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init
from django.dispatch import receiver

from squad_memory.models import Slot

M = TypeVar("M", bound=Model)

Converter = tuple[int, Any, list[Any], bool]

#: Field types whose conversion (a datetime parsed, JSON decoded) is worth remembering.
_REMEMBERED = {"DateTimeField", "JSONField"}


@functools.cache
def _slot_loader(alias: str) -> tuple[list[str], list[Converter]]:
    """The slot's attribute names and, for the columns that have any, the converters
    the ORM would apply (column index, column, functions, whether worth remembering)."""
    connection = connections[alias]
    names, converters = [], []
    for index, model_field in enumerate(Slot._meta.concrete_fields):
        column = model_field.get_col(Slot._meta.db_table)
        found = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
        names.append(model_field.attname)
        if found:
            remember = model_field.get_internal_type() in _REMEMBERED
            converters.append((index, column, found, remember))
    return names, converters


#: Per (alias, column index): the last raw text converted, and what it became as a
#: value (immutable) or marshal bytes (JSON: each slot gets its own copy). A slot read
#: again, as every save and fetch does, mostly holds the same created_at and summary.
_converted: dict[tuple[str, int], tuple[str, Any, bool]] = {}
_IMMUTABLE = (datetime.datetime, str, int, float, bool)


def written_time(connection: BaseDatabaseWrapper, model_field: Any, now: Any) -> Any:
    """``model_field.get_db_prep_value(now, connection, prepared=True)`` for a save's
    ``timezone.now()``, remembered as what reading it back gives where that is exactly
    ``now``: on SQLite in UTC, the text Django's adapter writes (the naive UTC time's
    ``str``), made without the adapter's checks, read back without a parse."""
    utc = datetime.UTC
    if (
        connection.vendor == "sqlite"
        and type(now) is datetime.datetime
        and now.tzinfo is utc
        and connection.timezone is utc  # None without USE_TZ
    ):
        text = str(now.replace(tzinfo=None))
        index = _remembered_index(connection.alias, model_field.attname)
        if index is not None:
            _converted[(connection.alias, index)] = (text, now, False)
        return text
    return model_field.get_db_prep_value(now, connection, prepared=True)


@functools.cache
def _remembered_index(alias: str, name: str) -> int | None:
    names, converters = _slot_loader(alias)
    index = names.index(name)
    return index if any(c[0] == index and c[3] for c in converters) else None


def clear_converted() -> None:
    """Forget remembered conversions and converters (settings that change them did)."""
    _converted.clear()
    _slot_loader.cache_clear()
    _remembered_index.cache_clear()


def _convert(alias: str, connection: BaseDatabaseWrapper, converter: Converter, raw: Any) -> Any:
    index, column, functions, remember = converter
    remember = remember and type(raw) is str  # exact: equal text, equal value
    last = _converted.get((alias, index)) if remember else None
    if last is not None and last[0] == raw:
        return marshal.loads(last[1]) if last[2] else last[1]
    value = raw
    for function in functions:
        value = function(value, column, connection)
    if remember:
        try:  # a value of other types (a custom JSON decoder's) is not remembered
            copied = not isinstance(value, _IMMUTABLE)
            _converted[(alias, index)] = (raw, marshal.dumps(value, 2) if copied else value, copied)
        except ValueError:
            pass
    return value


def load_slot(alias: str, connection: BaseDatabaseWrapper, row: Sequence[Any]) -> Slot:
    """A ``Slot`` from its row as the driver returned it (the ORM's converters applied)."""
    names, converters = _slot_loader(alias)
    values = list(row)
    for converter in converters:
        index = converter[0]
        values[index] = _convert(alias, connection, converter, values[index])
    slot: Slot = instance(Slot, dict(zip(names, values, strict=True)), db=alias)
    return slot


def instance(model: type[M], values: dict[str, Any], *, db: str | None = None) -> M:
    """A ``model`` instance with these attribute values, as ``Model.from_db`` (``db`` given:
    a row read) or ``Model(...)`` (unsaved) would make it, without the constructor's
    per-field work: the hot path builds a few per call. Falls back to the constructor
    when anything listens to ``pre_init``/``post_init`` for the model."""
    if (pre_init.receivers or post_init.receivers) and (
        pre_init.has_listeners(model) or post_init.has_listeners(model)
    ):
        ordered = [values.get(f.attname) for f in model._meta.concrete_fields]
        if db is None:
            return model(*ordered)
        return model.from_db(db, [f.attname for f in model._meta.concrete_fields], ordered)
    new = model.__new__(model)
    state = ModelState()
    if db is not None:
        state.adding, state.db = False, db
    new._state = state
    new.__dict__.update(values)
    return new


@receiver(setting_changed, dispatch_uid="squad_memory.loading")
def _setting_changed(*, setting: str, **kwargs: Any) -> None:
    """Conversions made under the old ``DATABASES`` (or time zone) are forgotten."""
    if setting in ("DATABASES", "TIME_ZONE", "USE_TZ"):
        clear_converted()

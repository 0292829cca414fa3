"""The native async path: a turn's saves and fetch on the event loop, without a thread hop.

The async ChatStorage methods used to run their synchronous twins through
``sync_to_async``; a thread hop costs more than SQLite's whole save. Here the
common case (an existing slot of the ORM journal, the tail cached or read in
one query) runs on the loop through :mod:`~squad_memory.native.drivers`, with
the same statements, rules and caches as the synchronous path:

- a save is the one-statement save (PostgreSQL) or ``BEGIN IMMEDIATE``, the same
  slot UPDATE with the role rule and the INSERT, ``COMMIT`` (SQLite);
- a fetch reads the slot row, then the tail from the per-process cache, or one
  query when another process wrote since.

Every other case returns None and the caller takes the thread path, which
handles everything: a new slot, a refused role, a compression to claim (claimed
and run through the thread path, as before), an inactive buffer due for
activation, hard limits needing their own query, a locked SQLite database, a
foreign journal, a database without a native driver, a call nested in
``async_to_sync`` (the caller's thread may hold a transaction the native
connection cannot see), and ``SQUAD_MEMORY["NATIVE_ASYNC"] = False``.

A read whose connection broke under it (a terminated backend) runs once more on a
fresh connection; a save's database error reaches the caller as Django's own (whether
a save on a lost connection committed is unknown, so it is not repeated).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from asgiref.sync import AsyncToSync
from django.db import DEFAULT_DB_ALIAS, DatabaseError, router
from django.utils import timezone

from squad_memory import buffer, history, loading, saving, sql, tails, tokens
from squad_memory.conf import app_settings
from squad_memory.history import AppendResult, SlotKey
from squad_memory.journal import OrmJournal
from squad_memory.memory import Memory, Saved
from squad_memory.messages import MessageDict, to_dicts, trim_size
from squad_memory.models import Message, Slot
from squad_memory.native.drivers import Driver
from squad_memory.native.errors import Unavailable
from squad_memory.native.loops import driver
from squad_memory.rows import accepted_dict, build_rows, cached_row, number

T = TypeVar("T")

logger = logging.getLogger("squad_memory")

__all__ = ["answer", "fetch", "read", "save", "usable"]


def usable(memory: Memory) -> str | None:
    """The alias the native path would use for ``memory``, or None (the thread path)."""
    if not app_settings.native_async or type(memory.journal) is not OrmJournal:
        return None
    if _in_async_to_sync():
        return None  # called from sync code through async_to_sync: stay on its thread
    alias: str = router.db_for_write(Slot) if router.routers else DEFAULT_DB_ALIAS
    return alias


#: The context variable behind asgiref's ``AsyncToSync.executors`` (a ``Local``), if it
#: has one: nothing set in it means nothing is set in the ``Local``.
_EXECUTORS_VAR: ContextVar[Any] | None = getattr(
    getattr(AsyncToSync.executors, "_storage", None), "_data", None
)
if not isinstance(_EXECUTORS_VAR, ContextVar):
    _EXECUTORS_VAR = None


def _in_async_to_sync() -> bool:
    """Whether this call runs inside ``async_to_sync`` (asgiref's executor is set).

    asgiref's ``Local`` answers a missing attribute by raising inside, several µs per
    call; when its context variable holds nothing, no attribute is set and the answer
    is known without asking."""
    if _EXECUTORS_VAR is not None and _EXECUTORS_VAR.get(None) is None:
        return False
    return getattr(AsyncToSync.executors, "current", None) is not None


async def _driver(memory: Memory) -> Driver | None:
    alias = usable(memory)
    if alias is None:
        return None
    try:
        return await driver(alias)
    except Unavailable as exc:
        _thread_path(exc)
        return None


async def save(
    memory: Memory, key: SlotKey, messages: list[Any], *, check_role: bool, size: int | None
) -> Saved | None:
    """:meth:`Memory.save` on the loop; None: take the thread path (nothing was written)."""
    dicts = to_dicts(messages)
    if not dicts or len(dicts) > saving.ONE_STATEMENT_MAX:
        return None
    if tokens.counter() is not tokens.estimate:  # it may do I/O or use the ORM: not here
        return None
    found_driver = await _driver(memory)
    if found_driver is None:
        return None
    alias, wrapper = found_driver.alias, found_driver.wrapper
    rows = build_rows(None, 0, dicts)
    full_key = (memory.namespace, *key)
    keep, now = trim_size(size), timezone.now()
    loaded: list[Slot] = []
    inserted: list[Any] = []  # SQLite: the INSERT's values
    try:
        if found_driver.vendor == "postgresql":
            params = saving.one_statement_params(
                wrapper, full_key, rows, check_role=check_role, keep=keep, now=now
            )
            found = await found_driver.save(saving.one_statement(alias, len(rows)), params, None)
        else:
            params = saving.save_params(
                wrapper, full_key, rows, check_role=check_role, keep=keep, now=now
            )
            found = await found_driver.save(
                saving.save_update(alias),
                params,
                lambda row: _insert(found_driver, row, rows, loaded, inserted),
            )
    except Unavailable as exc:
        _thread_path(exc)
        return None
    if found is None:  # a new slot or a refused role: the thread path tells them apart
        return None
    if loaded:  # SQLite: the rows were numbered for the INSERT
        slot = loaded[0]
        accepted = [accepted_dict(r) for r in rows]
        appended = AppendResult(slot, accepted, rows=rows, locked=False)
    else:
        slot = loading.load_slot(alias, wrapper, found)
        appended = history.saved_returning(slot, rows)
    width = len(sql.MESSAGE_COLUMNS)
    cached = [
        cached_row(row, inserted[i * width : (i + 1) * width] if inserted else None)
        for i, row in enumerate(rows)
    ]
    tails.put(alias, slot.pk, cached)
    saved = LoopSaved(appended, driver=found_driver)
    if memory.due_after(appended):  # about once per trigger_at turns
        try:
            saved.compression = await _thread(memory.compress_after)(slot)
        except DatabaseError as exc:  # the save is stored: report, never fail it now
            logger.warning(
                "squad_memory: slot %s: the save is stored, its compression could not be "
                "claimed (%s); the next save or the sweep starts it",
                slot.pk,
                exc,
            )
    return saved


def _insert(
    found_driver: Driver, row: Any, rows: list[Message], loaded: list[Slot], inserted: list[Any]
) -> tuple[str, list[Any]]:
    """The INSERT of ``rows`` after the slot row the UPDATE returned (SQLite); the slot
    it loads goes to ``loaded``, the INSERT's values to ``inserted``."""
    slot = loading.load_slot(found_driver.alias, found_driver.wrapper, row)
    loaded.append(slot)
    number(slot, rows, slot.last_seq - len(rows))
    insert = sql.insert_statement(found_driver.alias, len(rows))
    inserted[:] = sql.message_params(found_driver.wrapper, rows)
    return insert, inserted


async def fetch(memory: Memory, key: SlotKey) -> list[MessageDict] | None:
    """:meth:`Memory.fetch` on the loop; None: take the thread path."""
    return await _retried(memory, lambda found_driver: _fetch(memory, key, found_driver))


async def _fetch(memory: Memory, key: SlotKey, found_driver: Driver) -> list[MessageDict] | None:
    alias = found_driver.alias
    try:
        found = await found_driver.fetchall(
            sql.statements(alias).select_slot, [memory.namespace, *key]
        )
    except Unavailable as exc:
        _thread_path(exc)
        return None
    if not found:
        return []  # no slot: no history (the ORM journal has no seed)
    slot = loading.load_slot(alias, found_driver.wrapper, found[0])
    if memory.policy is None:  # a plain history: its visible rows, as journal.visible
        return await read(found_driver, slot, lambda: memory.visible(slot))
    if not slot.active and memory.needs_activation(slot):
        return None
    return await read(found_driver, slot, lambda: memory.current(slot))


@dataclass
class LoopSaved(Saved):
    """A save done on the loop, with the driver it used (its answer reads through it)."""

    driver: Driver | None = None


async def answer(memory: Memory, saved: Saved, compute: Callable[[], T]) -> T | None:
    """What a native save returns, ``compute()`` over the slot as saved; None: compute it
    on the thread path."""
    used = saved.driver if isinstance(saved, LoopSaved) else None
    return await _retried(
        memory, lambda found_driver: read(found_driver, saved.slot, compute), used
    )


async def _retried(
    memory: Memory,
    reading: Callable[[Driver], Awaitable[T | None]],
    found_driver: Driver | None = None,
) -> T | None:
    """``reading(driver)``, a read on this loop's connection (``found_driver``: the one this
    call's save used); a read whose connection broke under it (a terminated backend, a
    lost network) runs once more on a fresh connection: a read is safe to repeat (a save
    is not: whether it committed is unknown)."""
    if found_driver is None or found_driver.broken:
        found_driver = await _driver(memory)
    if found_driver is None:
        return None
    try:
        return await reading(found_driver)
    except DatabaseError as exc:
        if not found_driver.broken:
            raise
        logger.debug("squad_memory: %s: reading again on a new connection", exc)
    found_driver = await _driver(memory)  # the broken one is replaced
    return None if found_driver is None else await reading(found_driver)


async def read(found_driver: Driver, slot: Slot, compute: Callable[[], T]) -> T | None:
    """``compute()``, a buffer read of ``slot``, from the tail cache; on a miss the tail
    is read in one query, cached, and ``compute`` runs again. None: take the thread path."""
    for attempt in range(2):
        try:
            with buffer.cached_only():
                return compute()
        except buffer.NotCached as miss:
            if (
                attempt
                or not miss.servable
                or miss.slot_id != slot.pk
                or slot.last_seq - miss.after_seq > tails.MAX_ROWS
            ):
                return None
            try:
                await _load_tail(found_driver, slot, miss.after_seq)
            except Unavailable as exc:
                _thread_path(exc)
                return None
    return None  # not reached: the second miss returns above


async def _load_tail(found_driver: Driver, slot: Slot, after_seq: int) -> None:
    """Read the slot's rows ``after_seq < seq <= last_seq`` and cache them."""
    statement = sql.statements(found_driver.alias).messages_between
    fetched = await found_driver.fetchall(statement, [slot.pk, after_seq, slot.last_seq])
    rows = sql.decode_messages(found_driver.wrapper, fetched)
    if rows and rows[0]["seq"] == after_seq + 1 and rows[-1]["seq"] == slot.last_seq:
        tails.put(found_driver.alias, slot.pk, rows)


def _thread_path(exc: Unavailable) -> None:
    logger.debug("squad_memory: %s: taking the thread path", exc)


def _thread(function: Callable[..., T]) -> Callable[..., Any]:
    from asgiref.sync import sync_to_async

    return sync_to_async(function)

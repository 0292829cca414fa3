"""The native async path's own connections: one per event loop and database alias.

PostgreSQL: a ``psycopg.AsyncConnection`` in autocommit, opened with the parameters
Django itself would use (adapters, time zone, role, client-side binding unless
``server_side_binding``); its statements await the socket, no thread is involved.
SQLite: a ``sqlite3`` connection opened by Django's own ``get_new_connection`` (same
pragmas, functions and ``init_command``) with ``busy_timeout = 0``: a statement
either runs at once or fails at once with "database is locked", and the caller
takes the thread path, which waits. Statements run to completion inside one call,
so one connection serves every task of its loop.

:class:`Unavailable` means "nothing was sent: take the thread path".
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from django.db import DatabaseError, connections

from squad_memory.native.errors import Unavailable, reraise

logger = logging.getLogger("squad_memory")

#: Given the slot row an UPDATE returned, the INSERT of the save's rows and its parameters.
InsertFor = Callable[[Any], "tuple[str, list[Any]]"]

#: Vendors the native path speaks to.
VENDORS = ("postgresql", "sqlite")


class Driver:
    """One connection of one loop to one alias."""

    vendor = ""
    #: The async generator whose finalization at loop shutdown closes the connection.
    keeper: AsyncIterator[None] | None = None

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.wrapper = connections[alias]  # for ops, converters and settings only: no I/O

    async def fetchall(self, sql: str, params: Sequence[Any]) -> list[Any]:
        raise NotImplementedError

    async def save(self, update: str, params: Sequence[Any], insert: InsertFor | None) -> Any:
        """Run ``update`` (RETURNING the slot row) and, if it returned a row, the INSERT
        ``insert(row)`` gives, in one transaction; the slot row, or None. Without
        ``insert``, ``update`` is the whole save (PostgreSQL's one statement)."""
        raise NotImplementedError

    @property
    def broken(self) -> bool:
        raise NotImplementedError

    def discard(self) -> None:
        """Close without awaiting (the loop may be gone)."""


class Postgres(Driver):
    vendor = "postgresql"

    def __init__(self, alias: str, conn: Any) -> None:
        super().__init__(alias)
        self.conn = conn
        self.busy = asyncio.Lock()

    @classmethod
    async def open(cls, alias: str) -> Postgres:
        try:
            import psycopg
        except ImportError as exc:  # psycopg2: the thread path only
            raise Unavailable("the native path needs psycopg 3") from exc
        wrapper = connections[alias]
        params = dict(wrapper.get_connection_params())
        if params.pop("pool", None):
            raise Unavailable("a psycopg pool is configured: the thread path uses it")
        binding = wrapper.settings_dict["OPTIONS"].get("server_side_binding") is True
        params["cursor_factory"] = psycopg.AsyncCursor if binding else psycopg.AsyncClientCursor
        try:
            conn = await psycopg.AsyncConnection.connect(autocommit=True, **params)
        except psycopg.Error as exc:
            raise Unavailable(f"cannot connect: {exc}") from exc
        zone = wrapper.timezone_name
        role = wrapper.settings_dict["OPTIONS"].get("assume_role")
        async with conn.cursor() as cursor:
            if zone and conn.info.parameter_status("TimeZone") != zone:
                await cursor.execute(wrapper.ops.set_time_zone_sql(), [zone])
            if role:
                await cursor.execute(wrapper.ops.compose_sql("SET ROLE %s", [role]))  # type: ignore[attr-defined]
        return cls(alias, conn)

    @property
    def broken(self) -> bool:
        return bool(self.conn.closed or self.conn.broken)

    async def fetchall(self, sql: str, params: Sequence[Any]) -> list[Any]:
        if self.busy.locked():  # another task of this loop is using it: don't queue
            raise Unavailable("the loop's connection is busy")
        async with self.busy:
            try:
                cursor = await self.conn.execute(sql, params)
                return list(await cursor.fetchall())
            except Exception as exc:
                reraise(exc)

    async def save(self, update: str, params: Sequence[Any], insert: InsertFor | None) -> Any:
        # One statement (saving.one_statement): the caller passes the CTE as ``update``.
        found = await self.fetchall(update, params)
        return found[0] if found else None

    def discard(self) -> None:
        if not self.conn.closed:
            self.conn.pgconn.finish()


class SQLite(Driver):
    vendor = "sqlite"

    def __init__(self, alias: str, conn: Any) -> None:
        super().__init__(alias)
        self.conn = conn

    @classmethod
    async def open(cls, alias: str) -> SQLite:
        def connect() -> Any:
            wrapper = connections[alias]
            params = wrapper.get_connection_params()
            params["detect_types"] = 0  # Django's own converters parse what load_slot reads
            conn = wrapper.get_new_connection(params)
            conn.isolation_level = None  # autocommit; a save opens BEGIN IMMEDIATE itself
            conn.execute("PRAGMA busy_timeout = 0")
            return conn

        try:  # Django refuses to connect from a running loop: open in a thread, once
            return cls(alias, await asyncio.to_thread(connect))
        except DatabaseError as exc:
            raise Unavailable(f"cannot open: {exc}") from exc
        except Exception as exc:  # sqlite3.Error
            raise Unavailable(f"cannot open: {exc}") from exc

    @property
    def broken(self) -> bool:
        return False

    @staticmethod
    @functools.cache
    def _sql(sql: str) -> str:
        return sql.replace("%s", "?")  # the statements hold no other %

    async def fetchall(self, sql: str, params: Sequence[Any]) -> list[Any]:
        try:
            return self.conn.execute(self._sql(sql), params).fetchall()  # type: ignore[no-any-return]
        except Exception as exc:
            reraise(exc)

    async def save(self, update: str, params: Sequence[Any], insert: InsertFor | None) -> Any:
        conn = self.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except Exception as exc:
            reraise(exc)
        try:
            found = conn.execute(self._sql(update), params).fetchone()
            if found is not None:
                assert insert is not None, "SQLite saves in two statements"
                statement, values = insert(found)
                conn.execute(self._sql(statement), values)
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:  # an error may have ended it (RAISE(ROLLBACK), a full disk)
                conn.execute("ROLLBACK")  # nothing of this save is written
            reraise(exc)
        return found

    def discard(self) -> None:
        self.conn.close()


# -- one driver per (process, loop, alias) ---------------------------------------------
_drivers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Driver]] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()
#: The loop, alias and driver of the last call, swapped whole (threads may race on it).
_last: tuple[Any, str, Driver | None] = (None, "", None)
_inherited: list[Any] = []  # a parent's connections after fork: never used, never closed


def _forget_after_fork() -> None:
    global _last
    _inherited.append(dict(_drivers))
    _drivers.clear()
    _last = (None, "", None)


os.register_at_fork(after_in_child=_forget_after_fork)


async def driver(alias: str) -> Driver:
    """This loop's driver for ``alias``, opened on first use (again if it broke)."""
    loop = asyncio.get_running_loop()
    global _last
    last_loop, last_alias, last = _last
    if last_loop is loop and last_alias == alias and last is not None and not last.broken:
        return last  # the common case: the same loop and alias as the last call
    mine = _drivers.get(loop)
    found = mine.get(alias) if mine is not None else None
    if found is not None and not found.broken:
        _last = (loop, alias, found)
        return found
    with _lock:
        mine = _drivers.setdefault(loop, {})
        _close_dead_loops()
    if found is not None:
        found.discard()
    vendor = connections[alias].vendor
    if vendor == "postgresql":
        opened: Driver = await Postgres.open(alias)
    elif vendor == "sqlite":
        opened = await SQLite.open(alias)
    else:
        raise Unavailable(f"no native driver for {vendor}")
    opened.keeper = _closed_with_loop(opened)
    await opened.keeper.__anext__()
    mine[alias] = opened
    _last = (loop, alias, opened)
    return opened


async def _closed_with_loop(opened: Driver) -> AsyncIterator[None]:
    """Closes ``opened`` when its loop shuts down: ``asyncio.run`` (and asgiref, uvicorn...)
    finalize a loop's live async generators before closing it (PEP 525)."""
    try:
        yield
    finally:
        opened.discard()


def _close_dead_loops() -> None:
    for loop in [loop for loop in _drivers if loop.is_closed()]:
        for found in _drivers.pop(loop).values():
            try:
                found.discard()
            except Exception:  # a connection already gone
                logger.debug("closing a native connection failed", exc_info=True)


def close_all() -> None:
    """Close every native connection of this process (tests, settings changes)."""
    global _last
    with _lock:
        for mine in list(_drivers.values()):
            for found in mine.values():
                try:
                    found.discard()
                except Exception:
                    logger.debug("closing a native connection failed", exc_info=True)
        _drivers.clear()
        _last = (None, "", None)

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
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from django.db import DatabaseError, connections

from squad_memory.native.errors import Unavailable, reraise

logger = logging.getLogger("squad_memory")

#: A PostgreSQL connection idle longer than this is checked before its next statement.
IDLE_CHECK_SECONDS = 30.0

#: Given the slot row an UPDATE returned, the INSERT of the save's rows and its parameters.
InsertFor = Callable[[Any], "tuple[str, list[Any]]"]


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
        self.used = time.monotonic()

    @classmethod
    async def open(cls, alias: str) -> Postgres:
        try:
            import psycopg
        except ImportError as exc:  # psycopg2: the thread path only
            raise Unavailable("the native path needs psycopg 3") from exc
        from psycopg import sql

        wrapper = connections[alias]
        options = wrapper.settings_dict["OPTIONS"]
        if options.get("pool"):
            raise Unavailable("a psycopg pool is configured: the thread path uses it")
        params = dict(wrapper.get_connection_params())
        binding = options.get("server_side_binding") is True
        params["cursor_factory"] = psycopg.AsyncCursor if binding else psycopg.AsyncClientCursor
        try:
            conn = await psycopg.AsyncConnection.connect(autocommit=True, **params)
        except psycopg.Error as exc:
            raise Unavailable(f"cannot connect: {exc}") from exc
        zone, role = wrapper.timezone_name, options.get("assume_role")
        try:  # as Django configures its own connections
            if zone and conn.info.parameter_status("TimeZone") != zone:
                await conn.execute(wrapper.ops.set_time_zone_sql(), [zone])
            if role:
                await conn.execute(sql.SQL("SET ROLE {}").format(sql.Literal(role)))
        except psycopg.Error as exc:
            await conn.close()
            raise Unavailable(f"cannot set up the connection: {exc}") from exc
        return cls(alias, conn)

    @property
    def broken(self) -> bool:
        return bool(self.conn.closed or self.conn.broken)

    async def fetchall(self, sql: str, params: Sequence[Any]) -> list[Any]:
        if self.busy.locked():  # another task of this loop is using it: don't queue
            raise Unavailable("the loop's connection is busy")
        async with self.busy:
            if time.monotonic() - self.used > IDLE_CHECK_SECONDS:
                await self._check()
            try:
                cursor = await self.conn.execute(sql, params)
                return list(await cursor.fetchall())
            except Exception as exc:
                reraise(exc)
            finally:
                self.used = time.monotonic()

    async def _check(self) -> None:
        """A connection idle for a while may have been dropped (a pooler's or the server's
        idle timeout, a restart): one round trip tells, before a save is sent on it."""
        try:
            await self.conn.execute("SELECT 1")
        except Exception as exc:
            await self.conn.close()  # broken from now on: the next call opens another
            raise Unavailable(f"the idle connection is gone: {exc}") from exc

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

        if _private_memory(connections[alias].settings_dict["NAME"]):
            raise Unavailable("an in-memory SQLite database is private to its connection")
        try:  # Django refuses to connect from a running loop: open in a thread, once
            return cls(alias, await asyncio.to_thread(connect))
        except DatabaseError as exc:
            raise Unavailable(f"cannot open: {exc}") from exc
        except Exception as exc:  # sqlite3.Error
            raise Unavailable(f"cannot open: {exc}") from exc

    @property
    def broken(self) -> bool:
        return bool(self.conn.in_transaction)  # a failed ROLLBACK left one open

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


def _private_memory(name: Any) -> bool:
    """An in-memory SQLite database no second connection can see (not shared cache)."""
    text = str(name)
    return text == ":memory:" or ("mode=memory" in text and "cache=shared" not in text)

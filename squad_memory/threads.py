"""Where the work of async callers runs: database calls on a database thread, summarizers never
there. ``docs/explanation/data-path.md`` tells the whole model.

- Inside a Django request (Django's ASGI handler gives each request its own
  ``ThreadSensitiveContext``) or below a synchronous caller (``async_to_sync``), a database
  call runs where Django's own ``sync_to_async`` runs it: on the request's or the caller's
  thread, with its connection and its transaction (``ATOMIC_REQUESTS``, an ``atomic()``
  block around ``async_to_sync``). Django opens and closes that connection around the request.
- Anywhere else (an ASGI app that is not Django, a bot, ``asyncio.run`` in a task or a
  script), on one of ``DATABASE_THREADS`` threads the process shares, so that conversations
  never queue behind one thread and a process holds at most that many connections per
  database, whatever the number of event loops. Each call is served as Django serves a
  request: :func:`django.db.close_old_connections` before and after it (``CONN_MAX_AGE``,
  ``CONN_HEALTH_CHECKS``, a connection with errors), and a call whose connection proves dead
  before any of its statements ran (:func:`never_ran`) is run again, once, on a new one.
- A synchronous summarizer runs on ``SUMMARIZER_THREADS`` threads of its own; an async one
  is awaited in the caller's event loop. Neither ever holds a database thread.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import AsyncToSync, SyncToAsync, sync_to_async
from django.db import DatabaseError, close_old_connections, connections

from squad_memory.conf import app_settings

logger = logging.getLogger("squad_memory")

P = ParamSpec("P")
R = TypeVar("R")

#: SQLSTATE classes of a statement the server refused before running it: a connection
#: exception (08) or an operator's intervention (57: shutdown, terminated, idle timeout).
REFUSED_SQLSTATES = ("08", "57")


async def database(func: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """Run ``func`` (synchronous code that queries the database) for an async caller: on the
    request's or the synchronous caller's thread if there is one, else on a database thread
    (see the module's text)."""
    if in_caller_thread():
        return await sync_to_async(func, thread_sensitive=True)(*args, **kwargs)
    result: R = await _served_on(database_threads())(func, *args, **kwargs)
    return result


async def summarizer_thread(func: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """Run a synchronous summarizer on a summarizer thread (never a database thread)."""
    call = functools.partial(_unconnected, func, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(summarizer_threads(), call)


def in_caller_thread() -> bool:
    """Whether this task's database work belongs to a thread that owns it: a Django
    request's (its ``ThreadSensitiveContext``) or a synchronous caller's (``async_to_sync``)."""
    if getattr(AsyncToSync.executors, "current", None) is not None:
        return True
    if SyncToAsync.thread_sensitive_context.get(None) is not None:
        return True
    return asyncio.get_running_loop() in AsyncToSync.loop_thread_executors


def served(func: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """Run ``func`` on a database thread as Django serves a request, retrying it once when
    its connection proves dead before any of its statements ran."""
    close_old_connections()
    _watched()
    call = _served.call = Call()
    try:
        try:
            return func(*args, **kwargs)
        except DatabaseError as exc:
            if call.reached:
                raise
            logger.warning(
                "A database call found its connection dead (%s: %s) before any statement "
                "ran; it runs again on a new connection.",
                type(exc).__name__,
                exc,
            )
        for connection in connections.all(initialized_only=True):
            connection.close()
        return func(*args, **kwargs)
    finally:
        _served.call = None
        close_old_connections()


def unrepeatable() -> None:
    """Say that the call in progress changed something outside the database (a foreign
    store took messages): it must not run again, whatever becomes of its connection."""
    call = getattr(_served, "call", None)
    if call is not None:
        call.reached = True


class Call:
    """One call on a database thread: whether any of its statements may have reached the
    database (run, or been cut off while it ran)."""

    reached = False


_served = threading.local()


def _watched() -> None:
    """Put :func:`_watch` among the execute wrappers of this thread's connections (it stays
    across reconnections)."""
    for alias in connections:
        wrappers = connections[alias].execute_wrappers
        if _watch not in wrappers:
            wrappers.insert(0, _watch)


def _watch(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
    """Tell the database thread's call in progress whether a statement reached the database."""
    call = getattr(_served, "call", None)
    if call is None:
        return execute(sql, params, many, context)
    closed = _is_closed(context["connection"].connection)
    try:
        result = execute(sql, params, many, context)
    except DatabaseError as exc:
        if not (closed or never_ran(exc)):
            call.reached = True
        raise
    call.reached = True
    return result


def never_ran(exc: BaseException) -> bool:
    """Whether the database refused a statement before running it: a driver error whose
    SQLSTATE is of a class in :data:`REFUSED_SQLSTATES` (PostgreSQL's drivers give one)."""
    cause = exc.__cause__
    state = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    return isinstance(state, str) and state[:2] in REFUSED_SQLSTATES


def _is_closed(raw: Any) -> bool:
    """Whether the driver already knows its connection is closed (then nothing is sent)."""
    return raw is not None and bool(getattr(raw, "closed", False))


def _unconnected(func: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """A summarizer thread holds no connection between calls (a summarizer may query)."""
    try:
        return func(*args, **kwargs)
    finally:
        connections.close_all()


def database_threads() -> ThreadPoolExecutor:
    """The process's database threads (``DATABASE_THREADS`` of them)."""
    return _threads("squad-memory-db", app_settings.database_threads, os.getpid())


def summarizer_threads() -> ThreadPoolExecutor:
    """The process's summarizer threads (``SUMMARIZER_THREADS`` of them)."""
    return _threads("squad-memory-summarizer", app_settings.summarizer_threads, os.getpid())


@functools.cache
def _threads(name: str, size: int, pid: int) -> ThreadPoolExecutor:
    """One pool per name, size and process: a forked child (a Celery or a gunicorn worker)
    starts pools of its own, and a changed setting takes effect on the next call."""
    return ThreadPoolExecutor(max_workers=size, thread_name_prefix=name)


@functools.cache
def _served_on(pool: ThreadPoolExecutor) -> SyncToAsync[..., Any]:
    """:func:`served` on ``pool``, wrapped once (not on every call)."""
    return SyncToAsync(served, thread_sensitive=False, executor=pool)


def close_database_threads(timeout: float = 10.0) -> None:
    """Close the connections of every database thread and stop the threads (the next call
    starts new ones): at a process's shutdown, or after a test that changed the databases."""
    pool = database_threads()
    size = app_settings.database_threads
    barrier = threading.Barrier(size)

    def close() -> None:  # every thread takes one: each waits at the barrier for the others
        try:
            barrier.wait(timeout)
        finally:
            connections.close_all()

    for future in [pool.submit(close) for _ in range(size)]:
        future.exception(timeout)
    pool.shutdown(wait=True)
    _threads.cache_clear()
    _served_on.cache_clear()

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
  request: Django's check of :func:`django.db.close_old_connections` on each of the
  thread's connections before and after it (``CONN_MAX_AGE``, ``CONN_HEALTH_CHECKS``, a
  connection with errors), and a call whose connection proves dead
  before any of its statements ran (:func:`never_ran`) is run again, once, on a new one.
- A synchronous summarizer runs on ``SUMMARIZER_THREADS`` threads of its own; an async one
  is awaited in the caller's event loop. Neither ever holds a database thread.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import AsyncToSync, SyncToAsync, sync_to_async
from django.db import DatabaseError, connections
from django.db.backends.signals import connection_created
from django.dispatch import receiver

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
    _close_old_connections()
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
    except BaseException:
        _adopt_connections()
        raise
    finally:
        _served.call = None
        _close_old_connections()


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


@receiver(connection_created, dispatch_uid="squad_memory.threads")
def _serving(sender: Any, connection: Any, **kwargs: Any) -> None:
    """A connection opened in a call on a database thread: :func:`_watch` among its execute
    wrappers (they stay across reconnections), and the connection among the thread's."""
    if getattr(_served, "call", None) is not None and _watch not in connection.execute_wrappers:
        connection.execute_wrappers.insert(0, _watch)
        alias = connection.alias  # the thread's own, not a temporary copy (``_nodb_cursor``)
        if alias in connections.settings and connections[alias] is connection:
            _served.__dict__.setdefault("connections", []).append(connection)


def _adopt_connections() -> None:
    """After a call that raised: a connection whose setup failed after it opened (a failing
    ``SET ROLE``, another receiver of ``connection_created``) was never announced; it joins
    the thread's, watched, so that the check after the call closes it as Django would."""
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None:
            _serving(None, connection)


def _close_old_connections() -> None:
    """Django's :func:`~django.db.close_old_connections` over the connections this database
    thread opened (every connection a call on it uses opens in a call, and one that never
    said so is adopted after the call): the same check of each, without looking up every
    alias of the settings in Django's per-thread registry, which took most of its 5 µs,
    twice a call."""
    for connection in _served.__dict__.get("connections", ()):
        connection.close_if_unusable_or_obsolete()


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


def database_threads() -> DatabaseThreads:
    """The process's database threads (``DATABASE_THREADS`` of them)."""
    key = (app_settings.database_threads, os.getpid())
    pool = _DATABASE_THREADS.get(key)
    if pool is None:  # setdefault: two threads asking at once get the same pool
        new = DatabaseThreads(key[0], "squad-memory-db", finalizer=connections.close_all)
        pool = _DATABASE_THREADS.setdefault(key, new)
    return pool


def summarizer_threads() -> ThreadPoolExecutor:
    """The process's summarizer threads (``SUMMARIZER_THREADS`` of them)."""
    return _summarizer_threads(app_settings.summarizer_threads, os.getpid())


# One pool per size and process: a forked child (a Celery or a gunicorn worker) starts pools
# of its own, and a changed setting takes effect on the next call (the pool of the old size
# keeps its threads until close_database_threads).
_DATABASE_THREADS: dict[tuple[int, int], DatabaseThreads] = {}


@functools.cache
def _summarizer_threads(size: int, pid: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=size, thread_name_prefix="squad-memory-summarizer")


@functools.cache
def _served_on(pool: DatabaseThreads) -> SyncToAsync[..., Any]:
    """:func:`served` on ``pool``, wrapped once (not on every call)."""
    # asgiref types ``executor`` as a ThreadPoolExecutor; it only passes it to run_in_executor
    return SyncToAsync(served, thread_sensitive=False, executor=pool)  # type: ignore[arg-type]


class DatabaseThreads(Executor):
    """Up to ``size`` threads, each with its own connections. A call goes to the thread that
    became idle last, and a thread starts only when all are busy: a lone conversation is
    served by one thread on one warm connection, as a shared thread would serve it, and
    threads (so connections) grow with the calls in flight, not with the calls made.
    (A ``ThreadPoolExecutor`` wakes any idle thread, and often starts a new one for the next
    call before the last is counted idle.) ``finalizer`` runs on each thread as it stops."""

    def __init__(self, size: int, name: str, finalizer: Callable[[], None]) -> None:
        self.size, self.name, self.finalizer = size, name, finalizer
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Any]] = []  # the threads' inboxes, last idle on top
        self._threads: list[threading.Thread] = []
        self._waiting: collections.deque[Any] = collections.deque()  # calls while all are busy
        self._stopped = False

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
        future: Future[R] = Future()
        job = (future, fn, args, kwargs)
        with self._lock:
            if self._stopped:
                raise RuntimeError("the database threads were shut down")
            if self._idle:
                self._idle.pop().put(job)
            elif len(self._threads) < self.size:
                inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
                inbox.put(job)
                name = f"{self.name}_{len(self._threads)}"
                thread = threading.Thread(target=self._serve, args=(inbox,), name=name, daemon=True)
                thread.start()  # counted once started: a thread that cannot start takes no job
                self._threads.append(thread)
            else:
                self._waiting.append(job)
        return future

    def _serve(self, inbox: queue.SimpleQueue[Any]) -> None:
        try:
            while (job := inbox.get()) is not None:
                future, fn, args, kwargs = job
                result = error = None
                ran = future.set_running_or_notify_cancel()  # False: cancelled while waiting
                if ran:
                    try:
                        result = fn(*args, **kwargs)
                    except BaseException as exc:  # the caller's to handle, as an executor does
                        error = exc
                with self._lock:  # idle (or on to a waiting call) before the caller wakes
                    if self._waiting:
                        inbox.put(self._waiting.popleft())
                    elif not self._stopped:
                        self._idle.append(inbox)
                    else:
                        inbox.put(None)
                if ran and error is None:
                    future.set_result(result)
                elif ran:
                    future.set_exception(error)
                # an idle thread keeps nothing of its last call (its caller's context, result)
                del job, future, fn, args, kwargs, result, error
        finally:
            self.finalizer()

    def shutdown(
        self, wait: bool = True, *, cancel_futures: bool = False, timeout: float | None = None
    ) -> None:
        """Stop the threads once the calls submitted are done (``cancel_futures``: but for
        the calls still waiting for a thread); each runs ``finalizer``. ``wait``: for at most
        ``timeout`` seconds in all."""
        with self._lock:
            self._stopped = True
            for inbox in self._idle:
                inbox.put(None)
            self._idle.clear()
            while cancel_futures and self._waiting:
                self._waiting.popleft()[0].cancel()
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads if wait else ():
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))


def close_database_threads(timeout: float = 10.0) -> None:
    """Close the connections of every database thread of this process, whatever the
    ``DATABASE_THREADS`` it started under, and stop the threads (the next call starts new
    ones): at a process's shutdown, or after a test that changed the databases or that
    setting. Waits ``timeout`` seconds at most in all."""
    pools = [(pid, _DATABASE_THREADS.pop((size, pid))) for size, pid in list(_DATABASE_THREADS)]
    _served_on.cache_clear()
    deadline = time.monotonic() + timeout
    for pid, pool in pools:
        if pid == os.getpid():  # a forked child's copies of its parent's pools have no threads
            pool.shutdown(timeout=max(0.0, deadline - time.monotonic()))

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
- Every call on those threads is bounded (``CALL_TIMEOUT``, ``SUMMARIZER_TIMEOUT``): past
  its deadline its caller gets an error and a thread still running it is abandoned and
  replaced (:class:`Threads`); the calls that may lock a slot's row take turns per slot
  before they take a thread (:func:`for_slot`), and their sessions wait for a lock at most
  ``LOCK_TIMEOUT``. The threads are daemons: none keeps the process from exiting.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import math
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import AsyncToSync, SyncToAsync, sync_to_async
from django.db import DatabaseError, connections
from django.db.backends.signals import connection_created
from django.dispatch import receiver

from squad_memory.conf import SETTING_NAME, app_settings
from squad_memory.exceptions import DatabaseCallTimeout, SlotLocked, SummarizerTimeout

logger = logging.getLogger("squad_memory")

#: Seconds between two looks of a pool's watchdog at its calls' deadlines.
TICK = 0.25

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


async def for_slot(key: Hashable, func: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """:func:`database` for a call that may lock the row of the slot ``key`` (a save, a fetch
    that activates). On a database thread, the calls for one slot take turns in the caller's
    event loop before they take a thread: a slot whose row another session holds keeps one
    thread waiting, not all of them, and that wait ends after ``LOCK_TIMEOUT`` seconds with
    :class:`~squad_memory.exceptions.SlotLocked`. A call keeps the turn until its function
    has returned on its thread, even when its caller stopped waiting (cancelled, or past
    ``CALL_TIMEOUT``): the slot's next call never overtakes a save still running."""
    if in_caller_thread():
        return await sync_to_async(func, thread_sensitive=True)(*args, **kwargs)
    turn = (asyncio.get_running_loop(), key)
    if turn in _TURNS:
        await _wait_for(turn)
    else:
        _TURNS[turn] = collections.deque()
    hold = Hold(turn)
    try:
        result: R = await _served_on(database_threads(), _held)(hold, func, *args, **kwargs)
    except DatabaseError as exc:
        if lock_timed_out(exc):
            raise _slot_locked(key) from exc
        raise
    finally:
        hold.give_up()
    return result


class Hold:
    """A call's hold on its slot's turn (:func:`for_slot`): passed on when the call's function
    returns on its thread, or, if no thread took the call before its caller stopped waiting,
    at once (the call then never runs)."""

    def __init__(self, turn: tuple[asyncio.AbstractEventLoop, Hashable]) -> None:
        self.turn = turn
        self.lock = threading.Lock()
        self.started = self.given_up = False

    def start(self) -> bool:
        """On the thread: whether the call is to run (its caller still waits for it)."""
        with self.lock:
            self.started = not self.given_up
            return self.started

    def finish(self) -> None:
        """On the thread, once the call returned: the turn passes on in the caller's loop."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: no call waits in it
            self.turn[0].call_soon_threadsafe(_pass_on, self.turn)

    def give_up(self) -> None:
        """In the caller's loop, once it stops waiting (an answer, an error, a cancel)."""
        with self.lock:
            self.given_up = True
            if self.started:
                return  # :meth:`finish` passes the turn on
        _pass_on(self.turn)


def _held(hold: Hold, func: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R | None:
    """:func:`served` for a call that holds its slot's turn (:class:`Hold`)."""
    if not hold.start():
        return None  # its caller gave up before a thread took it
    try:
        return served(func, *args, **kwargs)
    finally:
        hold.finish()


#: The calls waiting for a slot's turn, by event loop and slot: a slot is here while a call
#: for it runs. (An ``asyncio.Lock`` per slot in a ``WeakValueDictionary`` cost several
#: times the microsecond this does when no call waits.)
_TURNS: dict[tuple[asyncio.AbstractEventLoop, Hashable], collections.deque[Any]] = {}
os.register_at_fork(after_in_child=_TURNS.clear)  # the parent's calls are not the child's


async def _wait_for(turn: tuple[asyncio.AbstractEventLoop, Hashable]) -> None:
    """Wait until the calls for the slot before this one are done, at most ``CALL_TIMEOUT``
    (a call before it may be stuck on its thread)."""
    waiter = turn[0].create_future()
    _TURNS[turn].append(waiter)
    seconds = app_settings.call_timeout
    try:
        await asyncio.wait_for(waiter, seconds)
    except TimeoutError:
        raise DatabaseCallTimeout(
            f"A call for slot {turn[1]!r} waited {SETTING_NAME}['CALL_TIMEOUT'] ({seconds:g} s) "
            "for the slot's call before it, which still runs on its database thread (the "
            "database is unreachable or overloaded, or its row is locked); retry later."
        ) from None
    except asyncio.CancelledError:
        if waiter.done() and not waiter.cancelled():  # cancelled as the turn came: the next's
            _pass_on(turn)
        raise


def _pass_on(turn: tuple[asyncio.AbstractEventLoop, Hashable]) -> None:
    """Give the slot's turn to the next call still waiting, if any."""
    waiting = _TURNS[turn]
    while waiting:
        waiter = waiting.popleft()
        if not waiter.done():  # not cancelled while it waited
            waiter.set_result(None)
            return
    del _TURNS[turn]


def lock_timed_out(exc: DatabaseError) -> bool:
    """Whether ``exc`` is the database giving up a lock wait: PostgreSQL's
    ``lock_not_available`` (55P03), MySQL's lock wait timeout (1205), SQLite's busy lock."""
    cause = exc.__cause__
    state = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    code = cause.args[0] if cause is not None and cause.args else None
    return state == "55P03" or code == 1205 or "database is locked" in str(exc)


def _slot_locked(key: Hashable) -> SlotLocked:
    return SlotLocked(
        f"The row of slot {key!r} stayed locked by another session past the lock timeout "
        f"({SETTING_NAME}['LOCK_TIMEOUT'] = {app_settings.lock_timeout!r} s; on SQLite, the "
        "busy timeout of DATABASES' OPTIONS['timeout']): a long transaction holds it (a view "
        "under ATOMIC_REQUESTS that saved to it, an admin action, a migration). Other "
        "conversations go on; retry this one later, and shorten or end that transaction."
    )


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
            if call.reached or _pool_timed_out(exc):
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


def _pool_timed_out(exc: DatabaseError) -> bool:
    """Whether Django's PostgreSQL pool gave no connection in its ``timeout``: a pool that is
    exhausted (or was inherited across a fork), not a dead connection, so a second wait would
    only double the first."""
    return type(exc.__cause__).__name__ == "PoolTimeout"


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
    """A connection opened in a call on a database thread: watched, and its lock waits
    bounded."""
    if getattr(_served, "call", None) is not None:
        _watched(connection)
        _bound_lock_waits(connection)


def _watched(connection: Any) -> None:
    """:func:`_watch` among the connection's execute wrappers (they stay across
    reconnections), and the connection among the thread's."""
    if _watch not in connection.execute_wrappers:
        connection.execute_wrappers.insert(0, _watch)
        alias = connection.alias  # the thread's own, not a temporary copy (``_nodb_cursor``)
        if alias in connections.settings and connections[alias] is connection:
            _served.__dict__.setdefault("connections", []).append(connection)


#: How each database bounds a session's lock waits (``LOCK_TIMEOUT``). SQLite's are bounded
#: already, by its busy timeout (``OPTIONS["timeout"]``, 5 s by default), left as set.
LOCK_WAITS = {
    "postgresql": "SET lock_timeout = {ms}",
    "mysql": "SET SESSION innodb_lock_wait_timeout = {s}",
}

#: The ``LOCK_TIMEOUT`` each driver connection got: a connection from Django's pool keeps its
#: session's, and is not told again at each checkout.
_BOUNDED: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


def _bound_lock_waits(connection: Any) -> None:
    """Bound the connection's lock waits by ``LOCK_TIMEOUT``: a call that waits on a row
    another session holds gives its thread back (the statement is not one of the call's:
    it does not keep the call from running again on a new connection)."""
    seconds, sql = app_settings.lock_timeout, LOCK_WAITS.get(connection.vendor)
    raw = connection.connection
    if seconds is None or sql is None or _bounded(raw) == seconds:
        return
    call = _served.call
    reached = call.reached
    with connection.cursor() as cursor:
        cursor.execute(sql.format(ms=max(1, round(seconds * 1000)), s=max(1, math.ceil(seconds))))
    call.reached = reached
    with contextlib.suppress(TypeError):
        _BOUNDED[raw] = seconds


def _bounded(raw: Any) -> float | None:
    try:
        return _BOUNDED.get(raw)
    except TypeError:  # a driver connection that takes no weak reference
        return None


def _adopt_connections() -> None:
    """After a call that raised: a connection whose setup failed after it opened (a failing
    ``SET ROLE``, another receiver of ``connection_created``) was never announced; it joins
    the thread's, watched, so that the check after the call closes it as Django would."""
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None:
            _watched(connection)


def _close_old_connections() -> None:
    """Django's :func:`~django.db.close_old_connections` over the connections this database
    thread opened (every connection a call on it uses opens in a call, and one that never
    said so is adopted after the call): the same check of each, without looking up every
    alias of the settings in Django's per-thread registry, which took most of its 5 µs,
    twice a call. With ``DEBUG``, each call's queries are logged afresh, as each request's
    (``reset_queries()``): a thread's log does not grow with the calls it served."""
    for connection in _served.__dict__.get("connections", ()):
        connection.queries_log.clear()
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


def database_threads() -> Threads:
    """The process's database threads (``DATABASE_THREADS`` of them, each call bounded by
    ``CALL_TIMEOUT``)."""
    size, timeout = app_settings.database_threads, lambda: app_settings.call_timeout
    return _pool(_DATABASE_THREADS, size, "squad-memory-db", timeout, _call_expired)


def summarizer_threads() -> Threads:
    """The process's summarizer threads (``SUMMARIZER_THREADS`` of them, each call bounded by
    ``SUMMARIZER_TIMEOUT``)."""
    size, timeout = app_settings.summarizer_threads, lambda: app_settings.summarizer_timeout
    return _pool(_SUMMARIZER_THREADS, size, "squad-memory-summarizer", timeout, summary_expired)


def _pool(
    pools: dict[tuple[int, int], Threads],
    size: int,
    name: str,
    timeout: Callable[[], float | None],
    expired: Callable[[float], BaseException],
) -> Threads:
    key = (size, os.getpid())
    pool = pools.get(key)
    if pool is None:  # setdefault: two threads asking at once get the same pool
        new = Threads(size, name, connections.close_all, timeout, expired)
        pool = pools.setdefault(key, new)
    return pool


def _call_expired(seconds: float) -> DatabaseCallTimeout:
    return DatabaseCallTimeout(
        f"A database call did not return within {SETTING_NAME}['CALL_TIMEOUT'] ({seconds:g} s): "
        "the database is unreachable or overloaded, or the call waits on a lock. Its thread "
        "was replaced; set the connection's connect_timeout and TCP keepalives so that a lost "
        "connection fails (docs/howto/postgresql.md), or raise CALL_TIMEOUT for longer calls."
    )


def summary_expired(seconds: float) -> SummarizerTimeout:
    """The error of a summarizer call past ``SUMMARIZER_TIMEOUT`` (``seconds``)."""
    return SummarizerTimeout(
        f"The summarizer did not return within {SETTING_NAME}['SUMMARIZER_TIMEOUT'] "
        f"({seconds:g} s): the compression is abandoned and its thread replaced. Give the "
        "summarizer's backend a timeout of its own below it, or raise SUMMARIZER_TIMEOUT."
    )


# One pool per size and process: a forked child (a Celery or a gunicorn worker) starts pools
# of its own, and a changed setting takes effect on the next call (the pool of the old size
# keeps its threads until close_database_threads).
_DATABASE_THREADS: dict[tuple[int, int], Threads] = {}
_SUMMARIZER_THREADS: dict[tuple[int, int], Threads] = {}


@functools.cache
def _served_on(pool: Threads, serve: Callable[..., Any] = served) -> SyncToAsync[..., Any]:
    """``serve`` (:func:`served`) on ``pool``, wrapped once (not on every call)."""
    # asgiref types ``executor`` as a ThreadPoolExecutor; it only passes it to run_in_executor
    return SyncToAsync(serve, thread_sensitive=False, executor=pool)  # type: ignore[arg-type]


class Threads(Executor):
    """Up to ``size`` daemon threads, each with its own connections. A call goes to the thread
    that became idle last, and a thread starts only when all are busy: a lone conversation is
    served by one thread on one warm connection, as a shared thread would serve it, and
    threads (so connections) grow with the calls in flight, not with the calls made.
    (A ``ThreadPoolExecutor`` wakes any idle thread, and often starts a new one for the next
    call before the last is counted idle.) ``finalizer`` runs on each thread as it stops.

    A call not done ``timeout()`` seconds (None: no bound) after it was submitted fails with
    ``expired(seconds)``; a thread still running it is abandoned (it stops once the call
    returns, its finalizer closing its connections) and another takes its place, so that a
    stuck call never takes a thread from the others for good. The process never waits for
    a thread at its exit (they are daemons)."""

    def __init__(
        self,
        size: int,
        name: str,
        finalizer: Callable[[], None],
        timeout: Callable[[], float | None] = lambda: None,
        expired: Callable[[float], BaseException] = TimeoutError,
    ) -> None:
        self.size, self.name, self.finalizer = size, name, finalizer
        self.timeout, self.expired = timeout, expired
        self._lock = threading.Lock()
        self._idle: list[Worker] = []  # last idle on top
        self._workers: list[Worker] = []
        self._waiting: collections.deque[Any] = collections.deque()  # calls while all are busy
        self._stopped = threading.Event()
        self._watchdog: threading.Thread | None = None

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
        future: Future[R] = Future()
        job = (future, fn, args, kwargs, time.monotonic())
        with self._lock:
            if self._stopped.is_set():
                raise RuntimeError("the threads were shut down")
            if self._idle:
                self._idle.pop().inbox.put(job)
            elif len(self._workers) < self.size:
                self._start(job)
            else:
                self._waiting.append(job)
        return future

    def _start(self, job: Any) -> None:
        """A new thread for ``job`` (under the lock); the first starts the watchdog."""
        if self._watchdog is None:
            self._watchdog = threading.Thread(
                target=self._watch, name=f"watchdog of {self.name}", daemon=True
            )
            self._watchdog.start()
        worker = Worker()
        worker.inbox.put(job)
        name = f"{self.name}_{len(self._workers)}"
        worker.thread = threading.Thread(target=self._serve, args=(worker,), name=name, daemon=True)
        worker.thread.start()  # counted once started: a thread that cannot start takes no job
        self._workers.append(worker)

    def _serve(self, worker: Worker) -> None:
        try:
            while (job := worker.inbox.get()) is not None:
                future, fn, args, kwargs, _ = job
                result = error = None
                ran = future.set_running_or_notify_cancel()  # False: cancelled while waiting
                if ran:
                    worker.job = job
                    try:
                        result = fn(*args, **kwargs)
                    except BaseException as exc:  # the caller's to handle, as an executor does
                        error = exc
                with self._lock:  # idle (or on to a waiting call) before the caller wakes
                    worker.job = None
                    if worker.abandoned:  # its caller had its answer (the call expired)
                        return
                    if self._waiting:
                        worker.inbox.put(self._waiting.popleft())
                    elif not self._stopped.is_set():
                        self._idle.append(worker)
                    else:
                        worker.inbox.put(None)
                if ran and error is None:
                    future.set_result(result)
                elif ran:
                    future.set_exception(error)
                # an idle thread keeps nothing of its last call (its caller's context, result)
                del job, future, fn, args, kwargs, result, error
        finally:
            self.finalizer()

    def _watch(self) -> None:
        """Expire the calls past their deadline, every :data:`TICK` seconds."""
        while not self._stopped.wait(TICK):
            seconds = self.timeout()
            if seconds is not None:
                self._expire(seconds, time.monotonic() - seconds)

    def _expire(self, seconds: float, before: float) -> None:
        """Fail the calls submitted before ``before`` (monotonic): those waiting for a thread,
        and those running, whose threads are abandoned and replaced."""
        with self._lock:
            waiting = []
            while self._waiting and self._waiting[0][4] < before:
                waiting.append(self._waiting.popleft()[0])
            stuck = [w for w in self._workers if w.job is not None and w.job[4] < before]
            running = [worker.job[0] for worker in stuck]
            for worker in stuck:
                worker.abandoned = True
                self._workers.remove(worker)
                logger.error(
                    "A call on %s ran past its %g s; its thread is abandoned and replaced.",
                    worker.thread.name,
                    seconds,
                )
            while self._waiting and len(self._workers) < self.size:
                self._start(self._waiting.popleft())
        for future in waiting:
            if future.set_running_or_notify_cancel():
                future.set_exception(self.expired(seconds))
        for future in running:
            future.set_exception(self.expired(seconds))

    def shutdown(
        self, wait: bool = True, *, cancel_futures: bool = False, timeout: float | None = None
    ) -> None:
        """Stop the threads once the calls submitted are done (``cancel_futures``: but for
        the calls still waiting for a thread); each runs ``finalizer``. ``wait``: for at most
        ``timeout`` seconds in all."""
        with self._lock:
            self._stopped.set()
            for worker in self._idle:
                worker.inbox.put(None)
            self._idle.clear()
            while cancel_futures and self._waiting:
                self._waiting.popleft()[0].cancel()
            workers = list(self._workers)
        deadline = None if timeout is None else time.monotonic() + timeout
        for worker in workers if wait else ():
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            worker.thread.join(remaining)


class Worker:
    """One thread of :class:`Threads`: its inbox, the call it runs, and whether the pool
    abandoned it (its call expired)."""

    def __init__(self) -> None:
        self.inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.job: Any = None
        self.abandoned = False
        self.thread: threading.Thread


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

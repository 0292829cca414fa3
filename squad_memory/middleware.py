"""A bound on the requests one ASGI process serves at once, so on its database connections.

Under ASGI, Django runs each request's synchronous part (sync middleware, a DRF view) on a
thread of that request's own, which opens a connection of its own: a process holds as many
connections as it has requests in flight, and past the server's ``max_connections`` the
next ones fail. :class:`AdmissionMiddleware` admits at most ``DATABASE_THREADS`` requests
of an event loop into that part at once; the others wait their turn, for at most
``REQUEST_QUEUE_TIMEOUT`` seconds, and past it get ``503 Service Unavailable`` with
``Retry-After``. An admitted request's connections are closed (or given back to Django's
pool) before the next request is admitted, so the process holds at most that many for
requests. Under WSGI it does nothing: the server's threads bound the requests already.
``docs/howto/deployment.md`` says how to size it with the workers and ``max_connections``.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.db import connections
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from squad_memory.conf import app_settings

#: Seconds a refused request is told to wait before it tries again (``Retry-After``).
RETRY_AFTER = 5

Handler = Callable[[HttpRequest], Any]


class AdmissionMiddleware:
    """Admit at most ``DATABASE_THREADS`` requests at once into the rest of the chain (put
    it first in ``MIDDLEWARE``); a request that waited ``REQUEST_QUEUE_TIMEOUT`` seconds
    for its turn gets 503 with ``Retry-After``. See the module's text."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._admit(request)
        return self.get_response(request)

    async def _admit(self, request: HttpRequest) -> HttpResponseBase:
        gate = _gate()
        try:
            async with asyncio.timeout(app_settings.request_queue_timeout):
                await gate.acquire()
        except TimeoutError:
            return busy()
        # Shielded: a request cancelled (its client gone) keeps its turn until its thread,
        # which no cancellation stops, has finished with the database.
        served = asyncio.ensure_future(self._serve(request))
        served.add_done_callback(lambda _: gate.release())
        return await asyncio.shield(served)

    async def _serve(self, request: HttpRequest) -> HttpResponseBase:
        try:
            response: HttpResponseBase = await self.get_response(request)
        finally:
            # On the request's thread (its ThreadSensitiveContext), whose connections the
            # request opened: closed now, not after its answer has been sent.
            await _close_connections()
        return response


_close_connections: Callable[[], Awaitable[None]] = sync_to_async(connections.close_all)


def busy() -> HttpResponse:
    """The answer to a request that waited too long for its turn."""
    response = HttpResponse(
        "The server is busy; try again later.\n",
        status=503,
        content_type="text/plain; charset=utf-8",
    )
    response["Retry-After"] = str(RETRY_AFTER)
    return response


_GATES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[int, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


def _gate() -> asyncio.Semaphore:
    """The running event loop's semaphore of ``DATABASE_THREADS`` (a changed setting takes
    effect with a new one; the requests admitted by the old one finish under it)."""
    loop, size = asyncio.get_running_loop(), app_settings.database_threads
    found = _GATES.get(loop)
    if found is None or found[0] != size:
        found = _GATES[loop] = (size, asyncio.Semaphore(size))
    return found[1]

"""AdmissionMiddleware: at most DATABASE_THREADS requests of an event loop at once into the
rest of the chain, a bounded wait for the others, then 503 with Retry-After. Under a real
uvicorn on PostgreSQL: tests/test_middleware_uvicorn.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory, override_settings

from squad_memory.middleware import RETRY_AFTER, AdmissionMiddleware

pytestmark = pytest.mark.nodb


def bounded(threads: int, timeout: float = 30.0) -> Any:
    return override_settings(
        SQUAD_MEMORY={"DATABASE_THREADS": threads, "REQUEST_QUEUE_TIMEOUT": timeout}
    )


class Inner:
    """An async rest of the chain that counts the requests inside it at once; each stays
    until ``release`` is set."""

    def __init__(self) -> None:
        self.inside = self.most = self.served = 0
        self.release = asyncio.Event()

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        self.inside += 1
        self.most = max(self.most, self.inside)
        try:
            await self.release.wait()
        finally:
            self.inside -= 1
        self.served += 1
        return HttpResponse("ok")


def request() -> HttpRequest:
    return RequestFactory().get("/api/sessions/")


def run(main: Callable[[], Any]) -> Any:
    return asyncio.run(main())


def test_at_most_database_threads_requests_are_inside_at_once_and_the_others_wait() -> None:
    async def main() -> tuple[Inner, list[int]]:
        inner = Inner()
        middleware = AdmissionMiddleware(inner.__call__)
        calls = [asyncio.ensure_future(middleware(request())) for _ in range(10)]
        while inner.inside < 3:
            await asyncio.sleep(0)
        for _ in range(20):  # the others had every chance to get in
            await asyncio.sleep(0)
        assert inner.inside == 3
        inner.release.set()
        return inner, [response.status_code for response in await asyncio.gather(*calls)]

    with bounded(3):
        inner, statuses = run(main)
    assert statuses == [200] * 10 and inner.most == 3 and inner.served == 10


def test_a_request_that_waits_past_the_timeout_gets_503_with_retry_after() -> None:
    async def main() -> tuple[Inner, Any, Any]:
        inner = Inner()
        middleware = AdmissionMiddleware(inner.__call__)
        first = asyncio.ensure_future(middleware(request()))
        while inner.inside < 1:
            await asyncio.sleep(0)
        refused = await middleware(request())  # waits 0.05 s for the one turn, in vain
        inner.release.set()
        return inner, await first, refused

    with bounded(1, timeout=0.05):
        inner, first, refused = run(main)
    assert first.status_code == 200 and inner.served == 1
    assert refused.status_code == 503 and refused["Retry-After"] == str(RETRY_AFTER)


def test_a_cancelled_request_keeps_its_turn_until_its_work_is_done() -> None:
    """Cancelling a request (its client left) stops no thread: the turn is given back only
    once what runs behind it has finished."""

    async def main() -> tuple[Inner, int]:
        inner = Inner()
        middleware = AdmissionMiddleware(inner.__call__)
        first = asyncio.ensure_future(middleware(request()))
        while inner.inside < 1:
            await asyncio.sleep(0)
        first.cancel()
        second = asyncio.ensure_future(middleware(request()))
        for _ in range(20):
            await asyncio.sleep(0)
        assert inner.inside == 1 and not second.done()  # the first one's work still holds it
        inner.release.set()
        return inner, (await second).status_code

    with bounded(1):
        inner, status = run(main)
    assert status == 200 and inner.served == 2 and inner.most == 1


def test_under_wsgi_it_passes_each_request_through() -> None:
    seen: list[HttpRequest] = []

    def inner(request: HttpRequest) -> HttpResponse:
        seen.append(request)
        return HttpResponse("ok")

    with bounded(1, timeout=0.01):
        middleware = AdmissionMiddleware(inner)
        given = request()
        assert middleware(given).status_code == 200
    assert seen == [given]

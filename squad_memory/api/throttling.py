"""Throttling: per user, per anonymous client, failed authentications, and scoped rates, at
the ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` of ``user``, ``anon``,
``squad_memory_auth_failures`` (wrong credentials per client address; past it, wrong
credentials from that address are 429 until the window passes, while a request that
authenticates is never throttled by them), ``squad_memory_compress`` and
``squad_memory_search`` (no rate: no limit). Counts live in Django's default cache: share it
between processes.

A client's address is ``REMOTE_ADDR``, or with ``REST_FRAMEWORK["NUM_PROXIES"] = n`` the
``n``-th from the end of ``X-Forwarded-For``. Unlike DRF, an unset ``NUM_PROXIES`` means 0:
the whole header, which any client writes, must not name the client.
"""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import (
    AnonRateThrottle,
    ScopedRateThrottle,
    SimpleRateThrottle,
    UserRateThrottle,
)

COMPRESS_SCOPE = "squad_memory_compress"
SEARCH_SCOPE = "squad_memory_search"
AUTH_FAILURES_SCOPE = "squad_memory_auth_failures"


class _Live:
    """The scope's rate read live (None: not throttled); the address as described above."""

    scope: str | None

    def get_rate(self) -> str | None:
        rates: dict[str, Any] = api_settings.DEFAULT_THROTTLE_RATES or {}
        rate = rates.get(self.scope) if self.scope else None
        return None if rate is None else str(rate)

    def get_ident(self, request: Request) -> str:
        if api_settings.NUM_PROXIES is None:
            return str(request.META.get("REMOTE_ADDR", ""))
        return str(super().get_ident(request))  # type: ignore[misc]


class UserThrottle(_Live, UserRateThrottle):
    pass


class AnonThrottle(_Live, AnonRateThrottle):
    pass


class ScopedThrottle(_Live, ScopedRateThrottle):
    """The rate of the view's ``throttle_scope``."""


class AuthFailureThrottle(_Live, SimpleRateThrottle):
    """Counts failed authentications only: :meth:`allow_request` checks, :meth:`failed` adds."""

    scope = AUTH_FAILURES_SCOPE

    def get_cache_key(self, request: Request, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def throttle_success(self) -> bool:
        return True  # a request is counted only when its credentials fail

    def failed(self) -> None:
        if self.rate is not None:
            self.history.insert(0, self.now)
            self.cache.set(self.key, self.history, self.duration)  # type: ignore[attr-defined]


THROTTLE_CLASSES: list[type[Any]] = [AnonThrottle, UserThrottle, ScopedThrottle]

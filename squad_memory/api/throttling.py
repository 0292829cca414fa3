"""Throttling of the API: per user, per anonymous client, and a scoped rate for compress.

The rates are DRF's ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` entries ``user``,
``anon`` and ``squad_memory_compress``; a scope without a rate is not throttled, so a
project that configures none keeps working. A throttled request answers ``429`` with
``Retry-After``. Counts live in Django's default cache: use a shared cache (Redis,
Memcached) when several processes serve the API.
"""

from __future__ import annotations

from typing import Any

from rest_framework.settings import api_settings
from rest_framework.throttling import AnonRateThrottle, ScopedRateThrottle, UserRateThrottle

#: The scope of ``POST /api/slots/{id}/compress/`` (each call may run the summarizer).
COMPRESS_SCOPE = "squad_memory_compress"


class _RateOrNothing:
    """The rate of the throttle's scope, read live; a scope without a rate is not throttled."""

    scope: str | None

    def get_rate(self) -> str | None:
        rates: dict[str, Any] = api_settings.DEFAULT_THROTTLE_RATES or {}
        rate = rates.get(self.scope) if self.scope else None
        return None if rate is None else str(rate)


class UserThrottle(_RateOrNothing, UserRateThrottle):
    """The ``user`` rate, per user (per client address for anonymous requests)."""


class AnonThrottle(_RateOrNothing, AnonRateThrottle):
    """The ``anon`` rate, per client address, for unauthenticated requests."""


class ScopedThrottle(_RateOrNothing, ScopedRateThrottle):
    """The rate of the view's ``throttle_scope`` (``squad_memory_compress`` for compress)."""


THROTTLE_CLASSES: list[type[Any]] = [AnonThrottle, UserThrottle, ScopedThrottle]

"""Fixtures of the API tests, loaded with ``pytest_plugins = ["tests.api_fixtures"]``."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import cache

from tests.api_support import VIEW_PERMS, WRITE_PERMS, Users, make_user


@pytest.fixture
def rates(settings: Any) -> Any:
    """Set throttle rates for the test, restored afterwards (DRF caches its settings)."""
    from rest_framework.settings import api_settings

    def use(**rates: str | None) -> None:
        settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
        cache.clear()

    yield use
    api_settings.reload()


@pytest.fixture
def users(db: Any) -> Users:
    cache.clear()  # throttling counts live in the cache; user ids repeat across tests
    return Users(
        owner=make_user("owner"),
        other=make_user("other"),
        staff=make_user("staff", staff=True, perms=WRITE_PERMS + VIEW_PERMS),
        reader=make_user("reader", perms=()),
    )

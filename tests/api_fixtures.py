"""Fixtures of the API tests, loaded with ``pytest_plugins = ["tests.api_fixtures"]``."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import cache

from tests.api_support import VIEW_PERMS, WRITE_PERMS, Users, make_user


@pytest.fixture
def users(db: Any) -> Users:
    cache.clear()  # throttling counts live in the cache; user ids repeat across tests
    return Users(
        owner=make_user("owner"),
        other=make_user("other"),
        staff=make_user("staff", staff=True, perms=WRITE_PERMS + VIEW_PERMS),
        reader=make_user("reader", perms=()),
    )

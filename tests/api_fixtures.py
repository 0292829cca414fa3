"""Fixtures of the API tests, loaded with ``pytest_plugins = ["tests.api_fixtures"]``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api_support import Users, make_user


@pytest.fixture
def users(db: Any) -> Users:
    return Users(
        owner=make_user("owner"),
        other=make_user("other"),
        staff=make_user("staff", staff=True),
        reader=make_user("reader", perms=()),
    )

"""Schemathesis over the live OpenAPI schema: no 5xx, and every response matches the schema."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import extra

extra("rest_framework", "api")  # the schema of the REST API

import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from rest_framework.settings import api_settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.api_support import fill, make_user


@pytest.fixture
def wsgi_app(db: Any) -> Iterator[WSGIHandler]:
    """The project's WSGI app, talking to the test database inside the test's transaction."""
    # As Django's test client does: a request must not close the test's connection.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield WSGIHandler()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def unthrottled(settings: Any) -> Iterator[None]:
    """No rates: the fuzzer sends hundreds of requests a minute (throttling has its own
    tests, and 429 is in the schema anyway)."""
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {}}
    yield
    api_settings.reload()


@pytest.fixture
def token(db: Any, unthrottled: None) -> str:
    user = make_user("fuzzer")
    fill(user, 6)
    fill(make_user("bystander"), 4, session="theirs")
    return str(Token.objects.create(user=user).key)


# Loading the schema needs no database: it is generated from the URLconf.
schema = schemathesis.openapi.from_wsgi("/api/schema/", WSGIHandler())


@schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case: Any, wsgi_app: WSGIHandler, token: str) -> None:
    # Every other default check runs (no 5xx, status codes, content types, headers and
    # bodies as documented, invalid data rejected). positive_data_acceptance is left out:
    # some rules have no OpenAPI form (exactly one of message/messages, the byte size of
    # a message, the live SQUAD_MEMORY limits), so a schema-valid request can rightly be a 400.
    case.call_and_validate(
        headers={"Authorization": f"Token {token}"},
        excluded_checks=[positive_data_acceptance],
    )

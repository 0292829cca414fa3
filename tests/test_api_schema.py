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

from squad_memory.models import IdempotencyKey
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
# Derandomized: the same examples every run. (An id may hold none of the invisible
# characters beyond the Basic Multilingual Plane, which no pattern a generator can use
# states: a random run could draw one.)
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_conforms_to_its_schema(case: Any, wsgi_app: WSGIHandler, token: str) -> None:
    # Every check: no 5xx, status codes, content types, headers and bodies as documented,
    # invalid data rejected, and valid data accepted (the schema states every rule a
    # request must follow, the live SQUAD_MEMORY limits at their defaults).
    # Each case is a first request: a key an earlier case used is that case's (reusing it
    # with another body is a 422 by design, tested in test_api_idempotency.py).
    IdempotencyKey.objects.all().delete()
    case.call_and_validate(headers={"Authorization": f"Token {token}"})


def test_the_docs_examples_are_valid_requests(token: str) -> None:
    from rest_framework.test import APIClient

    client = APIClient()
    document = client.get("/api/schema/", {"format": "json"}).json()
    post = document["paths"]["/api/slots/messages/"]["post"]
    examples = post["requestBody"]["content"]["application/json"]["examples"]
    assert len(examples) == 2
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    for example in examples.values():
        body = example["value"]
        assert ("message" in body) != ("messages" in body) and "user_id" not in body
        assert client.post("/api/slots/messages/", body, format="json").status_code == 201
    scheme = document["components"]["securitySchemes"]["tokenAuth"]
    assert "Type `Token <key>`" in scheme["description"]

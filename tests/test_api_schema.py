"""Schemathesis over the live OpenAPI schema: no 5xx, and every response matches the schema."""

from __future__ import annotations

import re
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
# Derandomized: the same examples every run. (An id may hold none of the invisible or
# compatibility characters beyond the Basic Multilingual Plane, nor a sequence that NFC
# composes, which no pattern a generator can use states: a random run could draw one.)
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_conforms_to_its_schema(case: Any, wsgi_app: WSGIHandler, token: str) -> None:
    # Every check: no 5xx, status codes, content types, headers and bodies as documented,
    # invalid data rejected, and valid data accepted (the schema states every rule a
    # request must follow, the live SQUAD_MEMORY limits at their defaults).
    # Each case is a first request: a key an earlier case used is that case's (reusing it
    # with another body is a 422 by design, tested in test_api_idempotency.py).
    IdempotencyKey.objects.all().delete()
    case.call_and_validate(headers={"Authorization": f"Token {token}"})


# The stateful run sends its token as a registered auth (the `ignored_auth` check then
# knows it for the run's own, valid credentials, and probes without it).
workflows = schemathesis.openapi.from_wsgi("/api/schema/", WSGIHandler())


@workflows.auth(refresh_interval=None)
class FuzzerToken:
    token = ""

    def get(self, case: Any, context: Any) -> str:
        return self.token

    def set(self, case: Any, data: str, context: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Token {data}"}


def test_api_workflows_conform_to_their_schema(wsgi_app: WSGIHandler, token: str) -> None:
    """Stateful: sequences of calls along the links schemathesis infers from the schema
    (a slot listed, then read, compressed, reset or deleted; a session listed, then its
    history or its deletion), every response checked as above."""
    FuzzerToken.token = token
    workflows.as_state_machine().run(
        settings=settings(
            max_examples=10,
            stateful_step_count=6,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
        )
    )


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


# -- the schema states the server's rules ------------------------------------------------------
def schema_document(client: Any) -> dict[str, Any]:
    return dict(client.get("/api/schema/", {"format": "json"}).json())


def id_schemas(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every id a request sends, parameter or body field, with where it is."""
    ids = ("user_id", "session_id", "agent_id")
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for param in operation.get("parameters", []):
                if param["name"] in ids:
                    yield f"{method} {path} {param['name']}", param["schema"]
    for name, component in document["components"]["schemas"].items():
        for field, schema in component.get("properties", {}).items():
            if field in ids and name.endswith("Request"):  # a request body's
                yield f"{name}.{field}", schema


#: Ids the server refuses: invisible, spaces at the ends, compatibility characters, mixed
#: alphabets; and ids it accepts.
REFUSED_IDS = [
    " s",
    "s ",
    "a\u200bb",
    "\u00a0s",
    "\uff53",
    "pro\ufb01le",
    "p\u0430ypal",
    "g\u03bfod",
]
ACCEPTED_IDS = ["s", "a b", "caf\u00e9", "\u0434\u043e\u043a\u043b\u0430\u0434", "\u6771\u4eac-abc"]


def test_every_id_in_the_schema_refuses_what_the_server_refuses(db: Any) -> None:
    """The schema's id pattern is the server's rule (but for what a pattern cannot say: lone
    surrogates, characters beyond the Basic Multilingual Plane, sequences NFC composes)."""
    from rest_framework.test import APIClient

    from squad_memory.rules import id_pattern, id_problem

    found = dict(id_schemas(schema_document(APIClient())))
    assert len(found) >= 8, sorted(found)
    for where, schema in found.items():
        assert schema.get("pattern") == id_pattern(), where
    pattern = re.compile(id_pattern())
    for value in REFUSED_IDS + ACCEPTED_IDS:
        assert (id_problem(value) is None) == bool(pattern.fullmatch(value)), value
    for point in range(0x10000):
        if not 0xD800 <= point <= 0xDFFF:
            value = f"0{chr(point)}0"
            assert (id_problem(value) is None) == bool(pattern.fullmatch(value)), hex(point)


@pytest.mark.parametrize(
    "path",
    [
        "/api/search/?q=a&q=b",
        "/api/sessions/?user_id=a&user_id=b",
        "/api/sessions/s1/history/?user_id=a&user_id=b",
        "/api/slots/?session_id=a&session_id=b",
    ],
)
def test_a_repeated_query_parameter_is_a_400_naming_it(token: str, path: str) -> None:
    """Not its last value, silently: the schema states each parameter once."""
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    reply = client.get(path)
    name = path.split("?")[1].split("=")[0]
    assert reply.status_code == 400 and list(reply.json()) == [name], reply.json()
    assert "more than once" in reply.json()[name][0]


def test_every_operation_taking_an_idempotency_key_documents_its_422(db: Any) -> None:
    from rest_framework.test import APIClient

    from squad_memory.api.docs import IDEMPOTENCY_KEY

    keyed = [
        (path, method, operation)
        for path, operations in schema_document(APIClient())["paths"].items()
        for method, operation in operations.items()
        if any(p["name"] == IDEMPOTENCY_KEY.name for p in operation.get("parameters", []))
    ]
    assert keyed
    for path, method, operation in keyed:
        assert "422" in operation["responses"], (method, path)

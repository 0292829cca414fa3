"""No API response is HTML: unknown URLs, unhandled errors and an unreachable database."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

from tests.api_support import Users, assert_error_id, client_for, fill, make_user
from tests.conftest import extra

extra("rest_framework", "api")  # every test here talks to the REST API

pytest_plugins = ["tests.api_fixtures", "tests.celery_fixtures"]


def assert_json(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status
    assert response["Content-Type"].startswith("application/json")
    body: dict[str, Any] = response.json()
    assert body["detail"]
    return body


def test_unknown_urls_under_the_api_are_json_404_without_a_middleware(
    users: Users, settings: Any
) -> None:
    # Django's own only: the demo's AdmissionMiddleware (ASGI's bound) has no part in it
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if "squad_memory" not in m]
    client = client_for(users.owner)
    assert_json(client.get("/api/nope/"), 404)
    assert_json(client.get("/api/slots/1/nothing-here/"), 404)
    assert_json(client_for(None).post("/api/nope/", {}, format="json"), 404)
    assert_json(client.get("/api/nope/", HTTP_ACCEPT="text/html"), 404)
    assert b"<h1>" in client.get("/nope/").content  # only the API answers JSON


@pytest.mark.django_db(transaction=True)  # publishes on commit
def test_compress_with_the_broker_down_hides_internals_from_non_staff(
    users: Users, broker_down: Any, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    slot = fill(users.owner, 4)
    mine = client_for(users.owner).post(f"/api/slots/{slot.pk}/compress/")
    body = assert_json(mine, 503)
    assert "127.0.0.1" not in body["detail"] and "Error" not in body["detail"]
    assert f"error id {body['error_id']}" in body["detail"]
    assert_error_id(body, caplog, f"slot {slot.pk}")
    staff = assert_json(client_for(users.staff).post(f"/api/slots/{slot.pk}/compress/"), 503)
    assert "127.0.0.1" in staff["detail"]  # staff with view_compression see the error
    assert int(mine["Retry-After"]) > 0


def test_an_unhandled_error_in_a_view_is_a_json_500(
    users: Users, caplog: pytest.LogCaptureFixture
) -> None:
    fill(users.owner, 2)
    broken = {"SUMMARIZER": "no_such_module.summarize"}  # get_storage() raises
    with override_settings(SQUAD_MEMORY=broken):
        response = client_for(users.owner).get("/api/slots/")
    body = assert_json(response, 500)
    assert "no_such_module" not in body["detail"]  # the detail goes to the log, not the client
    assert any("no_such_module" in str(r.exc_info) for r in caplog.records if r.exc_info)
    assert f"error id {body['error_id']}" in body["detail"]
    assert_error_id(body, caplog)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def unreachable_database() -> Iterator[None]:
    """The default connection pointed at a database that cannot be reached (a real failure:
    the next query tries to connect and gets the driver's error)."""
    saved_connection, original = connection.connection, dict(connection.settings_dict)
    if connection.vendor == "postgresql":
        connection.settings_dict.update(HOST="127.0.0.1", PORT=str(_closed_port()))
    else:
        connection.settings_dict["NAME"] = "/nonexistent-directory/squad_memory.sqlite3"
    connection.connection = None
    try:
        yield
    finally:
        if connection.connection is not None:
            connection.connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(original)
        connection.connection = saved_connection


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/slots/"),
        ("get", "/api/sessions/s1/history/"),
        ("post", "/api/slots/messages/"),
    ],
)
def test_database_unavailable_is_a_json_503_with_retry_after(
    transactional_db: Any, method: str, path: str
) -> None:
    client = client_for(make_user("owner"))
    assert getattr(client, method)(path, {}, format="json").status_code in (200, 400, 404)
    with unreachable_database():
        with pytest.raises(Exception):  # noqa: B017 - the database is really unreachable
            connection.ensure_connection()
        response = getattr(client, method)(path, {}, format="json")
    body = assert_json(response, 503)
    assert "database" in body["detail"].lower() and int(response["Retry-After"]) > 0
    assert client.get("/api/slots/").status_code == 200  # and it recovers

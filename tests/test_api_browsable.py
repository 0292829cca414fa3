"""A logged-in browser gets DRF's browsable API; API clients keep getting JSON."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, reverse

from squad_memory.models import Message
from tests.api_support import Users, client_for, fill
from tests.conftest import extra

extra("rest_framework", "api")  # every test here talks to the REST API

pytest_plugins = ["tests.api_fixtures"]

pytestmark = pytest.mark.django_db

HTML = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"  # Chromium's


def browser_for(users: Users) -> Client:
    client = Client()
    client.force_login(users.owner)  # a session, as after the admin's login page
    return client


def test_a_logged_in_browser_gets_the_browsable_api(users: Users) -> None:
    slot = fill(users.owner, 3)
    browser = browser_for(users)
    for path in (
        "/api/slots/",
        f"/api/slots/{slot.pk}/",
        f"/api/slots/{slot.pk}/messages/",
        f"/api/slots/{slot.pk}/buffer/",
        "/api/sessions/s1/history/",
    ):
        reply = browser.get(path, HTTP_ACCEPT=HTML)
        assert reply.status_code == 200, (path, reply.status_code)
        assert reply["Content-Type"].startswith("text/html"), path
        body = reply.content.decode()
        assert "rest_framework/js/" in body and "response-info" in body, path
    page = browser.get(f"/api/slots/{slot.pk}/messages/", HTTP_ACCEPT=HTML).content.decode()
    assert "m0" in page and "&quot;seq&quot;" in page  # the JSON, shown in the page


#: What a GET needs besides the path, by route name (a new endpoint that needs more is a 400).
QUERIES = {"search": {"q": "m0"}}


def routes(patterns: list[Any], prefix: str = "") -> Iterator[tuple[str, URLPattern]]:
    """Every route of the API's URLconf, with its namespaced name, the router's included."""
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from routes(entry.url_patterns, prefix)
        elif entry.name is not None:
            yield f"{prefix}{entry.name}", entry


def browsable_gets(pk: int) -> Iterator[tuple[str, str]]:
    """Each route whose view answers GET and offers the browsable API: its name and path."""
    from squad_memory.api import urls
    from squad_memory.api.formats import BrowsableRenderer

    for name, route in routes(urls.urlpatterns):
        view = getattr(route.callback, "cls", None)
        actions = getattr(route.callback, "actions", None)
        gets = "get" in actions if actions is not None else hasattr(view, "get")
        if view is None or not gets or BrowsableRenderer not in view.renderer_classes:
            continue
        values = {"session_id": "s1", "pk": pk}
        kwargs = {group: values[group] for group in route.pattern.regex.groupindex}
        yield name, reverse(f"squad_memory_api:{name}", kwargs=kwargs)


def test_every_endpoint_renders_in_the_browsable_api(users: Users) -> None:
    """Views that build their rows in ``get`` (sessions, search) have no queryset for DRF's
    filter form to ask for; each still renders, and so will any new endpoint."""
    slot = fill(users.owner, 3)
    browser = browser_for(users)
    seen = set()
    for name, path in browsable_gets(slot.pk):
        reply = browser.get(path, QUERIES.get(name, {}), HTTP_ACCEPT=HTML)
        assert reply.status_code == 200, (path, reply.status_code, reply.content[:300])
        assert reply["Content-Type"].startswith("text/html"), path
        assert "response-info" in reply.content.decode(), path
        seen.add(name)
    lists = {"root", "slot-list", "session-list", "session-history", "search", "slot-messages"}
    assert lists <= seen


def test_the_browsable_api_escapes_what_a_message_holds(users: Users) -> None:
    slot = fill(users.owner, 1)
    Message.objects.filter(slot=slot).update(content=[{"text": "<script>alert(1)</script>"}])
    page = browser_for(users).get(f"/api/slots/{slot.pk}/messages/", HTTP_ACCEPT=HTML)
    assert "<script>alert(1)</script>" not in page.content.decode()


@pytest.mark.parametrize("accept", [None, "*/*", "application/json"])
def test_api_clients_get_json(users: Users, accept: str | None) -> None:
    fill(users.owner, 2)
    headers = {} if accept is None else {"HTTP_ACCEPT": accept}
    for client in (client_for(users.owner), browser_for(users)):
        reply = client.get("/api/slots/", **headers)
        assert reply.status_code == 200
        assert reply["Content-Type"] == "application/json"
        assert reply.json()["results"][0]["session_id"] == "s1"


def test_an_anonymous_browser_is_refused_in_json(users: Users) -> None:
    # No API error is ever HTML (the error handler), browser or not.
    reply = Client().get("/api/slots/", HTTP_ACCEPT=HTML)
    assert reply.status_code == 401 and reply["Content-Type"].startswith("application/json")
    assert Client().get("/api/slots/").json()["detail"]


def test_a_user_who_is_not_staff_logs_in_to_the_browsable_api(users: Users) -> None:
    users.reader.set_password("a long password")
    users.reader.save()
    browser = Client()
    page = browser.get("/api/", HTTP_ACCEPT=HTML)  # the root is public (errors are JSON)
    assert "/api-auth/login/" in page.content.decode()  # the Log in link
    login = browser.post(
        "/api-auth/login/?next=/api/slots/",
        {"username": "reader", "password": "a long password"},
    )
    assert login.status_code == 302 and login["Location"] == "/api/slots/"
    reply = browser.get("/api/slots/", HTTP_ACCEPT=HTML)
    assert reply.status_code == 200 and reply["Content-Type"].startswith("text/html")

"""The API docs (Swagger UI and ReDoc) work with no internet: everything is served locally."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
from django.test import Client

from tests.browser_support import (
    ARTIFACTS,
    block_the_network,
    browser_fixture,  # noqa: F401
)
from tests.conftest import extra

extra("rest_framework", "api")  # every test here talks to the REST API

# Transactional: the browser's requests run on the live server's thread, which sees committed
# rows only.
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.services,
    pytest.mark.any_database,  # the pages read the schema, the same on every database
]


def schema_operations() -> list[tuple[str, str]]:
    """(METHOD, path) of every operation in the OpenAPI schema the docs pages load."""
    reply = Client().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert reply.status_code == 200
    methods = {"get", "post", "put", "patch", "delete"}
    return [
        (method.upper(), path)
        for path, item in reply.json()["paths"].items()
        for method in item
        if method in methods
    ]


def test_swagger_ui_lists_every_operation_offline(browser: Any, live_server: Any) -> None:
    operations = schema_operations()
    assert len(operations) >= 8
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    aborted = block_the_network(page)
    page.goto(f"{live_server.url}/api/docs/")
    page.wait_for_selector(".opblock-summary", timeout=15_000)
    shown = {
        (
            block.locator(".opblock-summary-method").inner_text().strip(),
            block.locator(".opblock-summary-path").inner_text().strip().replace("\u200b", ""),
        )
        for block in page.locator(".opblock-summary").all()
    }
    assert shown == set(operations)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "api-docs-offline.png"), full_page=False)
    assert aborted == []  # Swagger UI asks no other host for anything


def test_redoc_lists_every_operation_offline(browser: Any, live_server: Any) -> None:
    operations = schema_operations()
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    aborted = block_the_network(page)
    refused: list[str] = []  # what the page's Content-Security-Policy stopped
    page.on("console", lambda m: refused.append(m.text) if "Content Security" in m.text else None)
    page.goto(f"{live_server.url}/api/redoc/")
    page.wait_for_selector("[data-section-id^='operation/']", state="attached", timeout=15_000)
    sections = page.locator("[data-section-id^='operation/']").count()
    assert sections == len(operations)
    assert "/api/slots/{id}/buffer/" in page.content()
    search = page.locator("[data-section-id='operation/search_list']")
    assert "hits in <mark>" in search.inner_text()  # shown as text, not taken as a tag
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "api-redoc-offline.png"), full_page=False)
    page.wait_for_load_state("networkidle")  # the footer's logo, the fonts: asked for nothing
    assert aborted == [] and refused == []
    logo = page.locator("img[alt='redocly logo']")  # the side menu's "API docs by Redocly"
    src = urlsplit(logo.get_attribute("src") or "")
    assert src.path == "/static/squad_memory/api/redoc-logo.svg"
    assert logo.evaluate("image => image.complete && image.naturalWidth > 0")  # it loaded
    assert urlsplit(page.url).hostname in {"localhost", "127.0.0.1"}

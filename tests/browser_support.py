"""Headless Chromium for the browser tests, driven by Playwright.

Import the fixture in a test module: ``from tests.browser_support import browser_fixture``
(it is named ``browser``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.db import connections

from tests.conftest import require

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}


@pytest.fixture(name="browser")
def browser_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    chromium = str(CHROMIUM)
    require(
        Path(chromium).exists(), f"Chromium is not installed ({CHROMIUM}); apt-get install chromium"
    )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        require(False, "the playwright Python package is not installed (pip install playwright)")
    # Playwright's sync API keeps an event loop on this thread; the ORM calls made here
    # between browser steps are plain synchronous ones.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()
            # ORM calls made while Playwright's loop runs get their own connections
            # (asgiref's context-local storage); close them, or they block the test
            # database's teardown on PostgreSQL.
            connections.close_all()


def block_the_network(page: Any) -> list[str]:
    """Abort every request to a host other than this machine; returns the aborted URLs."""
    aborted: list[str] = []

    def handle(route: Any) -> None:
        url = route.request.url
        host = urlsplit(url).hostname or ""
        if urlsplit(url).scheme in {"http", "https", "ws", "wss"} and host not in LOCAL_HOSTS:
            aborted.append(url)
            route.abort()
        else:
            route.continue_()

    page.route("**/*", handle)
    return aborted

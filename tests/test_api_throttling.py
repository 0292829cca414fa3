"""Throttling: per-user, anonymous and compress rates; 429 is JSON with Retry-After."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import extra

extra("rest_framework", "api")  # throttling of the REST API

from rest_framework.settings import api_settings
from rest_framework.test import APIClient

from squad_memory.api.throttling import COMPRESS_SCOPE
from tests.api_support import Users, client_for, fill

pytest_plugins = ["tests.api_fixtures"]


def assert_throttled(response: Any) -> None:
    assert response.status_code == 429
    assert response["Content-Type"].startswith("application/json")
    assert "throttled" in response.json()["detail"].lower()
    assert int(response["Retry-After"]) > 0


def test_per_user_rate(users: Users, rates: Any) -> None:
    rates(user="3/minute", anon=None)
    owner, other = client_for(users.owner), client_for(users.other)
    assert [owner.get("/api/slots/").status_code for _ in range(3)] == [200] * 3
    assert_throttled(owner.get("/api/slots/"))
    assert other.get("/api/slots/").status_code == 200  # counted per user


def test_anonymous_rate_applies_before_the_401(db: Any, rates: Any) -> None:
    rates(anon="2/minute", user=None)
    client = APIClient()
    assert [client.get("/api/slots/").status_code for _ in range(2)] == [401, 401]
    assert_throttled(client.get("/api/slots/"))


@pytest.mark.django_db(transaction=True)  # compresses on commit
def test_compress_has_its_own_scope(users: Users, rates: Any) -> None:
    rates(user="100/minute", anon=None, **{COMPRESS_SCOPE: "1/minute"})
    slot = fill(users.owner, 4)
    client = client_for(users.owner)
    assert client.post(f"/api/slots/{slot.pk}/compress/").status_code == 200
    assert_throttled(client.post(f"/api/slots/{slot.pk}/compress/"))
    assert client.post(f"/api/slots/{slot.pk}/reset/").status_code == 200  # others still pass


def test_no_configured_rate_means_no_throttling(users: Users, rates: Any) -> None:
    rates()
    client = client_for(users.owner)
    assert {client.get("/api/slots/").status_code for _ in range(20)} == {200}


def test_the_demo_project_defines_every_rate() -> None:
    configured = api_settings.DEFAULT_THROTTLE_RATES
    assert {"user", "anon", COMPRESS_SCOPE} <= set(configured)


def test_failed_authentications_are_throttled_but_never_a_valid_token(
    users: Users, rates: Any
) -> None:
    """Wrong credentials from one address (a revoked token behind a NAT or an uncounted
    proxy) are limited; a request that authenticates from that address still passes."""
    rates(squad_memory_auth_failures="3/minute")  # the documented scope
    guesser = APIClient()
    guesser.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert [guesser.get("/api/slots/").status_code for _ in range(3)] == [401] * 3
    assert guesser.get("/api/schema/").status_code == 200  # public docs check no credentials
    assert_throttled(guesser.get("/api/slots/"))
    assert_throttled(guesser.post("/api/slots/messages/", {}, format="json"))
    neighbour = client_for(users.owner)  # the same address
    assert [neighbour.get("/api/slots/").status_code for _ in range(3)] == [200] * 3
    assert_throttled(guesser.get("/api/slots/"))  # the failures are still counted
    elsewhere = APIClient()
    elsewhere.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert elsewhere.get("/api/slots/", REMOTE_ADDR="10.0.0.9").status_code == 401


def test_a_new_forwarded_for_does_not_reset_the_anonymous_limit(db: Any, rates: Any) -> None:
    rates(anon="2/minute")
    client = APIClient()
    codes = [
        client.get("/api/slots/", HTTP_X_FORWARDED_FOR=f"203.0.113.{n}").status_code
        for n in range(3)
    ]
    assert codes == [401, 401, 429]


def test_behind_proxies_the_client_is_the_address_the_nearest_proxy_saw(
    db: Any, rates: Any, settings: Any
) -> None:
    rates(anon="2/minute")
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    client = APIClient()

    def get(forwarded: str) -> int:
        return int(client.get("/api/slots/", HTTP_X_FORWARDED_FOR=forwarded).status_code)

    assert [get(f"spoofed-{n}, 198.51.100.7") for n in range(3)] == [401, 401, 429]
    assert get("198.51.100.8") == 401  # another client behind the same proxy

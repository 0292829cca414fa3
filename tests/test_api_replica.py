"""The API behind a read replica that never catches up: every answer to a write is read
from the write database, so a stored write never answers 500 (and is never retried)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections
from django.test import override_settings

from squad_memory.models import Message, Slot
from tests.api_support import Users, client_for, one, post
from tests.conftest import extra

extra("rest_framework", "api")  # every test here talks to the REST API

pytest_plugins = ["tests.api_fixtures"]
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(databases=["default", "memory"])]


class LaggingReplicaRouter:
    """Writes go to the primary ("default"); squad_memory's reads go to a replica that has
    the schema but none of the rows ("memory", migrated and empty): one that never catches
    up. Accounts and tokens are read from the primary, so clients authenticate."""

    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        return "memory" if model._meta.app_label == "squad_memory" else None

    def db_for_write(self, model: type[Any], **hints: Any) -> str:
        return "default"

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True


@pytest.fixture
def lagging_replica() -> Iterator[None]:
    with override_settings(DATABASE_ROUTERS=[LaggingReplicaRouter()]):
        yield
    connections["memory"].close()


def stored() -> list[str]:
    rows = Message.objects.using("default").order_by("slot_id", "seq")
    return [m.content[0]["text"] for m in rows]


def test_a_post_to_a_new_slot_answers_201(users: Users, lagging_replica: None) -> None:
    client = client_for(users.owner)
    body = {"session_id": "s", "agent_id": "a", "message": one("user", "hello")}
    response = post(client, body)
    assert response.status_code == 201, response.content
    assert response.json()["slot"]["message_count"] == 1
    assert response.json()["stored"][0]["seq"] == 1
    assert stored() == ["hello"]
    assert not Slot.objects.exists()  # the replica still has nothing


def test_a_keyed_post_stores_once_and_replays(users: Users, lagging_replica: None) -> None:
    client = client_for(users.owner)
    body = {
        "session_id": "s",
        "agent_id": "a",
        "messages": [one("user", "q"), one("assistant", "a")],
    }
    first = post(client, body, HTTP_IDEMPOTENCY_KEY="key-1")
    again = post(client, body, HTTP_IDEMPOTENCY_KEY="key-1")
    assert (first.status_code, again.status_code) == (201, 201), first.content
    assert again["Idempotent-Replayed"] == "true" and again.json() == first.json()
    assert stored() == ["q", "a"]


@pytest.mark.django_db(transaction=True, databases=["default", "memory"])  # compresses on commit
def test_compress_and_reset_of_a_new_slot_answer_from_the_primary(
    users: Users, lagging_replica: None
) -> None:
    client = client_for(users.owner)
    batch = [one("user" if i % 2 == 0 else "assistant", f"m{i}. More.") for i in range(6)]
    slot_id = post(client, {"session_id": "s", "agent_id": "a", "messages": batch}).json()["slot"][
        "id"
    ]
    compressed = client.post(f"/api/slots/{slot_id}/compress/")
    assert compressed.status_code == 200, compressed.content
    assert compressed.json()["outcome"] == "applied"
    assert compressed.json()["slot"]["version"] == 1
    reset = client.post(f"/api/slots/{slot_id}/reset/")
    assert reset.status_code == 200 and reset.json()["active"] is False
    assert client.delete(f"/api/slots/{slot_id}/").status_code == 204
    assert stored() == []

"""Idempotency-Key on POST /api/slots/messages/: retries store nothing and get the first answer."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

from squad_memory.models import IdempotencyKey, Message
from tests.api_support import Users, client_for, make_user, one, post
from tests.conftest import extra

extra("rest_framework", "api")  # every test here talks to the REST API

pytest_plugins = ["tests.api_fixtures"]


def batch(*texts: str) -> dict[str, Any]:
    roles = ("user", "assistant")
    return {
        "session_id": "s1",
        "agent_id": "a1",
        "messages": [one(roles[i % 2], t) for i, t in enumerate(texts)],
    }


def keyed(client: Any, body: Any, key: str) -> Any:
    return post(client, body, HTTP_IDEMPOTENCY_KEY=key)


def test_a_retry_returns_the_first_answer_and_stores_nothing(users: Users) -> None:
    client = client_for(users.owner)
    first = keyed(client, batch("a", "b"), "k-1")
    assert first.status_code == 201 and "Idempotent-Replayed" not in first
    again = keyed(client, batch("a", "b"), "k-1")
    assert again.status_code == 201 and again.json() == first.json()
    assert [m["seq"] for m in again.json()["stored"]] == [1, 2]
    assert again["Idempotent-Replayed"] == "true"
    assert Message.objects.count() == 2 and IdempotencyKey.objects.count() == 1
    third = keyed(client, batch("a", "b"), "k-2")  # a new key is a new request
    assert [m["seq"] for m in third.json()["stored"]] == [3, 4]


def test_a_skipped_single_message_replays_its_200(users: Users) -> None:
    client = client_for(users.owner)
    body = {"session_id": "s1", "agent_id": "a1", "message": one("user", "x")}
    assert post(client, body).status_code == 201
    assert keyed(client, body, "k").status_code == 200  # repeats the last role: skipped
    assert post(client, {**body, "message": one("assistant", "y")}).status_code == 201
    replay = keyed(client, body, "k")
    assert replay.status_code == 200 and replay.json()["skipped"] is True
    assert Message.objects.count() == 2


def test_the_same_key_with_another_body_is_422(users: Users) -> None:
    client = client_for(users.owner)
    assert keyed(client, batch("a"), "k").status_code == 201
    response = keyed(client, batch("b"), "k")
    assert response.status_code == 422 and "different request" in response.json()["detail"]
    assert Message.objects.count() == 1


def test_keys_are_per_user(users: Users) -> None:
    assert keyed(client_for(users.owner), batch("a"), "shared").status_code == 201
    other = keyed(client_for(users.other), batch("a"), "shared")
    assert other.status_code == 201 and "Idempotent-Replayed" not in other
    assert Message.objects.count() == 2 and IdempotencyKey.objects.count() == 2


def test_without_a_key_every_post_stores(users: Users) -> None:
    client = client_for(users.owner)
    post(client, batch("a"))
    post(client, batch("a"))
    assert Message.objects.count() == 2 and not IdempotencyKey.objects.exists()


@pytest.mark.parametrize("key", ["", "x" * 256, "caf\u00e9"])
def test_an_unusable_key_is_400(users: Users, key: str) -> None:
    response = keyed(client_for(users.owner), batch("a"), key)
    assert response.status_code == 400 and "Idempotency-Key" in response.json()
    assert not Message.objects.exists()


def test_a_rejected_request_keeps_no_key(users: Users) -> None:
    client = client_for(users.owner)
    assert keyed(client, {"session_id": "s1", "agent_id": "a1"}, "k").status_code == 400
    assert not IdempotencyKey.objects.exists()
    assert keyed(client, batch("a"), "k").status_code == 201


def test_an_expired_key_is_a_new_request(users: Users) -> None:
    client = client_for(users.owner)
    keyed(client, batch("a"), "k")
    with override_settings(SQUAD_MEMORY={"IDEMPOTENCY_TTL": 0}):
        again = keyed(client, batch("a"), "k")
    assert again.status_code == 201 and "Idempotent-Replayed" not in again
    assert Message.objects.count() == 2 and IdempotencyKey.objects.count() == 1


@pytest.mark.postgres
def test_concurrent_retries_of_one_key_store_once(transactional_db: Any) -> None:
    client_user = make_user("racer")
    body = batch(*[f"m{i}" for i in range(40)])
    start = threading.Barrier(8)
    answers: list[tuple[int, Any]] = []
    replays: list[str] = []

    def retry() -> None:
        try:
            client = client_for(client_user)
            start.wait()
            response = keyed(client, body, "one-key")
            answers.append((response.status_code, response.json()))
            replays.append(response.get("Idempotent-Replayed", ""))
        finally:
            connection.close()

    threads = [threading.Thread(target=retry) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(answers) == 8
    assert {code for code, _ in answers} == {201}
    assert all(data == answers[0][1] for _, data in answers)
    assert Message.objects.count() == 40 and IdempotencyKey.objects.count() == 1
    assert sorted(replays) == [""] + ["true"] * 7  # one wrote, seven got its answer

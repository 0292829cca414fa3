"""squad_memory.idempotency: one write per key, atomic with its answer; expiry by the sweep."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from squad_memory import sweeping
from squad_memory.idempotency import (
    Answer,
    IdempotencyKeyReused,
    once,
    purge_expired,
    request_hash,
)
from squad_memory.models import IdempotencyKey, Slot

pytestmark = pytest.mark.django_db


def test_request_hash_ignores_key_order_but_not_values() -> None:
    assert request_hash("POST", "/p", {"a": 1, "b": 2}) == request_hash(
        "POST", "/p", {"b": 2, "a": 1}
    )
    assert request_hash("POST", "/p", {"a": 1}) != request_hash("POST", "/p", {"a": 2})
    assert request_hash("POST", "/p", {"a": 1}) != request_hash("POST", "/q", {"a": 1})


def test_once_runs_the_write_once_per_key() -> None:
    calls: list[int] = []

    def write() -> Answer:
        calls.append(1)
        Slot.objects.create(user_id="u", session_id=f"s{len(calls)}", agent_id="a")
        return Answer(201, {"n": len(calls)})

    first = once("1", "k", "h", write)
    second = once("1", "k", "h", write)
    assert first == Answer(201, {"n": 1}) and second == Answer(201, {"n": 1}, replayed=True)
    assert calls == [1] and Slot.objects.count() == 1
    with pytest.raises(IdempotencyKeyReused):
        once("1", "k", "other", write)


def test_a_failed_write_stores_nothing_not_even_its_key() -> None:
    def write() -> Answer:
        Slot.objects.create(user_id="u", session_id="s", agent_id="a")
        raise RuntimeError("crash after storing")

    with pytest.raises(RuntimeError):
        once("1", "k", "h", write)
    assert not Slot.objects.exists() and not IdempotencyKey.objects.exists()
    assert once("1", "k", "h", lambda: Answer(201, {})).replayed is False


def _key(age: timedelta, key: str) -> Any:
    return IdempotencyKey.objects.create(
        user="1", key=key, request_hash="h", status=201, body={}, created_at=timezone.now() - age
    )


def test_purge_expired_and_the_sweep_delete_old_keys() -> None:
    _key(timedelta(hours=25), "old")
    _key(timedelta(hours=23), "young")
    assert purge_expired() == 1
    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["young"]
    with override_settings(SQUAD_MEMORY={"IDEMPOTENCY_TTL": 3600}):
        sweeping.sweep()
    assert not IdempotencyKey.objects.exists()

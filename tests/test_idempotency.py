"""squad_memory.idempotency: one write per key, atomic with its answer; expiry by the sweep."""

from __future__ import annotations

import importlib
from datetime import timedelta
from io import StringIO
from types import SimpleNamespace
from typing import Any

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from squad_memory.models import IdempotencyKey, Slot
from squad_memory.operations import forgetting, housekeeping
from squad_memory.operations.idempotency import (
    Answer,
    IdempotencyKeyReused,
    once,
    purge_expired,
    request_hash,
)
from tests.api_support import Users, client_for, one, post
from tests.conftest import extra

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.api_fixtures"]


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
        housekeeping.sweep()
    assert not IdempotencyKey.objects.exists()


@pytest.mark.parametrize(
    ("ttl", "ok"),
    [
        (86400, True),
        (1, True),
        (0.5, True),
        (0, True),
        (-1, False),
        ("3600", False),
        (True, False),
        (1e12, False),
        (float("inf"), False),
        (float("nan"), False),
    ],
)
def test_idempotency_ttl_is_checked_and_the_sweep_refuses_one_out_of_range(
    ttl: Any, ok: bool
) -> None:
    """No OverflowError from the sweep's cutoff for a TTL too long to subtract: system check
    E009, and a ConfigurationError naming the setting."""
    from squad_memory.checks import check_settings
    from squad_memory.exceptions import ConfigurationError

    _key(timedelta(days=400), "old")
    with override_settings(SQUAD_MEMORY={"IDEMPOTENCY_TTL": ttl}):
        assert [e.id for e in check_settings()] == ([] if ok else ["squad_memory.E009"])
        if ok:
            assert purge_expired() == 1
        else:
            with pytest.raises(ConfigurationError, match="IDEMPOTENCY_TTL"):
                housekeeping.sweep()
            assert IdempotencyKey.objects.count() == 1


# -- erasure: the stored answers hold the posted text ------------------------------------------
SECRET = "my card number is 4111"


def keyed(client: Any, key: str, session: str = "s1", text: str = SECRET) -> Any:
    body = {"session_id": session, "agent_id": "a1", "messages": [one("user", text)]}
    return post(client, body, HTTP_IDEMPOTENCY_KEY=key)


def answers_of(user: Any) -> list[str]:
    return sorted(IdempotencyKey.objects.filter(user=str(user.pk)).values_list("key", flat=True))


def test_deleting_a_slot_deletes_its_answers_and_a_retry_is_a_new_request(users: Users) -> None:
    extra("rest_framework", "api")
    client = client_for(users.owner)
    first = keyed(client, "k-1")
    assert first.status_code == 201 and keyed(client, "k-2", "s2").status_code == 201
    assert keyed(client_for(users.other), "k-1").status_code == 201  # same key, other account
    assert client.delete(f"/api/slots/{first.json()['slot']['id']}/").status_code == 204
    assert answers_of(users.owner) == ["k-2"] and answers_of(users.other) == ["k-1"]
    retry = keyed(client, "k-1")  # not the old 201 of a slot that no longer exists
    assert retry.status_code == 201 and "Idempotent-Replayed" not in retry
    assert retry.json()["slot"]["id"] != first.json()["slot"]["id"]
    assert Slot.objects.filter(pk=retry.json()["slot"]["id"]).exists()
    assert answers_of(users.owner) == ["k-1", "k-2"]


def test_forgetting_a_user_deletes_their_answers_and_counts_them(users: Users) -> None:
    extra("rest_framework", "api")
    client = client_for(users.owner)
    for key, session in (("k-1", "s1"), ("k-2", "s1"), ("k-3", "s2")):
        assert keyed(client, key, session, f"{SECRET} {key}").status_code == 201
    assert keyed(client_for(users.other), "k-1").status_code == 201
    owner = str(users.owner.pk)
    assert forgetting.forget(owner, "s2", dry_run=True).idempotency_keys == 1
    assert forgetting.forget(owner, "s2").idempotency_keys == 1
    out = StringIO()
    call_command("squad_memory_forget", "--user", owner, stdout=out, stderr=StringIO())
    assert f"{IdempotencyKey._meta.db_table}: 2" in out.getvalue()
    assert answers_of(users.owner) == [] and answers_of(users.other) == ["k-1"]
    bodies = IdempotencyKey.objects.values_list("body", flat=True)
    assert not any(f"{SECRET} k-" in str(body) for body in bodies)  # none of their text is left


def test_the_migration_ties_stored_answers_to_their_slots() -> None:
    migration = importlib.import_module("squad_memory.migrations.0007_erasure_and_backoff")
    slot = Slot.objects.create(user_id="u", session_id="s", agent_id="a")
    for key, body in (
        ("tied", {"slot": {"id": slot.pk}}),
        ("gone", {"slot": {"id": 0}}),
        ("x", []),
        ("no id", {"slot": {"id": None}}),
        ("no slot", {"messages": []}),
    ):
        answer(key, body)
    migration.tie_answers_to_slots(apps, SimpleNamespace(connection=connection))
    assert dict(IdempotencyKey.objects.values_list("key", "slot_id")) == {
        "tied": slot.pk,
        "x": None,
        "no id": None,
        "no slot": None,
    }
    slot.delete()
    assert sorted(IdempotencyKey.objects.values_list("key", flat=True)) == ["no id", "no slot", "x"]


def answer(key: str, body: Any) -> None:
    IdempotencyKey.objects.create(
        user="1", key=key, request_hash="h", status=201, body=body, created_at=timezone.now()
    )


def test_the_migration_ties_answers_with_statements_whatever_their_number() -> None:
    """Set-based, outside the schema change's transaction: the lock its new columns take is
    not held while the answers are tied, and tying them does not take a query per answer."""
    migration = importlib.import_module("squad_memory.migrations.0007_erasure_and_backoff")
    slot = Slot.objects.create(user_id="u", session_id="s", agent_id="a")
    counts = []
    for n in (2, 6):
        for i in range(n):
            answer(f"{n}-{i}", {"slot": {"id": slot.pk if i % 2 else 0}})
        with CaptureQueriesContext(connection) as tying:
            migration.tie_answers_to_slots(apps, SimpleNamespace(connection=connection))
        counts.append(len(tying.captured_queries))
    assert counts[0] == counts[1] <= 3, counts
    assert IdempotencyKey.objects.filter(slot=slot).count() == 1 + 3
    assert not migration.Migration.atomic

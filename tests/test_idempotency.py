"""squad_memory.idempotency: one write per key, atomic with its answer; expiry by the sweep."""

from __future__ import annotations

import asyncio
import importlib
import threading
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

from squad_memory.exceptions import InvalidIdempotencyKey
from squad_memory.models import IdempotencyKey, Message, Slot
from squad_memory.models.idempotency import STORAGE_OWNER
from squad_memory.operations import forgetting, housekeeping
from squad_memory.operations.idempotency import (
    Answer,
    IdempotencyKeyReused,
    once,
    purge_expired,
    request_hash,
)
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
from squad_memory.threads import close_database_threads
from tests import summarizers
from tests.api_support import Users, client_for, one, post
from tests.conftest import extra, msg, texts

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


# -- the storage's idempotency_key: a retry after a cancel stores nothing ----------------------
class Gate:
    """A ``TOKEN_COUNTER`` that holds every save inside its transaction (after its key is
    claimed, before its rows are inserted) until :meth:`open`: a save its caller cancelled
    is certainly still running when the caller gets its ``TimeoutError``."""

    def __init__(self) -> None:
        self.opened = threading.Event()

    def __call__(self, message: Any) -> int:
        assert self.opened.wait(60), "the test never opened the gate"
        return 1

    def open(self) -> None:
        self.opened.set()


def batch_of(i: int) -> list[Any]:
    return [msg("user", f"q{i}"), msg("assistant", f"a{i}")]


async def cancelled_then_retried(storage: Any, i: int, key: str | None) -> None:
    """A save cancelled by ``wait_for`` while it runs, then retried once after the timeout
    (before the first save ends for odd ``i``, after it for even ``i``)."""
    gate = Gate()
    with override_settings(SQUAD_MEMORY={"TOKEN_COUNTER": gate}):
        save = storage.save_chat_messages("u", "s", "a", batch_of(i), idempotency_key=key)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(save, timeout=0.05)
        if i % 2 == 0:
            gate.open()
        retry = asyncio.ensure_future(
            storage.save_chat_messages("u", "s", "a", batch_of(i), idempotency_key=key)
        )
        await asyncio.sleep(0)
        gate.open()
        conversation = await retry
    assert texts(conversation)[-2:] == [f"q{i}", f"a{i}"]


def stored_texts() -> list[str]:
    return list(Message.objects.order_by("seq").values_list("text", flat=True))


@pytest.mark.django_db(transaction=True)  # database threads see committed rows only
@pytest.mark.parametrize("storage_class", ["django", "summarizing"])
def test_a_cancelled_save_retried_with_its_key_is_stored_exactly_once(storage_class: str) -> None:
    """A save cancelled by ``asyncio.wait_for`` runs on to its end on its database thread
    (its caller does not wait for it); a retry with the same ``idempotency_key`` waits for
    it if need be, stores nothing and returns the conversation with the batch once."""
    storage = (
        DjangoChatStorage()
        if storage_class == "django"
        else SummarizingChatStorage(DjangoChatStorage(), summarizers.fold, trigger_at=100)
    )

    async def main() -> None:
        for i in range(6):
            await cancelled_then_retried(storage, i, f"batch-{i}")

    try:
        asyncio.run(main())
    finally:
        close_database_threads()
    assert stored_texts() == [text for i in range(6) for text in (f"q{i}", f"a{i}")]
    assert IdempotencyKey.objects.count() == 6


@pytest.mark.django_db(transaction=True)  # database threads see committed rows only
def test_without_a_key_a_cancelled_save_lands_and_its_retry_stores_it_again() -> None:
    """Why the key is needed: the cancelled save is stored after its caller's
    ``TimeoutError``, so a plain retry stores the batch a second time."""
    try:
        asyncio.run(cancelled_then_retried(DjangoChatStorage(), 0, None))
    finally:
        close_database_threads()
    assert stored_texts() == ["q0", "a0", "q0", "a0"]


def test_a_keyed_save_replays_its_first_answer_and_refuses_another_body() -> None:
    storage = DjangoChatStorage()
    first = storage.save_messages_detailed(
        "u", "s", "a", batch_of(0), check_role=False, idempotency_key="k"
    )
    storage.save_chat_message_sync("u", "s", "a", msg("user", "later"))
    again = storage.save_messages_detailed(
        "u", "s", "a", batch_of(0), check_role=False, idempotency_key="k"
    )
    assert again.replayed and not first.replayed and again.slot.pk == first.slot.pk
    assert [r.pk for r in again.rows] == [r.pk for r in first.rows] and not again.skipped
    conversation = storage.save_chat_messages_sync("u", "s", "a", batch_of(0), idempotency_key="k")
    assert texts(conversation) == ["q0", "a0", "later"]  # the conversation now, the batch once
    with pytest.raises(IdempotencyKeyReused):
        storage.save_chat_messages_sync("u", "s", "a", batch_of(1), idempotency_key="k")
    with pytest.raises(IdempotencyKeyReused):  # one message with the role rule: another request
        storage.save_chat_message_sync("u", "s", "a", batch_of(0)[0], idempotency_key="k")
    assert stored_texts() == ["q0", "a0", "later"]


def test_a_skipped_message_is_replayed_as_skipped() -> None:
    storage = DjangoChatStorage()
    storage.save_chat_message_sync("u", "s", "a", msg("user", "hi"))
    for _ in range(2):
        saved = storage.save_messages_detailed(
            "u", "s", "a", [msg("user", "again")], check_role=True, idempotency_key="k"
        )
        assert saved.skipped and saved.rows == []
    assert stored_texts() == ["hi"]


def test_a_key_is_per_slot_and_never_meets_the_apis(users: Users) -> None:
    """The storage's keys belong to a slot (owner ``squad_memory.storage:`` and its hash);
    the API's to an account: the same key string in both, or in two slots, is two saves."""
    extra("rest_framework", "api")
    storage = DjangoChatStorage()
    owner = str(users.owner.pk)
    assert keyed(client_for(users.owner), "k").status_code == 201
    storage.save_chat_message_sync(owner, "s1", "a1", msg("assistant", "x"), idempotency_key="k")
    storage.save_chat_message_sync(owner, "s2", "a1", msg("user", "x"), idempotency_key="k")
    storage.save_chat_message_sync(owner, "s1", "a2", msg("user", "x"), idempotency_key="k")
    assert Message.objects.count() == 4
    owners = sorted(IdempotencyKey.objects.values_list("user", flat=True))
    assert owners[0] == owner and all(o.startswith(STORAGE_OWNER) for o in owners[1:])
    assert len(set(owners)) == 4


@pytest.mark.parametrize("key", ["", "x" * 256, "caf\u00e9", "tab\t", 42])
def test_a_bad_key_is_refused_before_anything_is_stored(key: Any) -> None:
    with pytest.raises(InvalidIdempotencyKey, match="printable ASCII"):
        DjangoChatStorage().save_chat_message_sync(
            "u", "s", "a", msg("user", "x"), idempotency_key=key
        )
    assert not Slot.objects.exists()


def test_the_key_is_an_extra_keyword_so_the_chat_storage_contract_is_unchanged() -> None:
    import inspect

    from agent_squad.storage import ChatStorage

    for name in ("save_chat_message", "save_chat_messages"):
        ours = inspect.signature(getattr(DjangoChatStorage, name)).parameters
        theirs = inspect.signature(getattr(ChatStorage, name)).parameters
        assert list(ours)[: len(theirs)] == list(theirs)
        extra_key = ours["idempotency_key"]
        assert extra_key.kind is inspect.Parameter.KEYWORD_ONLY and extra_key.default is None


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

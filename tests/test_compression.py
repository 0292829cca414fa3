"""The compression pipeline: one outcome for every request to compress, and every path
(API, admin action, Python) reports exactly that outcome."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from agent_squad.types import ConversationMessage
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

import squad_memory
from squad_memory import compression
from squad_memory.compression import log
from squad_memory.models import Compression, Limits, Message, Outcome, Slot
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
from tests import celery_summarizers as cs
from tests.api_support import Users, client_for, fill, text_of
from tests.conftest import extra, msg

pytest_plugins = ["tests.api_fixtures"]
# Transactional: the compressions these tests ask for run on commit (transaction.on_commit).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.prepared]

FOLD = "tests.celery_summarizers.fold"
#: Messages of two sentences: the offline summarizer keeps the first, so it compresses.
PAIRS = [msg("user" if i % 2 == 0 else "assistant", text_of(i)) for i in range(8)]
CELERY = {"SUMMARIZER": FOLD, "TRIGGER_AT": 2, "KEEP_LAST": 1, "MODE": "celery"}


@pytest.fixture
def broker_refusing() -> Iterator[Any]:
    """The current Celery app publishes to a local port where nothing listens."""
    extra("celery", "celery")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    from celery import Celery, current_app

    previous = current_app._get_current_object()
    app = Celery("squad-memory-refused", broker=f"redis://127.0.0.1:{port}/0", set_as_current=False)
    app.conf.update(broker_connection_timeout=1, task_ignore_result=True)
    app.set_current()
    yield app
    previous.set_current()
    app.close()


def test_compress_now_always_answers_an_outcome() -> None:
    store = squad_memory.get_storage()
    assert store.compress_now("nobody", "s", "a").outcome == Outcome.SKIPPED
    store.save_chat_messages_sync("u", "s", "a", PAIRS)
    result = store.compress_now("u", "s", "a")
    assert result.outcome == Outcome.APPLIED and result.log_id == Compression.objects.get().pk


def test_api_compress_while_one_is_pending_says_already_pending(users: Users) -> None:
    slot = fill(users.owner, 6)
    slot.refresh_from_db()
    with override_settings(SQUAD_MEMORY=CELERY):
        Slot.objects.filter(pk=slot.pk).update(active=True, covered_seq=0)
        claimed = compression.claim(slot.pk, Limits(1, 0), lease_seconds=600)
        assert claimed is not None
        response = client_for(users.owner).post(f"/api/slots/{slot.pk}/compress/")
    assert response.status_code == 202 and response.json()["outcome"] == "already_pending"
    assert Slot.objects.get(pk=slot.pk).pending_token == claimed.token  # nothing new queued


def test_api_compress_with_the_broker_refusing_says_not_queued(
    users: Users, broker_refusing: Any
) -> None:
    slot = fill(users.owner, 6)
    with override_settings(SQUAD_MEMORY=CELERY):
        response = client_for(users.owner).post(f"/api/slots/{slot.pk}/compress/")
    assert response.status_code == 503 and "could not be queued" in response.json()["detail"]
    assert response["Retry-After"]
    assert Slot.objects.get(pk=slot.pk).pending_since is None  # the claim was released


@pytest.mark.parametrize("atomic", [True, False])
def test_api_compress_inline_reports_applied_even_with_atomic_requests(
    users: Users, settings: Any, atomic: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Restored at the end (settings restores only its own names): the next test in this
    # process must not run its requests atomic.
    monkeypatch.setitem(settings.DATABASES["default"], "ATOMIC_REQUESTS", atomic)
    slot = fill(users.owner, 6)
    response = client_for(users.owner).post(f"/api/slots/{slot.pk}/compress/")
    assert response.status_code == 200 and response.json()["outcome"] == "applied"
    assert response.json()["slot"]["state"] == "active"


def test_compress_inside_a_callers_transaction_is_deferred_to_the_commit() -> None:
    store = squad_memory.get_storage()
    store.save_chat_messages_sync("u", "s", "a", PAIRS)
    with transaction.atomic():
        result = store.compress_now("u", "s", "a")
        assert result.outcome == Outcome.DEFERRED and not Compression.objects.exists()
    assert Compression.objects.get().outcome == "applied"


def test_api_buffer_read_that_activates_says_active(users: Users) -> None:
    slot = fill(users.owner, 50)  # inactive and long: this read starts the buffer
    body = client_for(users.owner).get(f"/api/slots/{slot.pk}/buffer/").json()
    assert body["active"] is True and body["messages"][0]["content"][0]["text"].startswith("[")


def test_admin_summarize_reports_the_outcome(admin_client: Any) -> None:
    store = squad_memory.get_storage()
    store.save_chat_messages_sync("u", "s", "a", [msg("user", "q"), msg("assistant", "a")])
    slot = Slot.objects.get()
    now = timezone.now()
    Slot.objects.filter(pk=slot.pk).update(
        active=True, pending_since=now, pending_token="t", lease_until=now + timedelta(minutes=1)
    )
    page = admin_client.post(f"/admin/squad_memory/slot/{slot.pk}/summarize/", follow=True)
    assert "already running" in page.content.decode()
    assert not Compression.objects.exists()


def test_the_log_records_what_a_compression_read_by_reference() -> None:
    store = squad_memory.get_storage()
    for _ in range(3):  # three rounds: the second and third read the first's output
        store.save_chat_messages_sync("u", "s", "a", PAIRS)
        assert store.compress_now("u", "s", "a").applied
    rows = list(Compression.objects.order_by("id"))
    assert [r.by_reference for r in rows] == [True] * 3
    assert rows[1].previous_id == rows[0].pk and rows[2].previous_id == rows[1].pk
    assert all(r.input == [] for r in rows)  # nothing copied: the prefix is a reference
    slot = Slot.objects.get()
    assert log.output_of(rows[-1]) == slot.summary  # the output, rebuilt, is the buffer's head
    raw = [m.as_dict() for m in Message.objects.filter(slot=slot).order_by("seq")]
    for row in rows:
        before = log.input_of(row)
        span = [
            {k: m[k] for k in ("role", "content", "citations")}
            for m in raw[row.from_seq - 1 : row.to_seq]
        ]
        previous = log.output_of(row.previous) if row.previous else []
        assert before == previous + span
        assert len(row.output or []) < len(log.output_of(row) or [])  # kept messages by reference


# -- refusals, skips and cancellations ---------------------------------------------------------

KEY = ("u", "s", "a")


def summary_in_place_of_the_first(history: list[Any], keep_last: int) -> list[Any]:
    """Makes no progress: a summary in place of the first message, as many as it was given."""
    CALLS.append(len(history))
    return [ConversationMessage("user", [{"text": "S"}]), *history[1:]]


def unchanged(history: list[Any], keep_last: int) -> list[Any]:
    CALLS.append(len(history))
    return list(history)


CALLS: list[int] = []


@pytest.fixture(autouse=True)
def _no_calls() -> None:
    CALLS.clear()


def pair(i: int) -> list[ConversationMessage]:
    return [msg("user", f"u{i}"), msg("assistant", f"a{i}")]


def test_a_compression_that_does_not_shrink_the_buffer_is_refused_and_backs_off() -> None:
    store = SummarizingChatStorage(DjangoChatStorage(), summary_in_place_of_the_first, 2, 1)
    for i in range(3):
        store.save_chat_messages_sync(*KEY, pair(i))
    store.fetch_chat_sync(*KEY)  # activates: the first compression
    for i in range(3, 12):
        store.save_chat_messages_sync(*KEY, pair(i))
        store.fetch_chat_sync(*KEY)
    assert CALLS == [6]  # refused once, then no save asks again while it backs off
    row = Compression.objects.get()
    assert row.outcome == "failed" and "InvalidSummarizerOutput" in row.error
    assert "fewer messages" in row.error
    slot = Slot.objects.get()
    assert slot.covered_seq == 0 and slot.retry_after is not None
    assert slot.retry_after > timezone.now() + timedelta(seconds=590)  # PENDING_TIMEOUT


def test_a_skipped_compression_is_logged_as_skipped(caplog: pytest.LogCaptureFixture) -> None:
    store = SummarizingChatStorage(DjangoChatStorage(), unchanged, 2, 1)
    store.save_chat_messages_sync(*KEY, [m for i in range(3) for m in pair(i)])
    with caplog.at_level(logging.INFO, logger="squad_memory"):
        assert store.compress_now(*KEY).outcome == Outcome.SKIPPED
    assert CALLS == [6]
    assert "stale" not in caplog.text
    assert "skipped: the summarizer returned the buffer unchanged" in caplog.text


def test_a_slot_deleted_while_it_compresses_is_cancelled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = SummarizingChatStorage(DjangoChatStorage(), "tests.celery_summarizers.fold", 2, 1)
    store.save_chat_messages_sync(*KEY, [m for i in range(3) for m in pair(i)])
    cs.DURING.append(lambda: Slot.objects.all().delete())
    with caplog.at_level(logging.INFO, logger="squad_memory"):
        result = store.compress_now(*KEY)
    assert (result.outcome, result.error, result.detail) == (
        Outcome.SKIPPED,
        None,
        "cancelled: the slot was deleted",
    )
    assert "cancelled: the slot was deleted while it compressed" in caplog.text
    assert "failed" not in caplog.text and "interrupted" not in caplog.text
    assert not Slot.objects.exists() and not Compression.objects.exists()

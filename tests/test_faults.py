"""Faults on the compression path: output that does not shrink, interrupted and dead
compressions, a database that restarts mid-compression, and the hard limit on a buffer
while compressions lag or fail."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import Any

import pytest
from agent_squad.types import ConversationMessage
from django.db import connection
from django.db.models import Sum
from django.utils import timezone

from squad_memory import compression
from squad_memory.models import Compression, Limits, Message, Outcome, Slot
from squad_memory.operations import forgetting
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
from tests import summarizers
from tests.celery_fixtures import queued_args
from tests.conftest import msg, texts

# Transactional: the compressions run on commit (transaction.on_commit), some on threads of
# their own.
pytestmark = pytest.mark.django_db(transaction=True)
pytest_plugins = ["tests.celery_fixtures"]

KEY = ("u", "s", "a")


def wrap(
    summarizer: Any = summarizers.fold, trigger_at: int = 2, **kw: Any
) -> SummarizingChatStorage:
    return SummarizingChatStorage(DjangoChatStorage(), summarizer, trigger_at, 1, **kw)


def pair(store: SummarizingChatStorage, i: int) -> None:
    store.save_chat_message_sync(*KEY, msg("user", f"q{i}"))
    store.save_chat_message_sync(*KEY, msg("assistant", f"a{i}"))


def slot() -> Slot:
    return Slot.objects.get()


# -- 2. output that is not smaller -----------------------------------------------------------
def doubling(history: list[ConversationMessage], keep_last: int) -> list[ConversationMessage]:
    return list(history) + list(history)


def one_huge(history: list[ConversationMessage], keep_last: int) -> list[ConversationMessage]:
    return [ConversationMessage("user", [{"text": "[Summary] " + "x" * 5000}])]


@pytest.mark.parametrize("summarizer", [doubling, one_huge])
def test_output_larger_than_its_input_is_failed_and_not_applied(summarizer: Any) -> None:
    store = wrap(summarizer)
    for i in range(8):
        pair(store, i)
    store.fetch_chat_sync(*KEY)
    assert slot().buffer_length == 16  # never doubled: nothing was applied
    assert slot().summary == [] and Compression.objects.filter(outcome="applied").count() == 0
    failed = Compression.objects.filter(outcome="failed")
    assert failed.exists() and "InvalidSummarizerOutput" in failed.first().error  # type: ignore[union-attr]


def test_output_that_grows_is_not_applied_nor_tried_again_on_every_save() -> None:
    """As many messages as it got, each just under MAX_SUMMARY_CHARS: the context would grow
    hundreds of times. Refused, and saves try again only after PENDING_TIMEOUT."""
    calls: list[int] = []

    def growing(history: list[ConversationMessage], keep_last: int) -> list[ConversationMessage]:
        calls.append(len(history))
        return [
            ConversationMessage(m.role, [{"text": f"{i} " + "x" * 3990}])
            for i, m in enumerate(history)
        ]

    store = wrap(growing)
    for i in range(3):
        pair(store, i)
    store.fetch_chat_sync(*KEY)  # activates: the compression is refused
    stored = Message.objects.aggregate(total=Sum("tokens"))
    s = slot()
    assert calls == [6] and s.summary == [] and s.last_failed and s.buffer_tokens == stored["total"]
    error = Compression.objects.get(outcome="failed").error
    assert "InvalidSummarizerOutput" in error and "larger than its input" in error
    for i in range(3, 13):
        pair(store, i)  # twenty saves over the threshold
    s = slot()
    assert calls == [6] and s.summary == [] and s.state == "failed"
    assert s.buffer_tokens == Message.objects.aggregate(total=Sum("tokens"))["total"]
    Slot.objects.update(retry_after=timezone.now())  # PENDING_TIMEOUT has passed
    pair(store, 13)
    assert len(calls) == 2  # the next save over the threshold tries again


# -- 3. no stuck claims ----------------------------------------------------------------------
def _raiser(error: BaseException) -> Any:
    def summarize(history: list[ConversationMessage], keep_last: int) -> Any:
        raise error

    return summarize


@pytest.mark.parametrize(
    "error", [asyncio.CancelledError(), SystemExit(3), KeyboardInterrupt()], ids=type
)
def test_an_interrupted_compression_releases_its_claim_logs_and_reraises(
    error: BaseException,
) -> None:
    store = wrap(_raiser(error))
    for i in range(3):
        pair(store, i)
    with pytest.raises(type(error)):
        store.fetch_chat_sync(*KEY)  # activates: the inline compression is interrupted
    s = slot()
    assert s.pending_since is None and s.pending_token == "" and s.last_failed
    row = Compression.objects.get()
    assert row.outcome == "failed" and type(error).__name__ in row.error
    assert Message.objects.count() == 6  # the message that crossed stays stored
    healthy = wrap()
    healthy.save_chat_message_sync(*KEY, msg("user", "q3"))  # the next save compresses
    assert slot().pending_since is None
    assert Compression.objects.filter(outcome="applied").count() == 1


@pytest.mark.parametrize("interrupted", [False, True], ids=["returns", "interrupted"])
def test_a_slot_deleted_while_it_compresses_logs_no_error(
    caplog: pytest.LogCaptureFixture, interrupted: bool
) -> None:
    def erase_then_fold(history: list[ConversationMessage], keep_last: int) -> Any:
        forgetting.forget("u")  # an erasure request lands while the summarizer runs
        if interrupted:
            raise KeyboardInterrupt
        return summarizers.fold(history, keep_last)

    store = wrap(erase_then_fold)
    for i in range(3):
        pair(store, i)
    caplog.set_level(logging.INFO, logger="squad_memory")
    with pytest.raises(KeyboardInterrupt) if interrupted else contextlib.nullcontext():
        assert store.fetch_chat_sync(*KEY) == []  # activates; the slot is gone after it
    assert not Slot.objects.exists() and not Compression.objects.exists()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert any("was deleted while it compressed" in r.getMessage() for r in caplog.records)


@pytest.mark.postgres
def test_a_database_restart_during_a_compression_releases_the_claim() -> None:
    import psycopg

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    params = connection.get_connection_params()
    dsn = {k: params[k] for k in ("dbname", "user", "host", "port", "password") if params.get(k)}

    def restart_then_fold(history: list[ConversationMessage], keep_last: int) -> Any:
        with psycopg.connect(**dsn, autocommit=True) as admin:  # what a restart does to us
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        return summarizers.fold(history, keep_last)

    store = wrap(restart_then_fold)
    for i in range(3):
        pair(store, i)
    assert len(store.fetch_chat_sync(*KEY)) == 6  # activates; answers: the claim is released
    s = slot()
    assert s.pending_since is None and s.last_failed and s.summary == []
    row = Compression.objects.get()
    assert row.outcome == "failed" and "OperationalError" in row.error
    assert [m.seq for m in Message.objects.order_by("seq")] == [1, 2, 3, 4, 5, 6]


def test_a_dead_process_claim_is_taken_over_when_its_lease_runs_out(settings: Any) -> None:
    settings.SQUAD_MEMORY = {"CLAIM_LEASE": 1}
    store = wrap()
    for i in range(3):
        pair(store, i)
    store.fetch_chat_sync(*KEY)
    for i in range(3, 5):
        pair(store, i)  # each crossing save compresses: the buffer stays short
    s = slot()
    dead = compression.claim(s.pk, Limits(1, 0), lease_seconds=1)  # its process dies: never run
    assert dead is not None
    assert store.compress_now(*KEY).outcome == Outcome.ALREADY_PENDING
    time.sleep(1.2)
    assert store.compress_now(*KEY).outcome == Outcome.APPLIED
    assert compression.run(dead, store.summarizer).outcome == Outcome.SKIPPED  # too late


@pytest.mark.postgres
def test_a_running_compression_renews_its_lease_so_nobody_runs_a_second(settings: Any) -> None:
    settings.SQUAD_MEMORY = {"CLAIM_LEASE": 0.6}
    gate = summarizers.Gate()
    store = wrap(gate)
    for i in range(3):
        pair(store, i)
    worker = threading.Thread(target=store.compress_now, args=KEY)
    worker.start()
    assert gate.entered.wait(5)
    time.sleep(1.5)  # well past one lease: only the renewal keeps the claim alive
    answers = [wrap().compress_now(*KEY).outcome for _ in range(3)]
    gate.release.set()
    worker.join(10)
    assert answers == [Outcome.ALREADY_PENDING] * 3 and gate.max_active == 1
    assert Compression.objects.get().outcome == "applied"


# -- 4. the hard limit -------------------------------------------------------------------------
def _check_limited(store: SummarizingChatStorage, saved: int, max_pairs: int) -> None:
    prefix = slot().summary_length
    fetched = store.fetch_chat_sync(*KEY)
    assert len(fetched) <= prefix + 2 * max_pairs
    tail = fetched[prefix:]
    assert [m.role for m in tail] == ["user", "assistant"] * (len(tail) // 2) + ["user"] * (
        len(tail) % 2
    )
    assert texts(tail)[-1] == f"a{saved - 1}"  # the newest message is there
    assert Message.objects.count() == 2 * saved  # the raw history is untouched
    assert slot().state == "over_limit"


def test_hard_limit_while_the_summarizer_keeps_failing(settings: Any) -> None:
    settings.SQUAD_MEMORY = {"TRIGGER_AT": 2, "MAX_BUFFER_PAIRS": 3}  # what the admin judges by
    summarizers.FLAKY["fail"] = False
    store = wrap(summarizers.flaky, max_buffer_pairs=3)
    for i in range(3):
        pair(store, i)
    store.fetch_chat_sync(*KEY)  # active, summarized
    summarizers.FLAKY["fail"] = True
    try:
        for i in range(3, 40):
            pair(store, i)
        _check_limited(store, 40, 3)
    finally:
        summarizers.FLAKY["fail"] = False
    pair(store, 40)  # the next applied compression brings the buffer back under the threshold
    assert len(store.fetch_chat_sync(*KEY)) <= 2 * 2 + 1 and slot().state == "active"


def test_hard_limit_in_celery_mode_with_no_worker(redis_queue: Any, settings: Any) -> None:
    settings.SQUAD_MEMORY = {**settings.SQUAD_MEMORY, "MAX_BUFFER_PAIRS": 4}
    store = wrap("tests.celery_summarizers.fold", mode="celery", max_buffer_pairs=4)
    for i in range(3):
        pair(store, i)
    store.fetch_chat_sync(*KEY)  # activates: its compression is queued
    for i in range(3, 30):
        pair(store, i)
    assert len(queued_args(redis_queue)) == 1  # one claim, queued; no worker takes it
    _check_limited(store, 30, 4)

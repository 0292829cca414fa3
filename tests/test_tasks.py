"""Celery mode without a worker process: the task body, dispatch after commit, the sweep.

The task body runs through Celery's own ``Task.apply`` (and ``task_always_eager``
where a test follows a claim from save to compression); publishing is tested
against a real Redis broker and against a port where nothing listens.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest

from tests.conftest import extra

extra("celery", "celery")  # every test here runs the Celery tasks

from celery import Celery
from django.core.management import call_command
from django.utils import timezone

from squad_memory import compression
from squad_memory.compression.celery import backoff
from squad_memory.exceptions import SummarizerNotImportable
from squad_memory.messages import to_messages
from squad_memory.models import Compression, Limits, Slot
from squad_memory.operations import housekeeping
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
from squad_memory.summarizers import resolve
from squad_memory.tasks import summarize_slot
from squad_memory.tasks import sweep as sweep_task
from tests import celery_summarizers as cs
from tests.celery_fixtures import FOLD, REDIS_URL, _use_broker, queued_args
from tests.conftest import buffer_of, msg, require, texts
from tests.processes import wait_for
from tests.proxy import HangingProxy

KEY = ("u1", "s1", "agent")

pytest_plugins = ["tests.celery_fixtures"]


@pytest.fixture(autouse=True)
def _reset_summarizers() -> Iterator[None]:
    cs.CALLS.clear()
    cs.DURING.clear()
    cs.FAILURES_LEFT[0] = 0
    yield
    cs.DURING.clear()


def celery_store(summarizer: str = FOLD) -> SummarizingChatStorage:
    return SummarizingChatStorage(
        DjangoChatStorage(), summarizer, trigger_at=2, keep_last=1, mode="celery"
    )


def save_pairs(start: int, stop: int, store: Any = None) -> None:
    store = store or DjangoChatStorage()
    for i in range(start, stop):
        store.save_chat_messages_sync(*KEY, [msg("user", f"u{i}"), msg("assistant", f"a{i}")])


def pair_texts(start: int, stop: int) -> list[str]:
    return [t for i in range(start, stop) for t in (f"u{i}", f"a{i}")]


def slot() -> Slot:
    return Slot.objects.for_key(*KEY).get()


def claimed_slot(pairs: int) -> tuple[Slot, str]:
    """An active slot holding ``pairs`` pairs, with a compression claimed."""
    save_pairs(0, pairs)
    s, claimed = compression.activate(slot().pk, Limits(2, 1), lease_seconds=600, force=True)
    assert claimed
    return s, claimed.token


def buffer_texts() -> list[str]:
    return texts(to_messages(buffer_of(slot())))


def applied() -> list[Compression]:
    return list(Compression.objects.filter(outcome="applied").order_by("started_at", "id"))


# -- the task body -----------------------------------------------------------------------


@pytest.mark.django_db
def test_task_applies_its_claim_and_releases_it(celery_settings: Any) -> None:
    s, token = claimed_slot(4)
    result = summarize_slot.apply(args=(s.pk, token, FOLD, 1, 2)).get()
    assert result == "applied"
    s = slot()
    assert (s.covered_seq, s.version, s.pending_token, s.pending_since) == (8, 1, "", None)
    assert buffer_texts() == ["S(u0+a0+u1+a1+u2+a2)", "u3", "a3"]
    (row,) = Compression.objects.all()
    assert (row.trigger, row.attempt, row.from_seq, row.to_seq) == ("celery", 1, 1, 8)


@pytest.mark.django_db
def test_task_with_a_replaced_token_changes_nothing(celery_settings: Any) -> None:
    s, token = claimed_slot(4)
    assert summarize_slot.apply(args=(s.pk, "not-" + token, FOLD, 1, 2)).get() == "skipped"
    assert cs.CALLS == [] and Compression.objects.count() == 0
    assert slot().pending_token == token and slot().version == 0


@pytest.mark.django_db
def test_duplicate_delivery_compresses_once(celery_settings: Any) -> None:
    s, token = claimed_slot(4)
    results = [summarize_slot.apply(args=(s.pk, token, FOLD, 1, 2)).get() for _ in range(2)]
    assert results == ["applied", "skipped"]
    assert len(applied()) == 1 and slot().version == 1


@pytest.mark.django_db
def test_messages_saved_during_the_summary_stay_after_it(celery_settings: Any) -> None:
    s, token = claimed_slot(3)
    cs.DURING.append(lambda: save_pairs(3, 4))
    assert summarize_slot.apply(args=(s.pk, token, FOLD, 1, None)).get() == "applied"
    assert buffer_texts() == ["S(u0+a0+u1+a1)", "u2", "a2", "u3", "a3"]
    assert slot().covered_seq == 6 and slot().last_seq == 8


@pytest.mark.django_db
def test_output_is_dropped_when_the_buffer_head_moved(celery_settings: Any) -> None:
    """A worker so slow that its claim expired: the newer claim's compression wins."""
    s, token = claimed_slot(3)

    def newer_claim_wins() -> None:
        past = timezone.now() - timedelta(hours=1)
        Slot.objects.filter(pk=s.pk).update(pending_since=past, lease_until=past)
        save_pairs(3, 4)
        newer = compression.claim(s.pk, Limits(2, 1), lease_seconds=600)
        assert newer is not None
        cs.DURING.append(lambda: None)  # the nested call must not recurse into this hook
        assert compression.run(newer, resolve(FOLD)).applied

    cs.DURING.append(newer_claim_wins)
    assert summarize_slot.apply(args=(s.pk, token, FOLD, 1, None)).get() == "stale"
    outcomes = list(Compression.objects.order_by("id").values_list("outcome", "to_seq"))
    assert outcomes == [("applied", 8), ("stale", 6)]
    assert buffer_texts() == ["S(u0+a0+u1+a1+u2+a2)", "u3", "a3"]


@pytest.mark.django_db
def test_flaky_summarizer_is_retried_and_every_attempt_logged(eager: Celery) -> None:
    s, token = claimed_slot(4)
    cs.FAILURES_LEFT[0] = 2
    summarize_slot.apply_async(args=(s.pk, token, "tests.celery_summarizers.flaky", 1, 2))
    rows = list(Compression.objects.order_by("id").values_list("attempt", "outcome"))
    assert rows == [(1, "failed"), (2, "failed"), (3, "applied")]
    assert slot().state == "active" and not slot().last_failed


@pytest.mark.django_db
def test_after_the_last_retry_the_slot_shows_failed(eager: Celery) -> None:
    s, token = claimed_slot(4)
    summarize_slot.apply_async(args=(s.pk, token, "tests.celery_summarizers.always_fails", 1, 2))
    rows = list(Compression.objects.order_by("id").values_list("attempt", "outcome"))
    assert rows == [(1, "failed"), (2, "failed"), (3, "failed")]
    s = slot()
    assert (s.state, s.pending_token, s.covered_seq, s.summary) == ("failed", "", 0, [])
    assert buffer_texts() == pair_texts(0, 4)


@pytest.mark.django_db
def test_unimportable_summarizer_fails_each_attempt_with_the_reason(eager: Celery) -> None:
    s, token = claimed_slot(4)
    summarize_slot.apply_async(args=(s.pk, token, "tests.celery_summarizers.missing", 1, 2))
    errors = list(Compression.objects.values_list("outcome", "error"))
    assert len(errors) == 3 and all(o == "failed" and "missing" in e for o, e in errors)
    assert slot().state == "failed"


def test_backoff_is_exponential_and_capped(settings: Any) -> None:
    settings.SQUAD_MEMORY = {"RETRY_BACKOFF": 2, "RETRY_BACKOFF_MAX": 60}
    assert [backoff(n) for n in range(1, 8)] == [2, 4, 8, 16, 32, 60, 60]


@pytest.mark.django_db
def test_worker_claims_again_when_saves_kept_the_buffer_over(
    eager: Celery, django_capture_on_commit_callbacks: Any
) -> None:
    s, token = claimed_slot(3)
    cs.DURING.append(lambda: save_pairs(3, 7))
    with django_capture_on_commit_callbacks(execute=True):
        summarize_slot.apply_async(args=(s.pk, token, FOLD, 1, 2))
    assert [(c.from_seq, c.to_seq) for c in applied()] == [(1, 6), (7, 14)]
    assert slot().buffer_length <= 4 and slot().pending_token == ""


# -- dispatch from the storage -----------------------------------------------------------


@pytest.mark.django_db
def test_storage_refuses_a_lambda_in_celery_mode() -> None:
    with pytest.raises(SummarizerNotImportable, match="module level"):
        SummarizingChatStorage(DjangoChatStorage(), lambda h, k: h, mode="celery")


@pytest.mark.django_db
def test_save_and_fetch_only_enqueue_in_celery_mode(
    redis_queue: Any, django_capture_on_commit_callbacks: Any
) -> None:
    store = celery_store("tests.celery_summarizers.forbidden")
    save_pairs(0, 3)  # inactive slot, 6 messages: the first fetch activates it
    with django_capture_on_commit_callbacks(execute=True):
        assert texts(store.fetch_chat_sync(*KEY)) == pair_texts(0, 3)
    token = slot().pending_token
    assert slot().active and token
    with django_capture_on_commit_callbacks(execute=True):
        save_pairs(3, 5, store)  # over the threshold again, but one is pending
        assert texts(store.fetch_chat_sync(*KEY)) == pair_texts(0, 5)
    forbidden = "tests.celery_summarizers.forbidden"
    assert queued_args(redis_queue) == [[slot().pk, token, forbidden, 1, 2]]
    assert cs.CALLS == [] and Compression.objects.count() == 0


@pytest.mark.django_db
def test_queued_task_runs_the_compression(
    redis_queue: Any, django_capture_on_commit_callbacks: Any
) -> None:
    store = celery_store()
    with django_capture_on_commit_callbacks(execute=True):
        save_pairs(0, 3, store)
        store.fetch_chat_sync(*KEY)
    (args,) = queued_args(redis_queue)
    assert cs.CALLS == []
    assert summarize_slot.apply(args=args).get() == "applied"
    assert texts(store.fetch_chat_sync(*KEY)) == ["S(u0+a0+u1+a1)", "u2", "a2"]


@pytest.mark.django_db(transaction=False)
def test_publish_waits_for_the_commit(
    eager: Celery, django_capture_on_commit_callbacks: Any
) -> None:
    store = celery_store()
    save_pairs(0, 3, store)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        store.fetch_chat_sync(*KEY)
    assert len(callbacks) == 1 and Compression.objects.count() == 0
    callbacks[0]()
    assert len(applied()) == 1


@pytest.mark.django_db(transaction=False)
def test_broker_down_the_save_succeeds_fast_and_the_claim_is_released(
    broker_down: Celery, django_capture_on_commit_callbacks: Any, caplog: Any
) -> None:
    store = celery_store("tests.celery_summarizers.forbidden")
    with django_capture_on_commit_callbacks(execute=True):
        save_pairs(0, 3, store)
        store.fetch_chat_sync(*KEY)  # activation: its claim cannot be published
    assert slot().active and slot().pending_token == ""
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        save_pairs(3, 4, store)  # crosses the threshold: claims, then fails to publish
    assert len(callbacks) == 1
    # Fast: the refusal ended the publish, which never waited out PUBLISH_TIMEOUT.
    assert "no answer within" not in caplog.text
    s = slot()
    assert s.active and (s.state, s.pending_token, s.buffer_length) == ("active", "", 8)
    assert texts(store.fetch_chat_sync(*KEY)) == pair_texts(0, 4)
    assert cs.CALLS == [] and Compression.objects.count() == 0
    assert caplog.text.count("Could not enqueue the compression") == 2


# -- the sweep -----------------------------------------------------------------------------


def _over_threshold_slot(agent: str, pairs: int = 4, **fields: Any) -> Slot:
    store = DjangoChatStorage()
    for i in range(pairs):
        store.save_chat_messages_sync(
            "u1", "s1", agent, [msg("user", f"u{i}"), msg("assistant", "x")]
        )
    s = Slot.objects.get(agent_id=agent)
    Slot.objects.filter(pk=s.pk).update(active=True, **fields)
    return s


@pytest.mark.django_db
def test_sweep_enqueues_free_and_abandoned_slots_only(
    eager: Celery, django_capture_on_commit_callbacks: Any
) -> None:
    now = timezone.now()
    free = _over_threshold_slot("free")
    abandoned = _over_threshold_slot(
        "old", pending_since=now - timedelta(hours=1), pending_token="t0"
    )
    busy = _over_threshold_slot("busy", pending_since=now, pending_token="t1")
    short = _over_threshold_slot("short", pairs=2)
    inactive = _over_threshold_slot("inactive")
    Slot.objects.filter(pk=inactive.pk).update(active=False)
    with django_capture_on_commit_callbacks(execute=True):
        report = housekeeping.sweep()
    assert report.as_dict() == {"enqueued": 2, "activated": 0, "waiting": 0, "pruned": 0}
    done = set(Compression.objects.filter(outcome="applied").values_list("slot_id", flat=True))
    assert done == {free.pk, abandoned.pk}
    assert Slot.objects.get(pk=busy.pk).pending_token == "t1"
    assert not Compression.objects.filter(slot_id__in=[short.pk, inactive.pk]).exists()


@pytest.mark.django_db
def test_sweep_can_activate_inactive_slots(
    eager: Celery, django_capture_on_commit_callbacks: Any
) -> None:
    save_pairs(0, 4)
    with django_capture_on_commit_callbacks(execute=True):
        call_command("squad_memory_sweep")
        assert not slot().active
        call_command("squad_memory_sweep", "--activate")
    assert slot().active and len(applied()) == 1
    assert buffer_texts() == ["S(u0+a0+u1+a1+u2+a2)", "u3", "a3"]


@pytest.mark.django_db(transaction=True)  # compresses on commit
def test_sweep_in_inline_mode_compresses_right_away(celery_settings: Any) -> None:
    celery_settings.SQUAD_MEMORY = {**celery_settings.SQUAD_MEMORY, "MODE": "inline"}
    _over_threshold_slot("a")
    assert sweep_task.apply().get() == {"enqueued": 1, "activated": 0, "waiting": 0, "pruned": 0}
    (row,) = Compression.objects.all()
    assert (row.outcome, row.trigger) == ("applied", "sweep")


@pytest.mark.django_db
def test_the_sweep_command_prints_one_summary_line(
    celery_settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    celery_settings.SQUAD_MEMORY = {**celery_settings.SQUAD_MEMORY, "MODE": "inline"}
    _over_threshold_slot("a")
    out = StringIO()
    with caplog.at_level(logging.INFO, logger="squad_memory"):
        call_command("squad_memory_sweep", stdout=out)
    assert out.getvalue().splitlines() == [
        "1 slot(s) over the threshold compressed or enqueued; 0 inactive slot(s) activated; "
        "0 compression(s) still queued after PENDING_TIMEOUT; 0 finished task row(s) deleted."
    ]
    assert not [r for r in caplog.records if "Sweep" in r.getMessage()]  # not twice


# -- a Redis broker that hangs -------------------------------------------------------------


def _publish_threads() -> int:
    return sum(t.name == "squad-memory-publish" and t.is_alive() for t in threading.enumerate())


AMQP_URL = os.environ.get("TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")


@pytest.fixture
def broker(request: Any) -> tuple[str, tuple[str, int], str]:
    """A real broker, Redis or RabbitMQ, to put behind a proxy: (scheme, address, path)."""
    import redis
    from kombu import Connection

    if request.param == "redis":
        client = redis.Redis.from_url(REDIS_URL)
        try:
            client.ping()
        except redis.RedisError as exc:
            require(False, f"needs Redis at {REDIS_URL} ({exc})")
        where = client.connection_pool.connection_kwargs
        return "redis", (where["host"], where["port"]), f"/{where['db']}"
    with Connection(AMQP_URL, connect_timeout=2) as amqp:
        try:
            amqp.ensure_connection(max_retries=1)
        except Exception as exc:
            require(False, f"needs RabbitMQ at {AMQP_URL} ({exc})")
        return "amqp", (amqp.hostname, amqp.port), "//"


@pytest.mark.services
@pytest.mark.django_db(transaction=True)  # the saves publish on commit, from threads of their own
@pytest.mark.any_database  # the broker hangs, not the database
@pytest.mark.parametrize("broker", ["redis", "amqp"], indirect=True)
def test_a_hanging_broker_leaves_no_thread_and_queueing_resumes(
    broker: Any, celery_settings: Any, caplog: Any
) -> None:
    """The hang starts before the process ever reached the broker: every publish gives up
    after PUBLISH_TIMEOUT (the save returns, the claim released), its thread ends by itself
    soon after, and once the broker answers again the next saves are queued."""
    scheme, target, tail = broker
    proxy = HangingProxy(target)
    queue = f"squad-memory-hang-tests-{os.getpid()}"  # concurrent runs keep apart
    celery_settings.SQUAD_MEMORY = {
        **celery_settings.SQUAD_MEMORY,
        "PUBLISH_TIMEOUT": 0.25,
        "CELERY_QUEUE": queue,
    }
    store = celery_store("tests.celery_summarizers.forbidden")
    auth = "guest:guest@" if scheme == "amqp" else ""
    try:
        for app in _use_broker(f"{scheme}://{auth}127.0.0.1:{proxy.port}{tail}"):
            save_pairs(0, 3, store)
            store.fetch_chat_sync(*KEY)  # activates: the first publish, into the hang
            save_pairs(3, 23, store)  # each save crosses the threshold and publishes
            assert caplog.text.count("Could not enqueue the compression") == 21
            # Every save returned although the broker never answered: each publish gave up.
            assert not slot().pending_token and proxy.accepted["held"] >= 1
            for thread in threading.enumerate():  # each ends once its socket times out
                if thread.name == "squad-memory-publish":
                    thread.join(120)  # a bound for a broken build, not a timing
            assert _publish_threads() == 0, "publish threads are still blocked on the broker"

            proxy.recover()
            # The hang is over: a publish now waits for the broker's answer, however busy
            # the machine, so that each save below is queued for certain.
            celery_settings.SQUAD_MEMORY = {**celery_settings.SQUAD_MEMORY, "PUBLISH_TIMEOUT": 60}
            for i in range(23, 26):
                save_pairs(i, i + 1, store)
                assert slot().pending_token, f"save {i} after the recovery was not queued"
                Slot.objects.filter(pk=slot().pk).update(pending_token="", pending_since=None)
            assert cs.CALLS == [] and proxy.accepted["forwarded"] >= 1
            with app.connection_for_write() as connection:
                waiting = connection.SimpleQueue(queue)
                # AMQP publishes land asynchronously: wait until the three are there.
                wait_for(lambda q=waiting: q.qsize() >= 3, 120, "the three tasks in the queue")
                try:
                    assert waiting.qsize() == 3
                finally:
                    waiting.clear()
                    waiting.queue.delete()
    finally:
        proxy.close()

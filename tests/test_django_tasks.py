"""Tasks mode in one process: the immediate backend (the save compresses), django-tasks-db's
backend with its own worker (``db_worker --batch``) run here, retries with backoff, the
sweep, a backend that hangs or fails, and the system checks. Real worker processes:
tests/test_django_tasks_worker.py."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from tests import tasks_support
from tests.conftest import extra

extra("django_tasks_db", "tasks")

from django.core.management import call_command
from django.utils import timezone
from django_tasks_db.models import DBTaskResult

from squad_memory.checks import check_settings
from squad_memory.compression import dispatcher_class
from squad_memory.compression.django_tasks import TasksDispatcher
from squad_memory.models import Compression, Outcome, Slot
from squad_memory.operations import housekeeping
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
from tests import celery_summarizers as cs
from tests.celery_fixtures import FOLD
from tests.conftest import buffer_of, msg, texts
from tests.tasks_support import DATABASE, IMMEDIATE

KEY = ("u1", "s1", "agent")
# Transactional: the saves enqueue on commit (transaction.on_commit), and the worker reads
# the committed task rows.
pytestmark = pytest.mark.django_db(transaction=True)
pytest_plugins = ["tests.api_fixtures"]


@pytest.fixture(autouse=True)
def tasks_settings(settings: Any) -> Iterator[Any]:
    settings.SQUAD_MEMORY = {
        "SUMMARIZER": FOLD,
        "TRIGGER_AT": 2,
        "KEEP_LAST": 1,
        "MODE": "tasks",
        "RETRIES": 2,
        "RETRY_BACKOFF": 0,
    }
    settings.TASKS = DATABASE
    cs.CALLS.clear()
    cs.FAILURES_LEFT[0] = 0
    yield settings
    tasks_support.RELEASE.set()


def store(summarizer: str = FOLD) -> SummarizingChatStorage:
    return SummarizingChatStorage(DjangoChatStorage(), summarizer, 2, 1, mode="tasks")


def save_pairs(start: int, stop: int, into: Any = None) -> None:
    into = into or DjangoChatStorage()
    for i in range(start, stop):
        into.save_chat_messages_sync(*KEY, [msg("user", f"u{i}"), msg("assistant", f"a{i}")])


def slot() -> Slot:
    return Slot.objects.for_key(*KEY).get()


def buffer_texts() -> list[str]:
    from squad_memory.messages import to_messages

    return texts(to_messages(buffer_of(slot())))


def work() -> None:
    """django-tasks-db's worker, here: runs every task that is ready, then returns."""
    call_command("db_worker", batch=True, reload=False, startup_delay=False, verbosity=0)


def attempts() -> list[tuple[int, str]]:
    return list(Compression.objects.order_by("id").values_list("attempt", "outcome"))


# -- MODE and the checks ---------------------------------------------------------------------


def test_mode_tasks_is_the_tasks_dispatcher_and_passes_the_checks() -> None:
    assert dispatcher_class("tasks") is TasksDispatcher
    assert [m.id for m in check_settings()] == []


@pytest.mark.parametrize(
    "tasks,setting",
    [
        ({"other": DATABASE["default"]}, {}),  # no "TASKS_BACKEND" alias
        ({"default": {**DATABASE["default"], "QUEUES": ["default"]}}, {"TASKS_QUEUE": "memory"}),
        (DATABASE, {"TASKS_PRIORITY": 1000}),
    ],
)
def test_a_backend_queue_or_priority_the_tasks_framework_refuses_is_reported(
    tasks_settings: Any, tasks: dict[str, Any], setting: dict[str, Any]
) -> None:
    tasks_settings.SQUAD_MEMORY = {**tasks_settings.SQUAD_MEMORY, **setting}
    tasks_settings.TASKS = tasks
    (message,) = check_settings()
    assert message.id == "squad_memory.E006" and "TASKS_BACKEND" in message.msg


# -- the immediate backend: the save compresses ---------------------------------------------


def test_with_the_immediate_backend_the_save_compresses(tasks_settings: Any) -> None:
    tasks_settings.TASKS = IMMEDIATE
    memory = store()
    save_pairs(0, 3, memory)
    assert texts(memory.fetch_chat_sync(*KEY)) == ["S(u0+a0+u1+a1)", "u2", "a2"]
    save_pairs(3, 5, memory)  # over the threshold again, twice: compressed in each save
    assert buffer_texts() == ["S(S(S(u0+a0+u1+a1)+u2+a2)+u3+a3)", "u4", "a4"]
    assert list(Compression.objects.values_list("trigger", "outcome")) == [("tasks", "applied")] * 3
    assert memory.compress_now(*KEY).outcome == Outcome.APPLIED  # what the API and admin show
    assert slot().pending_token == "" and not DBTaskResult.objects.exists()


@pytest.mark.parametrize(
    "tasks,status,outcome", [(DATABASE, 202, "queued"), (IMMEDIATE, 200, "applied")]
)
def test_the_api_answers_what_the_compression_turned_into(
    tasks_settings: Any, users: Any, tasks: dict[str, Any], status: int, outcome: str
) -> None:
    from tests.api_support import client_for, fill

    tasks_settings.TASKS = tasks
    slot = fill(users.owner, 6)
    response = client_for(users.owner).post(f"/api/slots/{slot.pk}/compress/")
    assert (response.status_code, response.json()["outcome"]) == (status, outcome)
    again = client_for(users.owner).post(f"/api/slots/{slot.pk}/compress/")
    assert again.json()["outcome"] == ("already_pending" if outcome == "queued" else "applied")


# -- django-tasks-db: the save enqueues, the worker compresses -----------------------------------


def test_the_save_only_enqueues_and_the_worker_compresses() -> None:
    memory = store()
    save_pairs(0, 3, memory)
    assert texts(memory.fetch_chat_sync(*KEY)) == ["u0", "a0", "u1", "a1", "u2", "a2"]
    (row,) = DBTaskResult.objects.all()  # enqueued; nothing summarized in the save
    token = slot().pending_token
    assert token and row.status == "READY" and cs.CALLS == [] and not Compression.objects.exists()
    assert row.task_path == "squad_memory.compression.django_tasks.summarize_slot"
    assert row.args_kwargs["args"] == [slot().pk, token, FOLD, 1, 2, 1]
    assert (row.queue_name, row.priority) == ("default", 0)
    assert memory.compress_now(*KEY).outcome == Outcome.ALREADY_PENDING
    work()
    assert buffer_texts() == ["S(u0+a0+u1+a1)", "u2", "a2"]
    assert attempts() == [(1, "applied")] and slot().pending_token == ""
    assert Compression.objects.get().trigger == "tasks"
    assert DBTaskResult.objects.get().status == "SUCCESSFUL"


def test_queue_and_priority_come_from_the_settings(tasks_settings: Any) -> None:
    tasks_settings.SQUAD_MEMORY = {
        **tasks_settings.SQUAD_MEMORY,
        "TASKS_QUEUE": "memory",
        "TASKS_PRIORITY": 10,
    }
    assert store().compress_now(*KEY).outcome == Outcome.SKIPPED  # no slot yet
    save_pairs(0, 3)
    assert store().compress_now(*KEY).outcome == Outcome.QUEUED
    row = DBTaskResult.objects.get()
    assert (row.queue_name, row.priority, row.backend_name) == ("memory", 10, "default")


def test_saves_during_the_compression_are_compressed_by_a_follow_up_task() -> None:
    memory = store()
    save_pairs(0, 3, memory)
    memory.fetch_chat_sync(*KEY)
    cs.DURING.append(lambda: save_pairs(3, 7))
    work()  # the first task, then the follow-up it enqueued
    done = Compression.objects.filter(outcome="applied").order_by("id")
    assert [(c.from_seq, c.to_seq) for c in done] == [(1, 6), (7, 14)]
    assert slot().pending_token == "" and DBTaskResult.objects.count() == 2


def test_right_after_each_task_buffer_tokens_is_the_summary_and_the_rows_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker's compressions keep ``buffer_tokens`` as its help text says (the summary
    plus the messages after it), the first one with a save landing while it summarized."""
    from django.db.models import Sum

    from squad_memory.compression import runner
    from squad_memory.models import Message
    from squad_memory.rules import count_all

    totals: list[tuple[int, int, int]] = []
    settle = runner.settle

    def settled(*args: Any) -> Any:
        result = settle(*args)
        s = slot()
        after = Message.objects.filter(slot=s, seq__gt=s.covered_seq)
        stored = after.aggregate(total=Sum("tokens"))["total"] or 0
        assert s.summary_tokens == count_all(s.summary)
        totals.append((s.buffer_tokens, s.summary_tokens, stored))
        return result

    monkeypatch.setattr(runner, "settle", settled)
    memory = store()
    save_pairs(0, 3, memory)
    memory.fetch_chat_sync(*KEY)
    cs.DURING.append(lambda: save_pairs(3, 5))
    work()  # the first task (two pairs saved meanwhile), then the follow-up it enqueued
    assert attempts() == [(1, "applied"), (1, "applied")]
    assert len(totals) == 2 and totals[0][2] > 0  # the pairs saved meanwhile, after the summary
    assert [buffer for buffer, _, _ in totals] == [summary + rows for _, summary, rows in totals]


# -- retries with backoff -------------------------------------------------------------------------


def test_a_failed_attempt_enqueues_its_retry_with_backoff_keeping_the_claim(
    tasks_settings: Any,
) -> None:
    tasks_settings.SQUAD_MEMORY = {**tasks_settings.SQUAD_MEMORY, "RETRY_BACKOFF": 30}
    memory = store("tests.celery_summarizers.flaky")
    cs.FAILURES_LEFT[0] = 2
    save_pairs(0, 3, memory)
    memory.fetch_chat_sync(*KEY)
    token = slot().pending_token
    for attempt, delay in ((1, 30), (2, 60)):
        work()
        assert attempts()[-1] == (attempt, "failed")
        retry = DBTaskResult.objects.get(status="READY")
        assert retry.args_kwargs["args"][-1] == attempt + 1
        assert abs((retry.run_after - timezone.now()).total_seconds() - delay) < 5
        assert slot().pending_token == token and slot().lease_until > retry.run_after
        work()  # not due yet: nothing runs
        assert len(attempts()) == attempt
        DBTaskResult.objects.filter(pk=retry.pk).update(run_after=timezone.now())
    work()
    assert attempts() == [(1, "failed"), (2, "failed"), (3, "applied")]
    assert slot().pending_token == "" and not slot().last_failed


def test_after_the_last_retry_the_slot_shows_failed() -> None:
    memory = store("tests.celery_summarizers.always_fails")
    save_pairs(0, 3, memory)
    memory.fetch_chat_sync(*KEY)
    work()
    assert attempts() == [(1, "failed"), (2, "failed"), (3, "failed")]
    s = slot()
    assert (s.state, s.pending_token, s.covered_seq) == ("failed", "", 0)


def test_with_the_immediate_backend_a_failure_is_final(tasks_settings: Any) -> None:
    tasks_settings.TASKS = IMMEDIATE
    memory = store("tests.celery_summarizers.always_fails")
    save_pairs(0, 3, memory)
    memory.fetch_chat_sync(*KEY)
    assert attempts() == [(1, "failed")] and slot().state == "failed"


# -- the sweep ------------------------------------------------------------------------------------


def test_the_sweep_enqueues_a_claim_whose_lease_ran_out() -> None:
    """A worker killed mid-task: its task stays RUNNING in django-tasks-db, its claim's
    lease runs out, and the sweep enqueues the compression again."""
    save_pairs(0, 3, store())
    store().fetch_chat_sync(*KEY)
    DBTaskResult.objects.update(status="RUNNING")  # taken by a worker that then died
    assert housekeeping.sweep().enqueued == 0  # its claim still holds
    past = timezone.now() - timedelta(seconds=1)
    Slot.objects.filter(pk=slot().pk).update(lease_until=past)
    assert housekeeping.sweep().enqueued == 1
    work()
    assert attempts() == [(1, "applied")] and slot().pending_token == ""


def test_the_sweep_leaves_compressions_still_queued_and_keeps_their_claims(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A backlog older than PENDING_TIMEOUT: nothing is enqueued twice, the claims hold."""
    keys = [("u1", f"s{i}", "agent") for i in range(3)]
    for key in keys:
        memory = store()
        for i in range(3):
            memory.save_chat_messages_sync(*key, [msg("user", f"u{i}"), msg("assistant", f"a{i}")])
        memory.fetch_chat_sync(*key)
    tokens = set(Slot.objects.values_list("pending_token", flat=True))
    assert DBTaskResult.objects.filter(status="READY").count() == 3 and "" not in tokens
    Slot.objects.update(lease_until=timezone.now() - timedelta(seconds=1))  # no worker came
    with caplog.at_level(logging.INFO, logger="squad_memory"):
        report = housekeeping.sweep()
    assert (report.enqueued, report.waiting) == (0, 3)
    (line,) = [r for r in caplog.records if r.getMessage().startswith("Sweep")]
    assert line.levelno == logging.WARNING and "3 still queued" in line.getMessage()
    assert DBTaskResult.objects.count() == 3  # the backlog did not double
    assert set(Slot.objects.values_list("pending_token", flat=True)) == tokens
    assert all(s.lease_until > timezone.now() + timedelta(seconds=500) for s in Slot.objects.all())
    work()
    assert attempts() == [(1, "applied")] * 3 and not Slot.objects.exclude(pending_token="")


def test_the_sweep_deletes_finished_task_rows_of_compressions(tasks_settings: Any) -> None:
    tasks_settings.SQUAD_MEMORY = {**tasks_settings.SQUAD_MEMORY, "TASKS_RESULTS_TTL": 3600}
    memory = store()
    save_pairs(0, 3, memory)
    memory.fetch_chat_sync(*KEY)
    work()
    old = DBTaskResult.objects.get()
    other = DBTaskResult.objects.get()  # a finished task of another app, as old
    other.id, other.task_path = uuid.uuid4(), "elsewhere.tasks.send_mail"
    other.save(force_insert=True)
    DBTaskResult.objects.update(finished_at=timezone.now() - timedelta(hours=2))
    save_pairs(3, 5, memory)  # a newer one, finished now, and one still queued
    work()
    save_pairs(5, 7, memory)
    assert DBTaskResult.objects.filter(status="READY").count() == 1
    assert housekeeping.sweep().pruned == 1
    assert not DBTaskResult.objects.filter(pk=old.pk).exists()
    left = DBTaskResult.objects.values_list("task_path", "status")
    ours = "squad_memory.compression.django_tasks.summarize_slot"
    assert sorted(left) == sorted(
        [("elsewhere.tasks.send_mail", "SUCCESSFUL"), (ours, "SUCCESSFUL"), (ours, "READY")]
    )
    tasks_settings.SQUAD_MEMORY = {**tasks_settings.SQUAD_MEMORY, "TASKS_RESULTS_TTL": None}
    DBTaskResult.objects.update(finished_at=timezone.now() - timedelta(days=400))
    assert housekeeping.sweep().pruned == 0  # None keeps them


# -- a backend that hangs or fails --------------------------------------------------------------


@pytest.mark.parametrize(
    "backend,why",
    [
        ({"BACKEND": "tests.tasks_support.HangingBackend"}, "TimeoutError: no answer within"),
        ({"BACKEND": "tests.tasks_support.FailingBackend"}, "ConnectionRefusedError: the queue"),
        # refuses the task, on this thread
        ({**DATABASE["default"], "QUEUES": ["elsewhere"]}, "Queue 'default' is not valid"),
    ],
    ids=["hangs", "fails", "database-refuses"],
)
def test_a_backend_that_hangs_or_fails_never_holds_or_fails_the_save(
    tasks_settings: Any, backend: dict[str, Any], why: str, caplog: Any
) -> None:
    tasks_settings.SQUAD_MEMORY = {**tasks_settings.SQUAD_MEMORY, "PUBLISH_TIMEOUT": 0.5}
    tasks_settings.TASKS = {"default": backend}
    tasks_support.RELEASE.clear()
    memory = store("tests.celery_summarizers.forbidden")
    save_pairs(0, 3, memory)
    assert texts(memory.fetch_chat_sync(*KEY))[-1] == "a2"  # activation: not enqueued
    save_pairs(3, 4, memory)  # crosses the threshold: claims, then cannot enqueue
    result = memory.compress_now(*KEY)
    # Each call returned: the hanging backend was given up after PUBLISH_TIMEOUT (the
    # TimeoutError of the detail), the failing ones at once.
    assert result.outcome == Outcome.NOT_QUEUED and why in result.detail
    s = slot()
    assert (s.active, s.pending_token, s.last_seq) == (True, "", 8)
    assert caplog.text.count("Could not enqueue the compression") == 3
    assert cs.CALLS == [] and not Compression.objects.exists()
    assert not DBTaskResult.objects.exists()


def test_a_slot_deleted_while_it_compresses_queues_no_retry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    memory = store()
    save_pairs(0, 3, memory)
    memory.fetch_chat_sync(*KEY)
    cs.DURING.append(lambda: Slot.objects.all().delete())
    with caplog.at_level(logging.INFO, logger="squad_memory"):
        work()
    (row,) = DBTaskResult.objects.all()  # no retry enqueued
    assert row.status == "SUCCESSFUL" and row.return_value == "skipped"
    assert "cancelled: the slot was deleted" in caplog.text and "failed" not in caplog.text
    assert not Compression.objects.exists()

"""Forgetting a user's conversations, and retention by RETAIN_DAYS (fixed clock)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command
from django.utils import timezone

from squad_memory.exceptions import ConfigurationError
from squad_memory.models import Compression, IdempotencyKey, Message, Slot
from squad_memory.operations import housekeeping
from squad_memory.operations.forgetting import forget, purge, purge_idle

pytestmark = pytest.mark.django_db

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
SECRET = "my card number is 4111"


def make(user: str, session: str, agent: str, count: int = 4, namespace: str = "") -> Slot:
    """A slot with ``count`` alternating messages and one compression log row."""
    batch = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": [{"text": f"{SECRET} {i}"}]}
        for i in range(count)
    ]
    slot = Slot.objects.append((user, session, agent), batch, namespace=namespace).slot
    Compression.objects.create(
        slot=slot,
        started_at=timezone.now(),
        finished_at=timezone.now(),
        duration_ms=1,
        from_seq=1,
        to_seq=1,
        summarizer="x",
        outcome=Compression.Outcome.APPLIED,
    )
    return slot


@pytest.fixture
def neighbours() -> list[Slot]:
    """Other users' slots sharing U's session and agent ids, in this and another namespace."""
    return [
        make("V", "s1", "a1", 3),
        make("V", "s2", "a2", 3),
        make("U2", "s1", "a1", 3),
        make("V", "s1", "a1", 3, namespace="wrapped"),
    ]


def keys(slots: Any) -> set[tuple[str, str, str, str]]:
    return {(s.namespace, s.user_id, s.session_id, s.agent_id) for s in slots}


def survivors_intact(neighbours: list[Slot]) -> None:
    assert keys(Slot.objects.filter(pk__in=[s.pk for s in neighbours])) == keys(neighbours)
    for slot in neighbours:
        assert Message.objects.filter(slot=slot).count() == 3
        assert Compression.objects.filter(slot=slot).count() == 1


def test_forget_user_deletes_every_slot_of_the_user_only(neighbours: list[Slot]) -> None:
    mine = [make("U", "s1", "a1", 10), make("U", "s2", "a2"), make("U", "s1", "a1", namespace="w")]
    report = forget("U", batch_size=3)
    assert (report.slots, report.messages, report.compressions) == (3, 18, 3)
    assert not Slot.objects.filter(pk__in=[s.pk for s in mine]).exists()
    assert not Message.objects.filter(slot_id__in=[s.pk for s in mine]).exists()
    survivors_intact(neighbours)


def test_forget_session_or_agent_narrows_the_scope(neighbours: list[Slot]) -> None:
    make("U", "s1", "a1")
    make("U", "s1", "a2")
    make("U", "s2", "a1")
    assert forget("U", session_id="s1").slots == 2
    assert keys(Slot.objects.filter(user_id="U")) == {("", "U", "s2", "a1")}
    make("U", "s3", "a1")
    make("U", "s3", "a3")
    assert forget("U", agent_id="a1").slots == 2
    assert keys(Slot.objects.filter(user_id="U")) == {("", "U", "s3", "a3")}
    survivors_intact(neighbours)


def test_dry_run_counts_and_deletes_nothing(neighbours: list[Slot]) -> None:
    make("U", "s1", "a1", 6)
    report = forget("U", dry_run=True)
    assert (report.slots, report.messages, report.compressions) == (1, 6, 1)
    assert Message.objects.filter(slot__user_id="U").count() == 6
    survivors_intact(neighbours)


def test_messages_go_in_batches(count_queries: Any) -> None:
    make("U", "s1", "a1", 10)
    with count_queries() as counted:
        forget("U", batch_size=3)
    table = Message._meta.db_table
    deletes = [q for q in counted.statements if q.startswith("DELETE") and table in q.split()[2]]
    assert len(deletes) >= 4  # 10 messages by 3, then the final pass under the slot lock
    assert not Message.objects.exists()


def test_forgetting_is_logged_without_content(caplog: pytest.LogCaptureFixture) -> None:
    make("U", "s1", "a1", 4)
    with caplog.at_level(logging.INFO, logger="squad_memory"):
        forget("U", session_id="s1", actor="operator alice")
    line = next(r.getMessage() for r in caplog.records if "Forgot" in r.getMessage())
    assert "operator alice" in line and "'U'" in line and "'s1'" in line
    assert f"{Message._meta.db_table}: 4" in line
    assert SECRET not in caplog.text


def test_forget_command_prints_progress_and_counts(neighbours: list[Slot]) -> None:
    make("U", "s1", "a1", 5)
    make("U", "s1", "a2", 5)
    out, err = StringIO(), StringIO()
    call_command("squad_memory_forget", "--user", "U", "--session", "s1", stdout=out, stderr=err)
    assert "2 slot(s), 10 message(s) deleted" in err.getvalue()
    assert f"{Message._meta.db_table}: 10" in out.getvalue()
    assert f"{Slot._meta.db_table}: 2" in out.getvalue()
    assert not Slot.objects.filter(user_id="U").exists()
    survivors_intact(neighbours)


def test_forget_command_dry_run() -> None:
    make("U", "s1", "a1", 5)
    out = StringIO()
    call_command("squad_memory_forget", "--user", "U", "--dry-run", stdout=out, stderr=StringIO())
    assert "Would delete" in out.getvalue() and f"{Message._meta.db_table}: 5" in out.getvalue()
    assert Message.objects.count() == 5


def test_report_counts_every_table_of_the_app() -> None:
    make("U", "s1", "a1")
    report = forget("U")
    assert set(report.tables()) == {
        m._meta.db_table for m in apps.get_app_config("squad_memory").get_models()
    }
    assert report.as_dict() == {"slots": 1, "messages": 4, "compressions": 1, "idempotency_keys": 0}


def age(slot: Slot, days: float) -> None:
    Slot.objects.filter(pk=slot.pk).update(updated_at=NOW - timedelta(days=days))


def test_purge_idle_with_a_fixed_clock() -> None:
    old, edge, fresh = make("U", "s1", "a1"), make("V", "s1", "a1"), make("W", "s1", "a1")
    age(old, 31)
    age(edge, 29.9)
    age(fresh, 1)
    assert purge_idle(30, now=NOW, dry_run=True).slots == 1
    report = purge_idle(30, now=NOW)
    assert (report.slots, report.messages) == (1, 4)
    assert set(Slot.objects.values_list("pk", flat=True)) == {edge.pk, fresh.pk}
    assert purge_idle(29, now=NOW).slots == 1  # the clock, not the wall time, decides
    assert list(Slot.objects.values_list("pk", flat=True)) == [fresh.pk]


def test_purge_follows_retain_days(settings: Any) -> None:
    slot = make("U", "s1", "a1")
    age(slot, 10)
    assert purge(NOW) is None  # default: keep forever
    settings.SQUAD_MEMORY = {"RETAIN_DAYS": 11}
    assert purge(NOW).slots == 0  # type: ignore[union-attr]
    settings.SQUAD_MEMORY = {"RETAIN_DAYS": 9}
    assert purge(NOW).slots == 1  # type: ignore[union-attr]
    assert not Slot.objects.exists()


def test_sweep_applies_retention(settings: Any) -> None:
    old, recent = make("U", "s1", "a1"), make("V", "s1", "a1")
    Slot.objects.filter(pk=old.pk).update(updated_at=timezone.now() - timedelta(days=8))
    housekeeping.sweep()
    assert Slot.objects.count() == 2  # RETAIN_DAYS unset
    settings.SQUAD_MEMORY = {"RETAIN_DAYS": 7}
    housekeeping.sweep()
    assert list(Slot.objects.values_list("pk", flat=True)) == [recent.pk]


def test_purge_command(settings: Any) -> None:
    slot = make("U", "s1", "a1")
    Slot.objects.filter(pk=slot.pk).update(updated_at=timezone.now() - timedelta(days=3))
    out = StringIO()
    call_command("squad_memory_purge", stdout=out)
    assert "RETAIN_DAYS is not set" in out.getvalue() and Slot.objects.exists()
    settings.SQUAD_MEMORY = {"RETAIN_DAYS": 2}
    call_command("squad_memory_purge", "--dry-run", stdout=out, stderr=StringIO())
    assert Slot.objects.exists()
    call_command("squad_memory_purge", stdout=out, stderr=StringIO())
    assert f"{Message._meta.db_table}: 4" in out.getvalue() and not Slot.objects.exists()


@pytest.mark.parametrize(
    ("days", "ok"),
    [
        (None, True),
        (30, True),
        (0.5, True),
        (36525, True),
        (0, False),
        (-1, False),
        ("30", False),
        (True, False),
        (1e6, False),  # further back than year 1: purge and the sweep would overflow
        (float("inf"), False),
        (float("nan"), False),
    ],
)
def test_retain_days_is_checked(settings: Any, days: Any, ok: bool) -> None:
    from squad_memory.checks import check_settings

    settings.SQUAD_MEMORY = {"RETAIN_DAYS": days}
    assert [e.id for e in check_settings()] == ([] if ok else ["squad_memory.E030"])


@pytest.mark.parametrize("days", [1e6, float("inf"), float("nan"), 0, -1, "30"])
def test_purge_and_the_sweep_refuse_a_retain_days_out_of_range(settings: Any, days: Any) -> None:
    """No OverflowError (and no deleting everything for 0 or less): a clear error, after the
    sweep has purged the expired idempotency keys all the same."""
    slot = make("U", "s1", "a1")
    age(slot, 10_000)
    IdempotencyKey.objects.create(
        user="1",
        key="old",
        request_hash="h",
        status=201,
        body={},
        created_at=timezone.now() - timedelta(days=2),
    )
    settings.SQUAD_MEMORY = {"RETAIN_DAYS": days}
    with pytest.raises(ConfigurationError, match=r"RETAIN_DAYS.*at most 36525"):
        purge(NOW)
    with pytest.raises(ConfigurationError, match="RETAIN_DAYS"):
        housekeeping.sweep()
    assert not IdempotencyKey.objects.exists()  # the sweep purged the expired key first
    for command in ("squad_memory_purge", "squad_memory_sweep"):
        with pytest.raises(CommandError, match="RETAIN_DAYS"):
            call_command(command, stdout=StringIO(), stderr=StringIO())
    assert Slot.objects.filter(pk=slot.pk).exists()

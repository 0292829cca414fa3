"""Several OS processes write to one slot at once on PostgreSQL."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from squad_memory.compression import log
from squad_memory.models import Compression, Message, Slot
from tests.conftest import buffer_of

# Transactional: the writers are other processes, which see committed rows only.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True), pytest.mark.prepared]

ROOT = Path(__file__).resolve().parent.parent


def database_url() -> str:
    s = connection.settings_dict
    return f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def text(message: dict) -> str:  # type: ignore[type-arg]
    return str(message["content"][0]["text"])


def run_writers(writers: dict[str, str], count: int, **env: str) -> dict[str, str]:
    """Run ``tests.writer_process`` NAME MODE COUNT for each writer at once; their outputs."""
    env = {**os.environ, "DATABASE_URL": database_url(), **env}
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "tests.writer_process", name, mode, str(count)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name, mode in writers.items()
    }
    outs = {name: p.communicate(timeout=240)[0] for name, p in procs.items()}
    assert [p.returncode for p in procs.values()] == [0] * len(procs), outs
    return outs


def test_concurrent_writers_lose_nothing_and_keep_order() -> None:
    writers = {
        "b1": "batch",
        "b2": "batch",
        "s1": "single",
        "s2": "single",
        "s3": "single",
        "ab": "async-batch",  # the async API, one event loop per process
        "as": "async-single",
    }
    count = 80  # 7 writers: 560 messages, within the fold summary's MAX_SUMMARY_CHARS
    run_writers(writers, count, TRIGGER_AT="5")

    slot = Slot.objects.get(agent_id="shared")
    rows = list(Message.objects.filter(slot=slot).order_by("seq").values("seq", "role", "content"))
    raw = [text(r) for r in rows]
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1)) and slot.last_seq == len(rows)
    assert len(raw) == len(set(raw)), "a message was stored twice"
    for name, mode in writers.items():
        mine = [int(t.split(":")[1]) for t in raw if t.startswith(f"{name}:")]
        assert mine == sorted(mine), f"{name}'s messages are out of order"
        if mode in ("batch", "async-batch"):
            assert mine == list(range(count)), f"{name} lost batch messages"
    for prev, row in itertools.pairwise(rows):
        if writers[text(row).split(":")[0]] in ("single", "async-single"):  # the role rule
            assert prev["role"] != row["role"], f"{text(row)} repeats the role of {text(prev)}"

    # The compression log chains: each applied compression summarized the previous
    # output plus exactly the raw messages after the range it covered.
    applied = list(Compression.objects.filter(slot=slot, outcome="applied").order_by("id"))
    assert len(applied) >= 5
    previous_output: list[str] = []
    covered = applied[0].from_seq - 1
    for comp in applied:
        assert [text(m) for m in log.input_of(comp)] == previous_output + raw[covered : comp.to_seq]
        previous_output, covered = [text(m) for m in log.output_of(comp) or []], comp.to_seq
    assert [text(m) for m in buffer_of(slot)] == previous_output + raw[covered:]
    spans = sorted((c.started_at, c.finished_at) for c in applied)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))


def test_each_save_returns_the_stored_history_up_to_its_own_messages() -> None:
    """Six processes save pairs to one slot: every conversation a save returned is exactly the
    stored history up to and including that save's messages, whatever the others wrote while
    it waited for the slot's lock (on PostgreSQL the save is one statement, whose snapshot
    predates that wait)."""
    writers = {f"w{i}": "returns" for i in range(5)} | {"aw": "async-returns"}
    count = 60
    outs = run_writers(writers, count)

    slot = Slot.objects.get(agent_id="returns")
    raw = [text(r) for r in Message.objects.filter(slot=slot).order_by("seq").values("content")]
    assert len(raw) == len(set(raw)) == count * len(writers)
    wrong = []
    for name, out in outs.items():
        answers = [json.loads(line) for line in out.splitlines()]
        assert len(answers) == count // 2
        for i, answer in enumerate(answers):
            own = raw.index(f"{name}:{2 * i + 1}")
            if answer != raw[: own + 1]:
                wrong.append((name, i, answer[-6:], raw[max(0, own - 5) : own + 1]))
    assert wrong == [], f"{len(wrong)} of {count // 2 * len(writers)} answers are not the history"

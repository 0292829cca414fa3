"""Several OS processes write to one slot at once on PostgreSQL."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from squad_memory import buffer
from squad_memory.compression import log
from squad_memory.models import Compression, Message, Slot

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parent.parent


def database_url() -> str:
    s = connection.settings_dict
    return f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def text(message: dict) -> str:  # type: ignore[type-arg]
    return str(message["content"][0]["text"])


def test_concurrent_writers_lose_nothing_and_keep_order() -> None:
    writers = {"b1": "batch", "b2": "batch", "s1": "single", "s2": "single", "s3": "single"}
    count = 120
    env = {**os.environ, "DATABASE_URL": database_url(), "TRIGGER_AT": "5"}
    procs = [
        subprocess.Popen([sys.executable, "-m", "tests.writer_process", name, mode, str(count)], cwd=ROOT, env=env)
        for name, mode in writers.items()
    ]
    assert [p.wait(timeout=240) for p in procs] == [0] * len(procs)

    slot = Slot.objects.get(agent_id="shared")
    rows = list(Message.objects.filter(slot=slot).order_by("seq").values("seq", "role", "content"))
    raw = [text(r) for r in rows]
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1)) and slot.last_seq == len(rows)
    assert len(raw) == len(set(raw)), "a message was stored twice"
    for name, mode in writers.items():
        mine = [int(t.split(":")[1]) for t in raw if t.startswith(f"{name}:")]
        assert mine == sorted(mine), f"{name}'s messages are out of order"
        if mode == "batch":
            assert mine == list(range(count)), f"{name} lost batch messages"
    for prev, row in itertools.pairwise(rows):
        if text(row).startswith("s"):  # single saves obey the role rule
            assert prev["role"] != row["role"], f"{text(row)} repeats the role of {text(prev)}"

    # The compression log chains: each applied compression summarized the previous
    # output plus exactly the raw messages after the range it covered.
    applied = list(Compression.objects.filter(slot=slot, outcome="applied").order_by("id"))
    assert len(applied) >= 5
    previous_output: list[str] = []
    covered = applied[0].from_seq - 1
    for comp in applied:
        assert [text(m) for m in log.input_of(comp)] == previous_output + raw[covered:comp.to_seq]
        previous_output, covered = [text(m) for m in log.output_of(comp) or []], comp.to_seq
    assert [text(m) for m in buffer.read(slot)] == previous_output + raw[covered:]
    spans = sorted((c.started_at, c.finished_at) for c in applied)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))

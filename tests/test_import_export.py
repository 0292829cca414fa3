"""squad_memory_import and squad_memory_export."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from squad_memory.models import Message, Slot
from squad_memory.storage import DjangoChatStorage, get_storage
from tests.conftest import msg, texts

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.django_db


def line(user: str, session: str, agent: str, role: str, content: Any, **extra: Any) -> str:
    data = {
        "user_id": user,
        "session_id": session,
        "agent_id": agent,
        "role": role,
        "content": content,
        **extra,
    }
    return json.dumps(data)


def write(tmp_path: Path, lines: list[str]) -> str:
    path = tmp_path / "conversations.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def run_import(path: str, *args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("squad_memory_import", path, *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_import_good_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [
            line(
                "ana",
                "s1",
                "travel",
                "user",
                [{"text": "Lisbon in May?"}],
                timestamp=1_700_000_000_000,
            ),
            line("ana", "s1", "travel", "assistant", "May is lovely.", timestamp=1_700_000_001_000),
            line("ana", "s1", "tech", "user", "My laptop is slow.", timestamp=1_700_000_002_000),
            "",
            line("ana", "s1", "travel", "user", "And hotels?", citations=[{"url": "x"}]),
            line("ana", "s1", "travel", "user", "Anyone?"),  # repeated role: kept, as a batch save
        ],
    )
    out, _ = run_import(path, "--quiet")
    assert "Imported 5 messages into 2 slots." in out
    storage = DjangoChatStorage()
    travel = storage.fetch_chat_sync("ana", "s1", "travel")
    assert texts(travel) == ["Lisbon in May?", "May is lovely.", "And hotels?", "Anyone?"]
    assert travel[2].citations == [{"url": "x"}]
    first = Message.objects.get(slot__agent_id="travel", seq=1)
    assert first.timestamp == 1_700_000_000_000
    merged = storage.fetch_all_chats_sync("ana", "s1")
    assert texts(merged)[:3] == ["Lisbon in May?", "[travel] May is lovely.", "My laptop is slow."]


def test_import_appends_after_existing_messages(tmp_path: Path) -> None:
    storage = DjangoChatStorage()
    storage.save_chat_message_sync("u", "s", "a", msg("user", "already here"))
    run_import(write(tmp_path, [line("u", "s", "a", "assistant", "imported")]), "--quiet")
    assert texts(storage.fetch_chat_sync("u", "s", "a")) == ["already here", "imported"]
    assert Slot.objects.get().last_seq == 2


def test_import_with_bad_lines_stores_nothing_and_names_them(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [
            line("u", "s", "a", "user", "fine"),
            "{not json",
            line("u", "s", "a", "robot", "bad role"),
            line("u", "", "a", "user", "empty session"),
            line("u", "s", "a", "user", "x", colour="red"),
            line("u", "s", "a", "user", "x", timestamp="yesterday"),
            json.dumps(["a", "list"]),
            line("u", "s", "a", "assistant", []),
            line("u", "s", "a", "assistant", "fine too"),
        ],
    )
    with pytest.raises(CommandError) as info:
        run_import(path, "--quiet")
    message = str(info.value)
    assert "7 of 9 lines are invalid; nothing was stored" in message
    for number, words in [
        (2, "not valid JSON"),
        (3, "role"),
        (4, "session_id"),
        (5, "colour"),
        (6, "timestamp"),
        (7, "JSON object"),
        (8, "content"),
    ]:
        assert f"line {number}: " in message and words in message
    assert "line 1:" not in message and "line 9:" not in message
    assert not Message.objects.exists() and not Slot.objects.exists()


def test_import_missing_file() -> None:
    with pytest.raises(CommandError, match="No such file"):
        run_import("/nonexistent/file.jsonl")


def test_import_ten_thousand_messages_with_progress(tmp_path: Path) -> None:
    lines = [
        line(
            f"user{i % 4}",
            "big",
            f"agent{(i // 4) % 2}",
            "user" if (i // 8) % 2 == 0 else "assistant",
            f"message {i}",
        )
        for i in range(10_000)
    ]
    path = write(tmp_path, lines)
    started = time.monotonic()
    out, err = run_import(path, "--progress-every", "2500")
    elapsed = time.monotonic() - started
    assert "Imported 10000 messages into 8 slots." in out
    assert "validated 2500 lines" in err and "validated 10000 lines" in err
    assert "stored 5000 messages" in err and "stored 10000 messages" in err
    assert Message.objects.count() == 10_000
    slot = Slot.objects.get(user_id="user1", agent_id="agent1")
    assert slot.last_seq == 1250
    assert list(
        Message.objects.filter(slot=slot).order_by("seq").values_list("seq", flat=True)
    ) == (list(range(1, 1251)))
    mine = [json.loads(x)["content"] for x in lines if '"user1"' in x and '"agent1"' in x]
    assert texts(DjangoChatStorage().fetch_chat_sync("user1", "big", "agent1")) == mine
    assert elapsed < 30, f"import of 10,000 messages took {elapsed:.1f} s"


def test_export_round_trips_through_import(tmp_path: Path) -> None:
    storage = get_storage()
    for i in range(6):
        storage.save_chat_message_sync(
            "ana", "s1", "travel", msg("user" if i % 2 == 0 else "assistant", f"t{i}")
        )
    storage.save_chat_message_sync("bob", "s9", "tech", msg("user", "hello"))
    target = tmp_path / "export.jsonl"
    call_command("squad_memory_export", "-o", str(target), stderr=io.StringIO())
    exported = [json.loads(x) for x in target.read_text().splitlines()]
    assert [x["content"][0]["text"] for x in exported] == [f"t{i}" for i in range(6)] + ["hello"]
    assert set(exported[0]) == {"user_id", "session_id", "agent_id", "role", "content", "timestamp"}
    only_bob = io.StringIO()
    call_command("squad_memory_export", "--user", "bob", stdout=only_bob)
    assert [json.loads(x)["user_id"] for x in only_bob.getvalue().splitlines()] == ["bob"]
    Message.objects.all().delete()
    Slot.objects.all().delete()
    run_import(str(target), "--quiet")
    again = io.StringIO()
    call_command("squad_memory_export", stdout=again)
    assert [json.loads(x) for x in again.getvalue().splitlines()] == exported


@pytest.mark.own_database  # a SQLite file of its own, for manage.py in other processes
def test_export_into_a_pipe_that_closes_early_ends_quietly(tmp_path: Path) -> None:
    # A real pipe to head: the export writes far more than the pipe holds, head leaves after
    # three lines, and the export's next write meets a closed pipe.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SQUAD_MEMORY", "DATABASE"))}
    env.update(DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3", SQUAD_MEMORY_VAR_DIR=str(tmp_path))
    words = " ".join(["padding"] * 20)
    path = write(
        tmp_path,
        [line("u", "s", "a", ("user", "assistant")[i % 2], f"m{i} {words}") for i in range(3000)],
    )
    for command in (["migrate", "-v0"], ["squad_memory_import", path, "--quiet"]):
        subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env, check=True)
    done = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" manage.py squad_memory_export | head -n 3'],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 3
    assert json.loads(done.stdout.splitlines()[0])["content"][0]["text"].startswith("m0 ")
    assert done.stderr == "", done.stderr  # no BrokenPipeError traceback


def test_the_import_counts_one_slot_in_the_singular(tmp_path: Path) -> None:
    out, _ = run_import(write(tmp_path, [line("ana", "s1", "travel", "user", "Hi")]), "--quiet")
    assert "Imported 1 message into 1 slot." in out

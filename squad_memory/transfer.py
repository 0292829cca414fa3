"""Importing conversations from JSONL, and exporting the raw history to JSONL.

One line is one message::

    {"user_id": "u1", "session_id": "s1", "agent_id": "tech", "role": "user",
     "content": [{"text": "Hello"}], "timestamp": 1718000000000, "citations": null}

``content`` may also be a plain string (stored as ``[{"text": ...}]``);
``timestamp`` (epoch milliseconds) and ``citations`` are optional. Lines of one
slot are stored in file order after the slot's existing messages, without the
role rule (as ``save_chat_messages``). The export writes the same format, so
an export imports again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

from django.db import transaction

from squad_memory import history
from squad_memory.conf import app_settings
from squad_memory.exceptions import ImportFileError, InvalidMessage, InvalidSlotKey
from squad_memory.history import SlotKey
from squad_memory.messages import MessageDict, now_ms, to_dict, validate_key
from squad_memory.models import DJANGO_NAMESPACE, Message

KEYS = ("user_id", "session_id", "agent_id")
FIELDS = {*KEYS, "role", "content", "timestamp", "citations"}
MAX_REPORTED = 50

Progress = Callable[[str], None]


class Writer(Protocol):
    def write(self, text: str, /) -> Any: ...


@dataclass
class ImportReport:
    """What an import did (or, for a file with bad lines, why it stored nothing)."""

    lines: int = 0
    messages: int = 0
    slots: set[SlotKey] = field(default_factory=set)
    errors: list[tuple[int, str]] = field(default_factory=list)


def parse_line(text: str) -> tuple[SlotKey, MessageDict]:
    """Validate one JSONL line; raise ``ValueError`` saying what is wrong with it."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - FIELDS)
    if unknown:
        raise ValueError(
            f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(FIELDS))}"
        )
    key = (data.get("user_id"), data.get("session_id"), data.get("agent_id"))
    validate_key(*key, max_length=app_settings.max_id_length)
    content = data.get("content")
    if isinstance(content, str):
        content = [{"text": content}]
    message = to_dict({**data, "content": content})
    if "content" not in data or not message["content"]:
        raise ValueError("content is missing or empty")
    _check_extras(data, message)
    return (str(key[0]), str(key[1]), str(key[2])), message


def _check_extras(data: dict[str, Any], message: MessageDict) -> None:
    stamp = data.get("timestamp")
    if stamp is not None:
        if not isinstance(stamp, int) or isinstance(stamp, bool) or stamp <= 0:
            raise ValueError("timestamp must be a positive integer (epoch milliseconds)")
        message["timestamp"] = stamp
    citations = data.get("citations")
    if citations is not None and not isinstance(citations, list):
        raise ValueError("citations must be a list or null")
    size = len(json.dumps(message["content"]).encode())
    if size > app_settings.max_message_bytes:
        raise ValueError(f"content is {size} bytes; the limit is {app_settings.max_message_bytes}")


def _lines(stream: IO[str]) -> Iterator[tuple[int, str]]:
    for number, text in enumerate(stream, start=1):
        if text.strip():
            yield number, text


def validate(stream: IO[str], progress: Progress | None = None, every: int = 1000) -> ImportReport:
    """Check every line of a file without storing anything."""
    report = ImportReport()
    for number, text in _lines(stream):
        report.lines += 1
        try:
            key, _ = parse_line(text)
        except (ValueError, InvalidMessage, InvalidSlotKey) as exc:
            report.errors.append((number, str(exc)))
        else:
            report.slots.add(key)
        if progress and report.lines % every == 0:
            progress(f"validated {report.lines} lines")
    return report


def store(
    stream: IO[str],
    progress: Progress | None = None,
    every: int = 1000,
    batch_size: int = 1000,
    first_stamp: int | None = None,
) -> ImportReport:
    """Store a validated file in one transaction, batching each slot's messages.

    Lines without a timestamp get ``first_stamp`` plus their index in milliseconds,
    so ``fetch_all_chats`` merges the agents of a session in file order.
    """
    report = ImportReport()
    pending: dict[SlotKey, list[MessageDict]] = {}
    held = 0
    with transaction.atomic():
        for index, (key, message) in enumerate(_parsed(stream)):
            if "timestamp" not in message:
                message["timestamp"] = (first_stamp or now_ms()) + index
            pending.setdefault(key, []).append(message)
            held += 1
            if held >= batch_size:
                _flush(pending, report, progress, every)
                held = 0
        _flush(pending, report, progress, every)
    report.lines = report.messages
    return report


def _flush(
    pending: dict[SlotKey, list[MessageDict]],
    report: ImportReport,
    progress: Progress | None,
    every: int,
) -> None:
    before = report.messages
    for key, batch in pending.items():
        history.append(DJANGO_NAMESPACE, key, batch, check_role=False)
        report.messages += len(batch)
        report.slots.add(key)
    pending.clear()
    if progress and report.messages // every > before // every:
        progress(f"stored {report.messages} messages")


def _parsed(stream: IO[str]) -> Iterator[tuple[SlotKey, MessageDict]]:
    for _, text in _lines(stream):
        yield parse_line(text)


def import_file(
    path: str, progress: Progress | None = None, every: int = 1000, batch_size: int = 1000
) -> ImportReport:
    """Validate the whole file, then store it; with any bad line, store nothing."""
    with open(path, encoding="utf-8") as stream:
        checked = validate(stream, progress, every)
    if checked.errors:
        raise ImportFileError(_describe_errors(path, checked))
    with open(path, encoding="utf-8") as stream:
        return store(stream, progress, every, batch_size, now_ms() - checked.lines)


def _describe_errors(path: str, report: ImportReport) -> str:
    shown = [f"  line {n}: {reason}" for n, reason in report.errors[:MAX_REPORTED]]
    more = len(report.errors) - len(shown)
    if more:
        shown.append(f"  ... and {more} more bad lines")
    return (
        f"{path}: {len(report.errors)} of {report.lines} lines are invalid; nothing was stored. "
        f"Fix these lines and run the import again:\n" + "\n".join(shown)
    )


def export_rows(
    *,
    user_id: str | None = None,
    session_id: str | None = None,
    agent_id: str | None = None,
    namespace: str = DJANGO_NAMESPACE,
) -> Iterator[dict[str, Any]]:
    """The raw history (trimmed messages included) as import lines, slot by slot, in order."""
    qs = Message.objects.filter(slot__namespace=namespace)
    for name, value in (("user_id", user_id), ("session_id", session_id), ("agent_id", agent_id)):
        if value is not None:
            qs = qs.filter(**{f"slot__{name}": value})
    rows = qs.order_by("slot_id", "seq").values_list(
        "slot__user_id",
        "slot__session_id",
        "slot__agent_id",
        "role",
        "content",
        "timestamp",
        "citations",
    )
    for user, session, agent, role, content, stamp, citations in rows.iterator(chunk_size=2000):
        line = {
            "user_id": user,
            "session_id": session,
            "agent_id": agent,
            "role": role,
            "content": content,
            "timestamp": stamp,
        }
        if citations:
            line["citations"] = citations
        yield line


def export(out: Writer, **filters: Any) -> int:
    """Write the raw history as JSONL to ``out``; return the number of lines."""
    count = 0
    for line in export_rows(**filters):
        out.write(json.dumps(line, ensure_ascii=False) + "\n")
        count += 1
    return count

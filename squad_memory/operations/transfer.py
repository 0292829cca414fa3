"""Importing and exporting conversations: one format, JSON Lines, one message a line::

    {"user_id": "u1", "session_id": "s1", "agent_id": "tech", "role": "user",
     "content": [{"text": "Hello"}], "timestamp": 1718000000000, "citations": null}

``content`` may be a plain string (stored as ``[{"text": ...}]``); ``timestamp`` (epoch
milliseconds) and ``citations`` are optional. A slot's lines are appended in file order,
without the role rule (as ``save_chat_messages``), through ``Slot.objects.append``.

The export writes the same lines, slot by slot, so an export imports again. With
``state=True`` (the admin's export) each slot's messages follow a *state line* (its
counters, buffer and compression log), ``{"slot": {...}, "state": ..., "summary": [...],
"buffer": [...], "compressions": [...]}``, which the importer skips.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction

from squad_memory.compression import log
from squad_memory.exceptions import ImportFileError, InvalidMessage, InvalidSlotKey
from squad_memory.messages import MessageDict, now_ms, to_dict
from squad_memory.models import DJANGO_NAMESPACE, Compression, Message, Slot, SlotKey
from squad_memory.rules import validate_key

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


def parse_line(text: str) -> tuple[SlotKey, MessageDict] | None:
    """Validate one JSONL line (None for a state line), or ``ValueError`` saying what is wrong."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    if "slot" in data and "role" not in data:
        return None  # a state line of an export
    unknown = sorted(set(data) - FIELDS)
    if unknown:
        raise ValueError(
            f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(FIELDS))}"
        )
    key = validate_key(data.get("user_id"), data.get("session_id"), data.get("agent_id"))
    content = data.get("content")
    if isinstance(content, str):
        content = [{"text": content}]
    message = to_dict({**data, "content": content})
    if "content" not in data or not message["content"]:
        raise ValueError("content is missing or empty")
    stamp = data.get("timestamp")
    if stamp is not None:
        if not isinstance(stamp, int) or isinstance(stamp, bool) or stamp <= 0:
            raise ValueError("timestamp must be a positive integer (epoch milliseconds)")
        message["timestamp"] = stamp
    return key, message


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
            parsed = parse_line(text)
        except (ValueError, InvalidMessage, InvalidSlotKey) as exc:
            report.errors.append((number, str(exc)))
        else:
            if parsed is not None:
                report.slots.add(parsed[0])
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
    """Store a validated file in one transaction, batching each slot's messages; a line without
    a timestamp gets ``first_stamp`` plus its index in milliseconds, so the file's order holds."""
    report = ImportReport()
    pending: dict[SlotKey, list[MessageDict]] = {}
    with transaction.atomic(using=Slot.objects.write_db()):
        for index, (key, message) in enumerate(_parsed(stream)):
            if "timestamp" not in message:
                message["timestamp"] = (first_stamp or now_ms()) + index
            pending.setdefault(key, []).append(message)
            if (index + 1) % max(batch_size, 1) == 0:
                _flush(pending, report, progress, every)
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
        Slot.objects.append(key, batch)
        report.messages += len(batch)
        report.slots.add(key)
    pending.clear()
    if progress and report.messages // every > before // every:
        progress(f"stored {report.messages} messages")


def _parsed(stream: IO[str]) -> Iterator[tuple[SlotKey, MessageDict]]:
    for _, text in _lines(stream):
        parsed = parse_line(text)
        if parsed is not None:
            yield parsed


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


#: Rows fetched per round trip while exporting a long history.
EXPORT_CHUNK = 2000

_SLOT_FIELDS = (
    "id",
    "namespace",
    "user_id",
    "session_id",
    "agent_id",
    "created_at",
    "updated_at",
    "last_seq",
    "last_role",
    "visible_from_seq",
    "active",
    "summary_length",
    "summary_tokens",
    "buffer_tokens",
    "covered_seq",
    "version",
    "trigger_at",
    "keep_last",
    "pending_since",
    "last_failed",
)
_COMPRESSION_FIELDS = (
    "id",
    "started_at",
    "finished_at",
    "duration_ms",
    "from_seq",
    "to_seq",
    "summarizer",
    "outcome",
    "error",
    "trigger",
    "attempt",
)


def slots_for(
    *,
    user_id: str | None = None,
    session_id: str | None = None,
    agent_id: str | None = None,
    namespace: str = DJANGO_NAMESPACE,
) -> Iterable[Slot]:
    """The slots an export of these filters covers, in id order."""
    filters = {"user_id": user_id, "session_id": session_id, "agent_id": agent_id}
    slots = Slot.objects.using(Slot.objects.write_db()).filter(namespace=namespace)
    return slots.filter(**{k: v for k, v in filters.items() if v is not None}).order_by("pk")


def export_lines(
    slots: Iterable[Slot], *, state: bool = False, buffer: Callable[[Slot], Any] | None = None
) -> Iterator[str]:
    """The slots' raw histories (trimmed messages included) as JSON lines, slot by slot in
    order; with ``state``, each slot's state line first (``buffer(slot)``: its buffer)."""
    for slot in slots:
        if state:
            yield _dumps(_state(slot, buffer)) + "\n"
        rows = Message.objects.using(Slot.objects.write_db()).filter(slot=slot).order_by("seq")
        values = rows.values_list("role", "content", "timestamp", "citations")
        for role, content, stamp, citations in values.iterator(chunk_size=EXPORT_CHUNK):
            line = dict(
                zip(KEYS, slot.key, strict=True), role=role, content=content, timestamp=stamp
            )
            if citations:
                line["citations"] = citations
            yield _dumps(line) + "\n"


def _state(slot: Slot, buffer: Callable[[Slot], Any] | None) -> dict[str, Any]:
    """A slot's state line: its counters, summary, buffer and compression log."""
    logged = Compression.objects.using(Slot.objects.write_db()).filter(slot=slot)
    rows = list(logged.select_related("previous").order_by("started_at", "id"))
    shown = log.rebuild(rows)
    compressions = [
        {
            **{name: getattr(row, name) for name in _COMPRESSION_FIELDS},
            "input": shown[row.pk][0],
            "output": shown[row.pk][1],
        }
        for row in rows
    ]
    return {
        "slot": {name: getattr(slot, name) for name in _SLOT_FIELDS},
        "state": slot.state,
        "summary": slot.summary,
        "buffer": buffer(slot) if buffer is not None else None,
        "compressions": compressions,
    }


def _dumps(value: Any) -> str:
    return json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False)


def export(out: Writer, **filters: Any) -> int:
    """Write the raw history of the slots ``filters`` select (:func:`slots_for`) as JSONL to
    ``out``; the number of lines."""
    count = 0
    for count, line in enumerate(export_lines(slots_for(**filters)), start=1):  # noqa: B007
        out.write(line)
    return count

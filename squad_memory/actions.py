"""Operator actions on slots: summarize now, reset the buffer, export as JSON.

The admin (one slot or a selection) calls these; each goes through the same
library functions as every other path (:class:`~squad_memory.memory.Memory`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from squad_memory import __version__, buffer, compression
from squad_memory.compression import log
from squad_memory.exceptions import SquadMemoryError
from squad_memory.messages import MessageDict
from squad_memory.models import DJANGO_NAMESPACE, Compression, Message, Outcome, Slot
from squad_memory.storage import get_storage
from squad_memory.storage.orm import slot_key
from squad_memory.summarizers import is_summary

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
    "input",
    "output",
    "summarizer",
    "outcome",
    "error",
    "trigger",
    "attempt",
)


@dataclass
class Result:
    """What an action did to one slot, worded for an operator; ``level`` is a messages level."""

    slot: Slot
    ok: bool
    message: str


def summarize(slot: Slot) -> Result:
    """Compress the slot's buffer now (enqueued in Celery mode), whatever its length."""
    if slot.namespace != DJANGO_NAMESPACE and not slot.active:
        return Result(
            slot,
            False,
            _(
                "%(slot)s: its history is kept by the wrapped store %(ns)s, so its buffer can only "
                "be started by the application (a fetch through the storage)."
            )
            % {"slot": slot, "ns": slot.namespace},
        )
    try:
        slot_key(slot.user_id, slot.session_id, slot.agent_id)  # today's limits on ids
        result = get_storage().memory.compress_slot(slot)
    except SquadMemoryError as exc:  # ON_ERROR="raise", or a key refused by today's limits
        return Result(
            slot, False, _("%(slot)s: not summarized: %(error)s") % {"slot": slot, "error": exc}
        )
    return _describe(slot, result)


#: What an operator reads for each outcome, and whether it counts as success.
_WORDS: dict[str, tuple[bool, Any]] = {
    Outcome.QUEUED: (True, gettext_lazy("%(slot)s: the compression was queued for a worker.")),
    Outcome.ALREADY_PENDING: (
        True,
        gettext_lazy("%(slot)s: a compression is queued or already running."),
    ),
    Outcome.DEFERRED: (
        True,
        gettext_lazy("%(slot)s: the compression runs when the transaction commits."),
    ),
    Outcome.NOT_QUEUED: (
        False,
        gettext_lazy(
            "%(slot)s: the compression could not be queued (%(detail)s); try again later."
        ),
    ),
    Outcome.STALE: (
        False,
        gettext_lazy("%(slot)s: the buffer moved on meanwhile; nothing applied."),
    ),
    Outcome.SKIPPED: (False, gettext_lazy("%(slot)s: nothing to compress.")),
    Outcome.FAILED: (False, gettext_lazy("%(slot)s: the summarizer failed: %(error)s")),
}


def _describe(slot: Slot, result: compression.Result) -> Result:
    if result.applied:
        return Result(
            slot,
            True,
            _("%(slot)s: summarized; the buffer now starts with %(head)s.")
            % {"slot": slot, "head": _head_words(result.output or [])},
        )
    ok, words = _WORDS[result.outcome]
    values = {"slot": slot, "error": result.error, "detail": result.detail}
    return Result(slot, ok, str(words) % values)


def _head_words(output: list[Any]) -> str:
    """'one summary plus 5 recent messages' for a summarizer's output."""
    summaries = sum(1 for message in output if is_summary(message))
    recent = len(output) - summaries
    head = (
        _("one summary")
        if summaries == 1
        else ngettext("%(n)d summary message", "%(n)d summary messages", summaries)
        % {"n": summaries}
    )
    if not recent:
        return head
    return head + ngettext(" plus %(n)d recent message", " plus %(n)d recent messages", recent) % {
        "n": recent
    }


def reset(slot: Slot) -> Result:
    """Deactivate the slot's buffer; the raw history is untouched."""
    if not compression.reset(slot.pk):
        return Result(slot, False, _("%(slot)s no longer exists.") % {"slot": slot})
    return Result(
        slot, True, _("%(slot)s: buffer reset; the raw history is untouched.") % {"slot": slot}
    )


def current_buffer(slot: Slot) -> list[MessageDict] | None:
    """What ``fetch_chat`` returns now, as stored dicts; None when a foreign store holds it."""
    if not slot.active and slot.namespace != DJANGO_NAMESPACE:
        return None
    return buffer.current(slot)


def export(slots: Iterable[Slot]) -> Iterator[str]:
    """The slots as one JSON document, in chunks (a long history is never held in memory)."""
    yield json.dumps({"format": "squad_memory.export", "version": __version__})[:-1]
    yield ', "slots": ['
    for index, slot in enumerate(slots):
        yield (", " if index else "") + "{"
        yield from _slot_parts(slot)
        yield "}"
    yield "]}\n"


def _slot_parts(slot: Slot) -> Iterator[str]:
    yield '"slot": ' + _dumps({name: getattr(slot, name) for name in _SLOT_FIELDS})
    yield ', "state": ' + _dumps(slot.state)
    yield ', "summary": ' + _dumps(slot.summary)
    yield ', "buffer": ' + _dumps(current_buffer(slot))
    yield ', "compressions": ' + _dumps(_compressions(slot))
    yield ', "messages": ['
    rows = Message.objects.filter(slot=slot).order_by("seq")
    values = rows.values("seq", "role", "content", "citations", "timestamp")
    for index, row in enumerate(values.iterator(chunk_size=EXPORT_CHUNK)):
        item = {**row, "trimmed": slot.is_trimmed(row["seq"])}
        yield (", " if index else "") + _dumps(item)
    yield "]"


def _compressions(slot: Slot) -> list[dict[str, Any]]:
    """The slot's compression log, each row's input and output rebuilt from references."""
    rows = list(
        Compression.objects.filter(slot=slot)
        .select_related("previous")
        .order_by("started_at", "id")
    )
    shown = log.rebuild(rows)
    return [
        {
            **{name: getattr(row, name) for name in _COMPRESSION_FIELDS},
            "input": shown[row.pk][0],
            "output": shown[row.pk][1],
        }
        for row in rows
    ]


def _dumps(value: Any) -> str:
    return json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False)

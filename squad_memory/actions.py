"""Operator actions on slots: summarize now, reset the buffer, export as JSON.

The admin (one slot or a selection) calls these; each goes through the same
library functions as every other path (``compress_now``, :func:`buffer.reset`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from squad_memory import __version__, buffer, get_storage
from squad_memory.exceptions import SquadMemoryError
from squad_memory.models import DJANGO_NAMESPACE, Compression, Message, Slot
from squad_memory.storage import SummarizingChatStorage
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
        outcome = _storage_for(slot).compress_now(slot.user_id, slot.session_id, slot.agent_id)
    except SquadMemoryError as exc:  # ON_ERROR="raise", or a key refused by today's limits
        return Result(
            slot, False, _("%(slot)s: not summarized: %(error)s") % {"slot": slot, "error": exc}
        )
    return _describe(slot, outcome)


def _storage_for(slot: Slot) -> SummarizingChatStorage:
    storage = get_storage()
    if slot.namespace == storage.namespace:
        return storage
    # Same summarizer and sizes, addressing the foreign store's slots (their rows are the
    # buffer's journal, so an active buffer is compressed exactly as a Django one).
    other = copy.copy(storage)
    other.namespace = slot.namespace
    return other


def _describe(slot: Slot, outcome: buffer.Outcome | None) -> Result:
    if outcome is None:
        slot.refresh_from_db(fields=["pending_since", "pending_token"])
        return Result(
            slot, True, _("%(slot)s: a compression is queued or already running.") % {"slot": slot}
        )
    if outcome.applied:
        return Result(
            slot,
            True,
            _("%(slot)s: summarized; the buffer now starts with %(head)s.")
            % {"slot": slot, "head": _head_words(outcome.output or [])},
        )
    if outcome.error is not None:
        return Result(
            slot,
            False,
            _("%(slot)s: the summarizer failed: %(error)s")
            % {"slot": slot, "error": outcome.error},
        )
    return Result(
        slot, False, _("%(slot)s: the buffer moved on meanwhile; nothing applied.") % {"slot": slot}
    )


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
    if not buffer.reset(slot.pk):
        return Result(slot, False, _("%(slot)s no longer exists.") % {"slot": slot})
    return Result(
        slot, True, _("%(slot)s: buffer reset; the raw history is untouched.") % {"slot": slot}
    )


def current_buffer(slot: Slot) -> list[dict[str, Any]] | None:
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
    yield ', "compressions": ' + _dumps(
        list(
            Compression.objects.filter(slot=slot)
            .order_by("started_at", "id")
            .values(*_COMPRESSION_FIELDS)
        )
    )
    yield ', "messages": ['
    rows = Message.objects.filter(slot=slot).order_by("seq")
    values = rows.values("seq", "role", "content", "citations", "timestamp")
    for index, row in enumerate(values.iterator(chunk_size=EXPORT_CHUNK)):
        item = {**row, "trimmed": row["seq"] < slot.visible_from_seq}
        yield (", " if index else "") + _dumps(item)
    yield "]"


def _dumps(value: Any) -> str:
    return json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False)

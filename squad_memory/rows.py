"""A save's rows, built once: the unsaved ``Message`` instances, their sequence numbers,
and what the save reports and caches of them."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from django.db import router

from squad_memory import loading, sql, tokens
from squad_memory.messages import MessageDict, now_ms
from squad_memory.models import Message, Slot
from squad_memory.search import extract_text


def build_rows(slot: Slot | None, last_seq: int, messages: list[MessageDict]) -> list[Message]:
    stamp = now_ms()
    rows = [
        _message(
            slot_id=None,
            seq=last_seq + i,
            role=m["role"],
            content=m["content"],
            citations=m.get("citations"),
            timestamp=m.get("timestamp") or stamp,  # importers keep the original time
            text=extract_text(m["content"]),
            tokens=tokens.count(m),
        )
        for i, m in enumerate(messages, start=1)
    ]
    if slot is not None:
        number(slot, rows, last_seq)
    return rows


@functools.cache
def _message_order() -> tuple[str, ...]:
    return tuple(f.attname for f in Message._meta.concrete_fields)


def _message(**values: Any) -> Message:
    """An unsaved ``Message`` (every concrete field set; ``id`` None)."""
    return loading.instance(Message, {name: values.get(name) for name in _message_order()})


def number(slot: Slot, rows: list[Message], after_seq: int) -> None:
    """Give ``rows`` their slot and the sequence numbers after ``after_seq``: what
    ``row.slot = slot`` does (the id, the cached instance, the database the router
    names for a row not yet saved), once for all rows."""
    if not rows:
        return
    if router.routers:  # what the descriptor asks the routers
        db = router.db_for_write(Message, instance=slot)
        for row in rows:
            row._state.db = row._state.db or db
        if not router.allow_relation(slot, rows[0]):
            raise ValueError(f"the database router prevents relating messages to {slot!r}")
    else:  # no routers: the slot's database, a relation within it
        for row in rows:
            row._state.db = row._state.db or slot._state.db
    cache = Message._meta.get_field("slot").set_cached_value
    for i, row in enumerate(rows, start=after_seq + 1):
        row.slot_id, row.seq = slot.pk, i
        cache(row, slot)


def accepted_dict(row: Message) -> MessageDict:
    return {"role": row.role, "content": row.content, "citations": row.citations}


_CONTENT, _CITATIONS = sql.MESSAGE_COLUMNS.index("content"), sql.MESSAGE_COLUMNS.index("citations")


def cached_row(message: Message, stored: Sequence[Any] | None = None) -> dict[str, Any]:
    """What reading the row back gives: the content as its JSON says (a copy, not the
    caller's). ``stored``: the row's INSERT values (:func:`~squad_memory.sql.message_params`);
    where the backend stores JSON as this text, the text is decoded, not made again."""
    text, cited = (None, None) if stored is None else (stored[_CONTENT], stored[_CITATIONS])
    if type(text) is str and (cited is None or type(cited) is str):
        content = json.loads(text)
        citations = None if cited is None else json.loads(cited)
    else:
        content, citations = json.loads(json.dumps([message.content, message.citations]))
    return {"seq": message.seq, "role": message.role, "content": content, "citations": citations}

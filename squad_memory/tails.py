"""A per-process cache of the buffer's tail rows, checked against the slot's counters.

Raw messages are never edited and sequence numbers are gapless and never reused,
so the rows ``after_seq < seq <= last_seq`` of a slot are the same rows for as
long as the slot exists. A read that knows the slot's ``last_seq`` (from the slot
row it just read) can take the rows from here when the cache holds exactly up to
it, and skip a query; when another process has written since, the cache falls
short and the read goes to the database. Entries are only added once the
transaction that wrote or read them has committed, so a rolled-back save never
leaves rows here.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

Row = dict[str, Any]

#: Slots remembered per process, and rows per slot (the newest are kept).
MAX_SLOTS = 4096
MAX_ROWS = 512
#: Rows a slot's entry may grow past MAX_ROWS before it is cut back (cuts are rare).
_SLACK = 64

_lock = threading.Lock()
_tails: OrderedDict[tuple[str, int], tuple[int, list[Row]]] = OrderedDict()


def get(alias: str, slot_id: int, after_seq: int, last_seq: int) -> list[Row] | None:
    """Rows ``after_seq < seq <= last_seq`` if cached exactly up to ``last_seq``; else None."""
    with _lock:
        entry = _tails.get((alias, slot_id))
        if entry is None:
            return None
        first, rows = entry
        if first + len(rows) - 1 != last_seq or first > after_seq + 1:
            return None
        _tails.move_to_end((alias, slot_id))
        return rows[max(after_seq + 1 - first, 0) :]


def put(alias: str, slot_id: int, rows: list[Row]) -> None:
    """Remember consecutive rows of a slot (committed), joining them to what is cached."""
    if not rows:
        return
    key = (alias, slot_id)
    with _lock:
        entry = _tails.get(key)
        first = rows[0]["seq"]
        if entry is not None and first == entry[0] + len(entry[1]):
            cached = entry[1]  # the common case, a save's rows after the cached ones:
            cached.extend(rows)  # appended in place (readers get slices, never this list)
            if len(cached) > MAX_ROWS + _SLACK:
                del cached[: len(cached) - MAX_ROWS]
                _tails[key] = (cached[0]["seq"], cached)
        else:
            if entry is not None and entry[0] < first < entry[0] + len(entry[1]):
                rows = entry[1][: first - entry[0]] + rows
            rows = rows[-MAX_ROWS:]
            _tails[key] = (rows[0]["seq"], rows)
        _tails.move_to_end(key)
        while len(_tails) > MAX_SLOTS:
            _tails.popitem(last=False)


def clear() -> None:
    with _lock:
        _tails.clear()

"""The per-process tail cache: rows joined in order, cut to MAX_ROWS, exact ranges only."""

from __future__ import annotations

from squad_memory import tails


def row(seq: int) -> dict[str, object]:
    return {"seq": seq, "role": "user" if seq % 2 else "assistant", "content": [{"text": str(seq)}]}


def seqs(rows: list[dict[str, object]] | None) -> list[object] | None:
    return None if rows is None else [r["seq"] for r in rows]


def test_saves_append_and_the_entry_stays_within_its_cap() -> None:
    tails.clear()
    for seq in range(1, 2001, 2):  # a thousand saves of two rows
        tails.put("db", 1, [row(seq), row(seq + 1)])
        assert seqs(tails.get("db", 1, seq - 1, seq + 1)) == [seq, seq + 1]
    assert tails.get("db", 1, 0, 2000) is None  # the oldest rows are no longer cached
    first = next(s for s in range(1, 2001) if tails.get("db", 1, s - 1, 2000) is not None)
    kept = seqs(tails.get("db", 1, first - 1, 2000))
    assert kept == list(range(first, 2001))  # consecutive, the newest kept
    assert tails.MAX_ROWS <= len(kept) <= tails.MAX_ROWS + tails._SLACK
    assert tails.get("db", 1, first - 1, 1999) is None  # not cached exactly up to 1999
    assert tails.get("db", 1, 0, 2001) is None  # another process wrote 2001: go to the database


def test_a_read_back_replaces_an_overlapping_tail_and_slices_are_copies() -> None:
    tails.clear()
    tails.put("db", 1, [row(s) for s in range(1, 11)])
    tails.put("db", 1, [row(s) for s in range(6, 13)])  # overlaps 6..10, goes on to 12
    assert seqs(tails.get("db", 1, 0, 12)) == list(range(1, 13))
    got = tails.get("db", 1, 10, 12)
    assert got is not None
    got.clear()  # a reader's list is its own
    assert seqs(tails.get("db", 1, 10, 12)) == [11, 12]
    tails.put("db", 1, [row(s) for s in range(20, 22)])  # a gap: starts again from 20
    assert tails.get("db", 1, 0, 21) is None and seqs(tails.get("db", 1, 19, 21)) == [20, 21]

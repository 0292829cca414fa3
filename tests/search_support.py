"""What the search tests of the API and of the admin share: histories of long messages, a
table the planner believes huge, the plans of the searches a request runs, and a message
table locked by another session."""

from __future__ import annotations

import random
import string
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection, connections

import squad_memory
from squad_memory.models import Message, Slot


def say(user_id: str, session: str, agent: str, *texts: str) -> None:
    batch = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": [{"text": t}]}
        for i, t in enumerate(texts)
    ]
    squad_memory.get_storage().save_chat_messages_sync(user_id, session, agent, batch)


def long_text(rng: random.Random, words: list[str], size: int = 57_000) -> str:
    return " ".join(rng.choices(words, k=size // 7))[:size]


def long_histories(user_id: str) -> Slot:
    """Two slots of long messages (their text lives in TOAST, so the table looks small to the
    planner, though each row's words take milliseconds to parse), analysed as autovacuum
    would; "rareword" occurs in two messages. The first slot."""
    rng = random.Random(7)
    vocabulary = [
        "".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 9))) for _ in range(4000)
    ]
    for session in ("s1", "s2"):
        texts = [long_text(rng, vocabulary) for _ in range(30)]
        texts[5] += " rareword"
        say(user_id, session, "a1", *texts)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE squad_memory_message")
        cursor.execute("ANALYZE squad_memory_slot")
    return Slot.objects.get(user_id=user_id, session_id="s1")


def millions_planned(user_id: str) -> None:
    """Messages as the planner sees a table of millions: 2,000 short ones (slots s0 to s19
    of ``user_id``, 100 each) of a few words, each of them common in the statistics ANALYZE
    keeps ("common" is in all), and the table's row count in ``pg_class`` raised to
    3,000,000 (rolled back with the test). A word outside those statistics is then
    estimated at 0.5% of the rows, the estimate at which, at that size, a plan that walks
    the newest messages looks cheaper than the full-text index. Then, unknown to the
    statistics, "rareword" in two messages of a slot "rare" (seq 1 and 3; seq 2 is
    "common"), the newest of the table."""
    rng = random.Random(11)
    words = [f"w{i}" for i in range(60)]
    for slot in range(20):
        texts = [" ".join(["common", *rng.choices(words, k=5)]) for _ in range(100)]
        say(user_id, f"s{slot}", "a1", *texts)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Message._meta.db_table}")
        cursor.execute(f"ANALYZE {Slot._meta.db_table}")
        cursor.execute(
            "UPDATE pg_class SET reltuples = 3000000 WHERE oid = %s::regclass",
            [Message._meta.db_table],
        )
    say(user_id, "rare", "a1", "common rareword", "common", "common rareword")


def one_big_slot(user_id: str, size: int = 6000) -> None:
    """After :func:`millions_planned`: a slot "big" of ``user_id`` holding ``size`` messages
    of "common" words, the newest of the table. The planner counts a slot's messages as the
    table's rows over its slots' (the foreign key): the slot table is planned at 60,000
    rows, so a slot holds 50 messages, as at 3,000,000 (its pages counted again, as ANALYZE
    would, so that the table stays planned at 3,000,000 rows)."""
    say(user_id, "big", "a1", *(f"common w{i % 60}" for i in range(size)))
    with connection.cursor() as cursor:
        for table, rows in ((Message._meta.db_table, 3_000_000), (Slot._meta.db_table, 60_000)):
            cursor.execute(
                "UPDATE pg_class SET reltuples = %s, relpages = pg_relation_size(oid) / "
                "current_setting('block_size')::int WHERE oid = %s::regclass",
                [rows, table],
            )


def plans_of_searches(request: Callable[[], Any]) -> list[str]:
    """The plan of each statement matching text that ``request`` runs, explained on the same
    cursor just before it runs (inside the request's transaction and its settings)."""
    plans: list[str] = []

    def explain(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if "websearch_to_tsquery" in sql and not sql.startswith("EXPLAIN"):
            context["cursor"].execute("EXPLAIN " + sql, params)
            plans.append("\n".join(row[0] for row in context["cursor"].fetchall()))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(explain):
        response = request()
    assert response.status_code == 200, response.content
    return plans


@contextmanager
def messages_locked() -> Iterator[None]:
    """The message table locked by another session (as a long migration or a bulk delete
    would) for the block, or for 10 s at most, so that a test ends even if nothing stops
    a search waiting on it."""
    locker = connections.create_connection("default")
    locker.inc_thread_sharing()  # the timer's thread may release the lock
    locker.set_autocommit(False)
    locker.cursor().execute("LOCK TABLE squad_memory_message IN ACCESS EXCLUSIVE MODE")
    release = threading.Timer(10, locker.rollback)
    release.start()
    try:
        yield
    finally:
        release.cancel()
        locker.rollback()
        locker.close()
        locker.dec_thread_sharing()

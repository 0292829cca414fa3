"""``python -m bench.search``: full-text search over 1,000,000 stored messages on PostgreSQL.

Loads a dedicated database (``sm_wtdata_bench`` unless ``--database`` says otherwise;
dropped and recreated unless ``--reuse``) through the app's migrations, so the GIN
index is the one an installation gets. Messages go in with ``COPY`` (the index is
built after the load, then the table analysed), spread over users with two
conversations each, their words drawn from a Zipf-like vocabulary. Then it times
the search the API runs (``squad_memory.search.matching``, newest first, one page
of 50 with excerpts) for common, medium and rare words and two-word queries, over
one user's messages and over everyone's (staff), and the cost of a save with the
index in place. Prints the medians, and the overall median against the 50 ms goal.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg

SERVER = os.environ.get("BENCH_SERVER_URL", "postgres://postgres@127.0.0.1:5432")
PAGE = 50
VOCABULARY = 20_000
WORDS_PER_MESSAGE = 18


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.search", description=__doc__)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--per-slot", type=int, default=500, help="messages per conversation")
    parser.add_argument("--runs", type=int, default=40, help="timed searches per query kind")
    parser.add_argument("--database", default="sm_wtdata_bench")
    parser.add_argument("--server", default=SERVER, help="PostgreSQL URL without a database")
    parser.add_argument("--reuse", action="store_true", help="keep an already loaded database")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    return parser.parse_args(argv)


def recreate(server: str, name: str) -> None:
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def setup_django(server: str, name: str) -> None:
    os.environ["DATABASE_URL"] = f"{server}/{name}"
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django

    django.setup()


def word(rank: int) -> str:
    return f"w{rank}"


def cumulative_weights() -> list[float]:
    """Zipf-like: the word of rank r is drawn with weight 1/r (cumulated once, for speed)."""
    return list(itertools.accumulate(1.0 / rank for rank in range(1, VOCABULARY + 1)))


def message_rows(
    slot_ids: list[int], per_slot: int, rng: random.Random
) -> Iterator[tuple[Any, ...]]:
    """Rows for COPY: slot, seq, role, content (JSON), citations, timestamp, text, tokens."""
    from squad_memory.rules import estimate_tokens

    ranks = range(1, VOCABULARY + 1)
    weights = cumulative_weights()
    stamp = 1_700_000_000_000
    for slot_id in slot_ids:
        for seq in range(1, per_slot + 1):
            text = " ".join(
                word(r) for r in rng.choices(ranks, cum_weights=weights, k=WORDS_PER_MESSAGE)
            )
            role = "user" if seq % 2 else "assistant"
            content = json.dumps([{"text": text}])
            stamp += 1000
            count = estimate_tokens({"role": role, "content": [{"text": text}], "citations": None})
            yield slot_id, seq, role, content, None, stamp, text, count


def load(messages: int, per_slot: int) -> float:
    """Slots through the ORM, messages by COPY, then the GIN index; seconds taken."""
    from django.db import connection

    from squad_memory.models import Slot

    started = time.perf_counter()
    slots = max(messages // per_slot, 1)
    Slot.objects.bulk_create(
        [
            Slot(
                user_id=f"user{i // 2}",
                session_id=f"s{i % 2}",
                agent_id="agent",
                last_seq=per_slot,
                last_role="assistant" if per_slot % 2 == 0 else "user",
            )
            for i in range(slots)
        ],
        batch_size=5000,
    )
    slot_ids = list(Slot.objects.order_by("pk").values_list("pk", flat=True))
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX IF EXISTS squad_memory_message_text_fts")
        columns = "slot_id, seq, role, content, citations, timestamp, text, tokens"
        raw = cursor.connection.cursor()
        with raw.copy(f"COPY squad_memory_message ({columns}) FROM STDIN") as copy:
            for row in message_rows(slot_ids, per_slot, random.Random(7)):
                copy.write_row(row)
        from squad_memory.search import TSVECTOR

        cursor.execute("SET maintenance_work_mem = '256MB'")
        cursor.execute(
            "CREATE INDEX squad_memory_message_text_fts ON squad_memory_message "
            f"USING gin ({TSVECTOR.format(column='text')})"
        )
        cursor.execute("VACUUM ANALYZE squad_memory_message")
        cursor.execute("ANALYZE squad_memory_slot")
    return time.perf_counter() - started


def search_page(scope: str, value: Any, query: str) -> int:
    """What the API does for one page: the query, the rows, the excerpts.

    ``one user``: GET /api/search/ (newest first); ``one slot``: ?q= on a slot's messages
    (by seq); ``all users``: no endpoint searches everyone, measured for reference.
    """
    from django.db import connection, transaction

    from squad_memory.models import Message
    from squad_memory.search import excerpt, matching, plan_with_index

    rows = Message.objects.filter(slot__namespace="")
    order = "-id"
    if scope == "one user":
        rows = rows.filter(slot__user_id=value)
    elif scope == "one slot":
        rows, order = Message.objects.filter(slot_id=value), "seq"
    page = matching(rows, query).select_related("slot").order_by(order)[: PAGE + 1]
    with transaction.atomic(), connection.cursor() as cursor:
        plan_with_index(cursor)  # as the API's searches do
        hits = list(page.only("id", "seq", "role", "text", "slot__session_id", "slot__agent_id"))
    return len([excerpt(m.text, query) for m in hits])


def timed(fn: Callable[[], Any], runs: int) -> list[float]:
    fn()  # warm-up
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return times


def queries(rng: random.Random) -> dict[str, Callable[[], str]]:
    return {
        "common word": lambda: word(rng.randint(1, 10)),
        "medium word": lambda: word(rng.randint(200, 1000)),
        "rare word": lambda: word(rng.randint(15_000, VOCABULARY)),
        "two words": lambda: f"{word(rng.randint(1, 50))} {word(rng.randint(50, 500))}",
        "no hit": lambda: "absentword",
    }


#: Scopes an endpoint searches (the headline figure); "all users" is for reference only.
API_SCOPES = ("one user", "one slot")


def measure(users: int, slots: list[int], runs: int) -> dict[str, float]:
    rng = random.Random(11)
    figures: dict[str, float] = {}
    api: list[float] = []
    pick = {
        "one user": lambda: f"user{rng.randrange(users)}",
        "one slot": lambda: rng.choice(slots),
        "all users": lambda: None,
    }
    for scope in (*API_SCOPES, "all users"):
        for kind, make in queries(rng).items():

            def run(make: Callable[[], str] = make, scope: str = scope) -> int:
                return search_page(scope, pick[scope](), make())

            times = timed(run, runs)
            figures[f"{scope}, {kind}"] = statistics.median(times)
            api += times if scope in API_SCOPES else []
    figures["API searches: median"] = statistics.median(api)
    figures["API searches: 95th percentile"] = statistics.quantiles(api, n=20)[-1]
    return figures


def save_cost(runs: int) -> float:
    """Median ms of one save_chat_message through the storage, the index in place."""
    from agent_squad.types import ConversationMessage

    import squad_memory

    storage = squad_memory.get_storage()
    rng = random.Random(3)
    state = {"i": 0}

    def save() -> None:
        state["i"] += 1
        role = "user" if state["i"] % 2 else "assistant"
        text = " ".join(word(rng.randint(1, VOCABULARY)) for _ in range(WORDS_PER_MESSAGE))
        message = ConversationMessage(role=role, content=[{"text": text}])
        storage.save_chat_message_sync("bench-saver", "s", f"a{state['i'] // 500}", message)

    return statistics.median(timed(save, runs * 5))


def without_index(fn: Callable[[], float]) -> float:
    """``fn()`` with the GIN index dropped, then the index rebuilt."""
    from django.db import connection

    from squad_memory.search import TSVECTOR

    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX squad_memory_message_text_fts")
        try:
            return fn()
        finally:
            cursor.execute(
                "CREATE INDEX squad_memory_message_text_fts ON squad_memory_message "
                f"USING gin ({TSVECTOR.format(column='text')})"
            )
            cursor.execute("ANALYZE squad_memory_message")  # the index expression's stats


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if not args.reuse:
        recreate(args.server, args.database)
    setup_django(args.server, args.database)
    from django.core.management import call_command

    from squad_memory.models import Message, Slot

    call_command("migrate", verbosity=0)
    loaded = Message.objects.count()
    seconds = 0.0 if loaded >= args.messages else load(args.messages, args.per_slot)
    count = Message.objects.count()
    users = max(count // args.per_slot // 2, 1)
    slot_ids = list(Slot.objects.filter(user_id__startswith="user").values_list("pk", flat=True))
    figures = measure(users, slot_ids, args.runs)
    figures["save, GIN index in place"] = save_cost(args.runs)
    figures["save, without the index"] = without_index(lambda: save_cost(args.runs))
    report = {"messages": count, "load_seconds": round(seconds, 1), "figures_ms": figures}
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{count:,} messages (loaded in {seconds:.1f} s); medians in ms:")
        for name, value in figures.items():
            print(f"  {name:<32} {value:8.2f}")
        verdict = "meets" if figures["API searches: median"] < 50 else "misses"
        print(
            f"API search median {figures['API searches: median']:.2f} ms {verdict} the 50 ms goal."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

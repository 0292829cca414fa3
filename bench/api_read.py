"""``python -m bench.api_read``: API read cost of a slot with 10,000 messages against one with 100.

Both slots are read through the whole stack (WSGI handler, token authentication,
serialization) in one run, interleaved: the buffer (``GET /api/slots/{id}/buffer/``)
and a page of raw messages (the newest page, the first page, and a page from the
middle reached by cursor). The buffer is an indexed read after the pointer and a
page is a keyset query on ``(slot, seq)``, so neither should depend on the
history's length: the target is a ratio under 1.3. Results go to
``bench/results/api_read.md``. Uses a throwaway test database (``DATABASE_URL``
picks the engine).
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SIZES = (100, 10_000)
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "300"))
TARGET = 1.3
RESULTS = Path(__file__).resolve().parent / "results" / "api_read.md"


def setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ.setdefault("API_THROTTLE_USER", "none")  # the benchmark measures reads, not limits
    import django

    django.setup()


def seed(size: int, user_id: str) -> int:
    """A slot of ``size`` alternating messages, stored through the storage, as an app would."""
    from agent_squad.types import ConversationMessage

    import squad_memory
    from squad_memory.models import Slot

    storage = squad_memory.get_storage()
    batch = [
        ConversationMessage(
            role="user" if i % 2 == 0 else "assistant",
            content=[{"text": f"message {i}: " + "lorem ipsum dolor sit amet " * 4}],
        )
        for i in range(size)
    ]
    for start in range(0, size, 500):
        chunk = batch[start : start + 500]
        storage.save_chat_messages_sync(user_id, f"bench-{size}", "agent", chunk)
    return Slot.objects.get(user_id=user_id, session_id=f"bench-{size}").pk


def requests_for(client: Any, slot_id: int, middle_cursor: str) -> dict[str, Callable[[], Any]]:
    base = f"/api/slots/{slot_id}"
    return {
        "buffer": lambda: client.get(f"{base}/buffer/"),
        "newest page": lambda: client.get(f"{base}/messages/?ordering=-seq&page_size=50"),
        "first page": lambda: client.get(f"{base}/messages/?page_size=50"),
        "middle page": lambda: client.get(f"{base}/messages/?page_size=50&cursor={middle_cursor}"),
    }


def middle_cursor(size: int) -> str:
    """The cursor of the page starting at the middle of the history (as a client gets it)."""
    from base64 import b64encode
    from urllib.parse import quote

    return quote(b64encode(f"p={size // 2}".encode()).decode())


def measure(calls: dict[int, dict[str, Callable[[], Any]]]) -> dict[int, dict[str, list[float]]]:
    times: dict[int, dict[str, list[float]]] = {s: {n: [] for n in calls[s]} for s in calls}
    for _ in range(ROUNDS):
        for size in SIZES:  # interleaved, so drift hits both slots alike
            for name, call in calls[size].items():
                start = time.perf_counter()
                response = call()
                times[size][name].append(time.perf_counter() - start)
                assert response.status_code == 200, response.content[:300]
    return times


def run() -> tuple[dict[int, dict[str, float]], dict[str, Any]]:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from rest_framework.authtoken.models import Token

    user = User.objects.create_user("bench")
    token = Token.objects.create(user=user)
    client = Client(HTTP_AUTHORIZATION=f"Token {token.key}")
    slots = {size: seed(size, str(user.pk)) for size in SIZES}
    if connection.vendor == "postgresql":
        # What autovacuum does soon after a bulk load in a live database: fresh statistics,
        # without which the planner may not pick the (slot, seq) index for a new table.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    calls = {size: requests_for(client, slots[size], middle_cursor(size)) for size in SIZES}
    for size in SIZES:  # warm up: the first buffer read activates and compresses the buffer
        for call in calls[size].values():
            call()
    times = measure(calls)
    medians = {s: {n: statistics.median(v) * 1000 for n, v in times[s].items()} for s in SIZES}
    info = {"database": connection.vendor, "rounds": ROUNDS}
    return medians, info


def report(medians: dict[int, dict[str, float]], info: dict[str, Any]) -> str:
    small, big = SIZES
    lines = [
        "# API read cost: 10,000 raw messages against 100",
        "",
        f"Database: {info['database']}; Python {platform.python_version()} on "
        f"{platform.machine()}; {info['rounds']} interleaved rounds; median per request, "
        "through the WSGI handler with token authentication.",
        "",
        f"| request | {small:,} messages (ms) | {big:,} messages (ms) | ratio |",
        "|---|---:|---:|---:|",
    ]
    for name in medians[small]:
        a, b = medians[small][name], medians[big][name]
        lines.append(f"| {name} | {a:.2f} | {b:.2f} | {b / a:.2f} |")
    combined = ratio(medians)
    verdict = "meets" if combined < TARGET else "MISSES"
    lines += [
        "",
        f"Buffer plus newest page: ratio **{combined:.2f}** ({verdict} the target < {TARGET}).",
        "",
        "Reproduce: `.venv/bin/python -m bench.api_read` "
        "(`DATABASE_URL=postgres://...` for PostgreSQL; `BENCH_ROUNDS=` to change the rounds).",
        "",
    ]
    return "\n".join(lines)


def ratio(medians: dict[int, dict[str, float]]) -> float:
    small, big = SIZES
    pair = ("buffer", "newest page")
    return sum(medians[big][n] for n in pair) / sum(medians[small][n] for n in pair)


def main() -> int:
    setup_django()
    from django.db import connection
    from django.test.utils import setup_test_environment, teardown_test_environment

    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        medians, info = run()
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
        teardown_test_environment()
    text = report(medians, info)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text, encoding="utf-8")
    print(text)
    print(f"ratio {ratio(medians):.2f} (target < {TARGET}); written to {RESULTS}")
    return 0 if ratio(medians) < TARGET else 1


if __name__ == "__main__":
    sys.exit(main())

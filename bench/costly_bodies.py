"""``python -m bench.costly_bodies``: what a posted batch at the API's size limit costs the server.

Each body is ``MAX_BATCH_SIZE`` messages of ``MAX_MESSAGE_BYTES`` of compact JSON, posted
through the whole stack (WSGI handler, token authentication, parsing, validation, the
save, the echoed answer), and timed in CPU seconds of the process. The floor is the same
size as one plain text block per message; the others fill the same bytes with many tiny
content blocks, many tiny citations, one block holding a long list, or, at
``MAX_CONTENT_BLOCKS`` and ``MAX_CITATIONS``, as many as a message may hold. A body over
a bound is refused (``400``) before anything costly. Results go to
``bench/results/costly_bodies.md``. Uses a throwaway test database (``DATABASE_URL`` picks
the engine).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
RESULTS = Path(__file__).resolve().parent / "results" / "costly_bodies.md"


def setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    os.environ.setdefault("API_THROTTLE_USER", "none")  # the benchmark measures bodies, not limits
    import django

    django.setup()


def fill(make: Callable[[int], dict[str, Any]], size: int) -> dict[str, Any]:
    """The largest ``make(n)`` message of at most ``size`` bytes of compact JSON."""
    from squad_memory.rules import json_size

    low, high = 1, size
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if json_size(make(middle)) <= size else (low, middle - 1)
    return make(low)


def messages() -> dict[str, Callable[[int], dict[str, Any]]]:
    """How each body fills a message: ``n`` is a length or a count."""
    from squad_memory.conf import DEFAULTS

    blocks = DEFAULTS.get("MAX_CONTENT_BLOCKS", 100)
    citations = DEFAULTS.get("MAX_CITATIONS", 100)
    return {
        "plain text (the floor)": lambda n: {"role": "user", "content": [{"text": "a" * n}]},
        "tiny blocks, as many as fit": lambda n: {"role": "user", "content": [{"x": 0}] * n},
        "tiny citations, as many as fit": lambda n: {
            "role": "user",
            "content": [{"text": "a"}],
            "citations": [0] * n,
        },
        "one block holding a list of tiny items": lambda n: {
            "role": "user",
            "content": [{"x": [0] * n}],
        },
        f"{blocks} blocks (MAX_CONTENT_BLOCKS)": lambda n: {
            "role": "user",
            "content": [{"text": "a" * (n // blocks)}] * blocks,
        },
        f"{citations} citations (MAX_CITATIONS)": lambda n: {
            "role": "user",
            "content": [{"text": "a"}],
            "citations": [{"text": "a" * (n // citations)}] * citations,
        },
    }


def bodies() -> dict[str, bytes]:
    from squad_memory.conf import app_settings

    size, count = app_settings.max_message_bytes, app_settings.max_batch_size
    result = {}
    for name, make in messages().items():
        message = fill(make, size)
        batch = {"session_id": "bench", "agent_id": "agent", "messages": [message] * count}
        result[name] = json.dumps(batch, separators=(",", ":")).encode()
    return result


def run() -> dict[str, tuple[int, int, float]]:
    from django.contrib.auth.models import Permission, User
    from django.test import Client
    from rest_framework.authtoken.models import Token

    user = User.objects.create_user("bench")
    user.user_permissions.add(Permission.objects.get(codename="add_message"))
    client = Client(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    figures = {}
    for name, body in bodies().items():
        times, status = [], 0
        for _ in range(ROUNDS):
            started = time.process_time()
            response = client.post("/api/slots/messages/", body, content_type="application/json")
            times.append(time.process_time() - started)
            status = response.status_code
        figures[name] = (len(body), status, statistics.median(times))
    return figures


def report(figures: dict[str, tuple[int, int, float]], database: str) -> str:
    floor = next(iter(figures.values()))[2]
    lines = [
        "# What a posted batch at the size limit costs",
        "",
        f"Database: {database}; Python {platform.python_version()} on {platform.machine()}; "
        f"median CPU seconds of {ROUNDS} posts, through the WSGI handler with token "
        "authentication.",
        "",
        "| body | bytes | status | CPU (s) | ratio to plain text |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, (size, status, seconds) in figures.items():
        lines.append(f"| {name} | {size:,} | {status} | {seconds:.2f} | {seconds / floor:.2f} |")
    lines += ["", "Reproduce: `.venv/bin/python -m bench.costly_bodies`.", ""]
    return "\n".join(lines)


def main() -> int:
    setup_django()
    from django.db import connection
    from django.test.utils import setup_test_environment, teardown_test_environment

    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        figures = run()
        database = connection.vendor
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
        teardown_test_environment()
    text = report(figures, database)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

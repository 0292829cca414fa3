"""``python -m bench.api_cost [--bodies]``: what the API's requests cost the server in CPU.

Both measures run in one process on a throwaway test database (``DATABASE_URL`` picks the
engine; SQLite by default), through Django's test client (DEBUG off, throttles off), and
time each request with ``time.process_time``; ``BENCH_ROUNDS`` sets the rounds.

**The API against plain DRF** (300 rounds by default): each request of the API next to
its **floor**, a plain DRF view on the same rows: token authentication,
``IsAuthenticated``, a ``ModelSerializer``, DRF's own pagination. Rounds interleave the
requests, so drift hits all alike; the table gives the median CPU per request and the
API's ratio to its floor (the target is at most 2).

- post a turn: ``POST /api/slots/messages/`` of two messages, against a view that
  validates the two with a serializer, inserts two rows and answers 201 with them;
- the reads a frontend polls: a slot's buffer, its newest page of messages and the
  sessions list, against a list view of the same rows (the buffer's messages, a page of
  messages, the user's slots).

**Costly bodies** (``--bodies``, 3 rounds by default): what a posted batch at the API's
size limit costs. Each body is ``MAX_BATCH_SIZE`` messages of ``MAX_MESSAGE_BYTES`` of
compact JSON, posted through the whole stack (WSGI handler, token authentication,
parsing, validation, the save, the echoed answer). The floor is the same size as one plain
text block per message; the others fill the same bytes with many tiny content blocks, many
tiny citations, one block holding a long list, or, at ``MAX_CONTENT_BLOCKS`` and
``MAX_CITATIONS``, as many as a message may hold. A body over a bound is refused (``400``)
before anything costly. Results go to ``bench/results/costly_bodies.md``.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TARGET = 2.0
TURN = [
    {"role": "user", "content": [{"text": "What is the weather like in Lisbon today?"}]},
    {"role": "assistant", "content": [{"text": "Sunny, 24 degrees, a light wind from the sea."}]},
]
RESULTS = Path(__file__).resolve().parent / "results" / "costly_bodies.md"
urlpatterns: list[Any] = []  # the floor's views and the project's, filled by floor_urls()


def medians(calls: dict[Any, Callable[[], Any]], n: int) -> dict[Any, tuple[float, int]]:
    """The median CPU seconds of each call over ``n`` rounds that interleave them (so drift
    hits all alike), and the status of its last response."""
    times: dict[Any, list[float]] = {key: [] for key in calls}
    status: dict[Any, int] = {}
    for _ in range(n):
        for key, call in calls.items():
            started = time.process_time()
            status[key] = call().status_code
            times[key].append(time.process_time() - started)
    return {key: (statistics.median(times[key]), status[key]) for key in calls}


def api_client() -> tuple[Any, Any]:
    """A user who may post messages, and a test client authenticated with their token."""
    from django.contrib.auth.models import Permission, User
    from django.test import Client
    from rest_framework.authtoken.models import Token

    user = User.objects.create_user("bench")
    user.user_permissions.add(Permission.objects.get(codename="add_message"))
    return user, Client(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")


# -- the API against plain DRF -------------------------------------------------------------
def floor_urls(slot_id: int, post_slot_id: int) -> list[Any]:
    """Plain DRF views over ``slot_id``'s rows (posts go to ``post_slot_id``'s), the way a
    DRF tutorial writes them."""
    from django.urls import include, path
    from rest_framework import generics, pagination, serializers, status
    from rest_framework.response import Response

    from squad_memory.models import Message, Slot

    seqs = itertools.count(1_000_000)

    class MessageSerializer(serializers.ModelSerializer[Message]):
        class Meta:
            model = Message
            fields = ["seq", "role", "content", "citations", "timestamp"]
            read_only_fields = ["seq", "timestamp"]

        def create(self, validated_data: dict[str, Any]) -> Message:
            return super().create({**validated_data, "seq": next(seqs)})

    class SlotSerializer(serializers.ModelSerializer[Slot]):
        class Meta:
            model = Slot
            fields = ["id", "session_id", "agent_id", "last_seq", "updated_at"]

    class Page(pagination.CursorPagination):
        ordering = "-seq"
        page_size = 50

    class Post(generics.CreateAPIView[Message]):
        serializer_class = MessageSerializer

        def create(self, request: Any, *args: Any, **kwargs: Any) -> Response:
            serializer = self.get_serializer(data=request.data["messages"], many=True)
            serializer.is_valid(raise_exception=True)
            serializer.save(slot_id=post_slot_id, timestamp=int(time.time() * 1000))
            return Response(serializer.data, status=status.HTTP_201_CREATED)

    class Messages(generics.ListAPIView[Message]):
        serializer_class = MessageSerializer
        pagination_class = Page
        queryset = Message.objects.filter(slot_id=slot_id)

    class Buffer(Messages):
        pagination_class = None

        def get_queryset(self) -> Any:
            slot = Slot.objects.get(pk=slot_id)
            return super().get_queryset().filter(seq__gt=slot.covered_seq).order_by("seq")

    class Slots(generics.ListAPIView[Slot]):
        serializer_class = SlotSerializer

        def get_queryset(self) -> Any:
            return Slot.objects.filter(user_id=str(self.request.user.pk)).order_by("-updated_at")

    return [
        path("floor/post/", Post.as_view()),
        path("floor/buffer/", Buffer.as_view()),
        path("floor/messages/", Messages.as_view()),
        path("floor/slots/", Slots.as_view()),
        path("", include("project.urls")),
    ]


def requests(client: Any, slot: Any) -> dict[tuple[str, str], Callable[[], Any]]:
    """Each request of the API and its floor's, by (request, "API" or "floor")."""
    turn = {"session_id": "posts", "agent_id": slot.agent_id, "messages": TURN}
    post = functools.partial(client.post, data=turn, content_type="application/json")
    api = f"/api/slots/{slot.pk}"
    urls = {
        "post a turn": ("/api/slots/messages/", "/floor/post/"),
        "buffer": (f"{api}/buffer/", "/floor/buffer/"),
        "messages page": (f"{api}/messages/?ordering=-seq", "/floor/messages/"),
        "sessions list": ("/api/sessions/", "/floor/slots/"),
    }
    return {
        (name, side): functools.partial(post if name == "post a turn" else client.get, url)
        for name, both in urls.items()
        for side, url in zip(("API", "floor"), both, strict=True)
    }


def against_drf(database: str) -> int:
    """The API's requests against their floors: prints the table, 1 if a ratio is over
    :data:`TARGET`."""
    from django.test.utils import override_settings

    import squad_memory

    user, client = api_client()
    storage = squad_memory.get_storage()
    for session in range(20):  # a sidebar's worth of sessions, the last one the polled slot
        for _ in range(15):  # 30 messages each: the buffer is active
            storage.save_chat_messages_sync(str(user.pk), f"s{session}", "agent", TURN)
    slots = squad_memory.models.Slot.objects.filter(user_id=str(user.pk))
    slot = slots.get(session_id="s19")
    post_slot = slots.create(user_id="floor", session_id="floor", agent_id="floor")
    urlpatterns[:] = floor_urls(slot.pk, post_slot.pk)
    calls, n = requests(client, slot), int(os.environ.get("BENCH_ROUNDS", 300))
    with override_settings(ROOT_URLCONF=__name__):
        for call in calls.values():  # warm up (the first read may compress)
            call()
        found = medians(calls, n)
    failed = {key: status for key, (_, status) in found.items() if status not in (200, 201)}
    assert not failed, failed
    print(f"API CPU per request against plain DRF ({database}, median of {n}):")
    print(f"{'request':<16}{'API ms':>9}{'floor ms':>10}{'ratio':>8}")
    worst = 0.0
    for name in dict.fromkeys(name for name, _ in calls):
        api_s, floor_s = found[name, "API"][0], found[name, "floor"][0]
        worst = max(worst, api_s / floor_s)
        print(f"{name:<16}{api_s * 1000:>9.2f}{floor_s * 1000:>10.2f}{api_s / floor_s:>8.2f}")
    print(f"worst ratio {worst:.2f} (target at most {TARGET})")
    return 0 if worst <= TARGET else 1


# -- costly bodies --------------------------------------------------------------------------
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
    from squad_memory.conf import app_settings

    blocks, citations = app_settings.max_content_blocks, app_settings.max_citations

    def user(content: list[Any], **citations: Any) -> dict[str, Any]:
        return {"role": "user", "content": content, **citations}

    return {
        "plain text (the floor)": lambda n: user([{"text": "a" * n}]),
        "tiny blocks, as many as fit": lambda n: user([{"x": 0}] * n),
        "tiny citations, as many as fit": lambda n: user([{"text": "a"}], citations=[0] * n),
        "one block holding a list of tiny items": lambda n: user([{"x": [0] * n}]),
        f"{blocks} blocks (MAX_CONTENT_BLOCKS)": lambda n: user(
            [{"text": "a" * (n // blocks)}] * blocks
        ),
        f"{citations} citations (MAX_CITATIONS)": lambda n: user(
            [{"text": "a"}], citations=[{"text": "a" * (n // citations)}] * citations
        ),
    }


def costly_bodies(database: str) -> int:
    """Each body posted in rounds (3 by default): writes and prints the table."""
    from squad_memory.conf import app_settings

    size, count = app_settings.max_message_bytes, app_settings.max_batch_size
    _, client = api_client()
    post = functools.partial(client.post, "/api/slots/messages/", content_type="application/json")
    calls, sizes, n = {}, {}, int(os.environ.get("BENCH_ROUNDS", 3))
    for name, make in messages().items():
        batch = {"session_id": "bench", "agent_id": "agent", "messages": [fill(make, size)] * count}
        body = json.dumps(batch, separators=(",", ":")).encode()
        calls[name], sizes[name] = functools.partial(post, data=body), len(body)
    found = medians(calls, n)
    floor = found["plain text (the floor)"][0]
    lines = [
        "# What a posted batch at the size limit costs",
        "",
        f"Database: {database}; Python {platform.python_version()} on {platform.machine()}; "
        f"median CPU seconds of {n} posts, through the WSGI handler with token "
        "authentication.",
        "",
        "| body | bytes | status | CPU (s) | ratio to plain text |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {name} | {sizes[name]:,} | {status} | {cpu:.2f} | {cpu / floor:.2f} |"
            for name, (cpu, status) in found.items()
        ),
        "",
        "Reproduce: `.venv/bin/python -m bench.api_cost --bodies`.",
        "",
    ]
    RESULTS.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.api_cost", description=__doc__)
    parser.add_argument("--bodies", action="store_true", help="the costly bodies instead")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    for scope in ("ANON", "USER", "COMPRESS", "SEARCH", "AUTH_FAILURES"):
        os.environ[f"API_THROTTLE_{scope}"] = "none"
    import django

    django.setup()
    from django.db import connection
    from django.test.utils import setup_test_environment

    setup_test_environment(debug=False)
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        return (costly_bodies if args.bodies else against_drf)(connection.vendor)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    sys.exit(main())

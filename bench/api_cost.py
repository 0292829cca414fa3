"""``python -m bench.api_cost``: the API's CPU per request against plain DRF doing the same work.

In one process, through Django's test client (DEBUG off, throttles off), each request of
the API is timed with ``time.process_time`` next to its **floor**, a plain DRF view on the
same rows: token authentication, ``IsAuthenticated``, a ``ModelSerializer``, DRF's own
pagination. Rounds interleave the requests, so drift hits all alike; the table gives the
median CPU per request and the API's ratio to its floor (the target is at most 2).

- post a turn: ``POST /api/slots/messages/`` of two messages, against a view that
  validates the two with a serializer, inserts two rows and answers 201 with them;
- the reads a frontend polls: a slot's buffer, its newest page of messages and the
  sessions list, against a list view of the same rows (the buffer's messages, a page of
  messages, the user's slots).

Uses a throwaway test database (``DATABASE_URL`` picks the engine; SQLite by default).
``BENCH_ROUNDS`` sets the rounds (default 300).
"""

from __future__ import annotations

import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "300"))
TARGET = 2.0
TURN = [
    {"role": "user", "content": [{"text": "What is the weather like in Lisbon today?"}]},
    {"role": "assistant", "content": [{"text": "Sunny, 24 degrees, a light wind from the sea."}]},
]
urlpatterns: list[Any] = []  # the floor's views and the project's, filled by floor_urls()


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
            stamp = int(time.time() * 1000)
            serializer.save(slot_id=post_slot_id, timestamp=stamp)
            return Response(serializer.data, status=status.HTTP_201_CREATED)

    class Messages(generics.ListAPIView[Message]):
        serializer_class = MessageSerializer
        pagination_class = Page

        def get_queryset(self) -> Any:
            return Message.objects.filter(slot_id=slot_id)

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


def pairs(client: Any, slot: Any) -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """Each request of the API with its floor's, as ``(api, floor)`` calls."""
    turn = {"session_id": "posts", "agent_id": slot.agent_id, "messages": TURN}

    def post(url: str) -> Callable[[], Any]:
        return lambda: client.post(url, turn, content_type="application/json")

    def get(url: str) -> Callable[[], Any]:
        return lambda: client.get(url)

    api = f"/api/slots/{slot.pk}"
    return {
        "post a turn": (post("/api/slots/messages/"), post("/floor/post/")),
        "buffer": (get(f"{api}/buffer/"), get("/floor/buffer/")),
        "messages page": (get(f"{api}/messages/?ordering=-seq"), get("/floor/messages/")),
        "sessions list": (get("/api/sessions/"), get("/floor/slots/")),
    }


def measure(calls: dict[str, tuple[Callable[[], Any], Callable[[], Any]]]) -> dict[str, Any]:
    """Median CPU milliseconds of each side of each pair over ``ROUNDS`` interleaved rounds."""
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in calls}
    for _ in range(ROUNDS):
        for name, sides in calls.items():
            for side, call in enumerate(sides):
                start = time.process_time()
                response = call()
                times[name][side].append(time.process_time() - start)
                assert response.status_code in (200, 201), (name, side, response.content[:300])
    return {
        name: tuple(statistics.median(side) * 1000 for side in sides)
        for name, sides in times.items()
    }


def run() -> dict[str, Any]:
    from django.contrib.auth.models import Permission, User
    from django.test import Client
    from rest_framework.authtoken.models import Token

    import squad_memory

    user = User.objects.create_user("bench")
    user.user_permissions.add(Permission.objects.get(codename="add_message"))  # may post
    client = Client(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    storage = squad_memory.get_storage()
    for session in range(20):  # a sidebar's worth of sessions, the last one the polled slot
        for _ in range(15):  # 30 messages each: the buffer is active
            storage.save_chat_messages_sync(str(user.pk), f"s{session}", "agent", TURN)
    slots = squad_memory.models.Slot.objects.filter(user_id=str(user.pk))
    slot = slots.get(session_id="s19")
    post_slot = slots.create(user_id="floor", session_id="floor", agent_id="floor")
    urlpatterns[:] = floor_urls(slot.pk, post_slot.pk)
    calls = pairs(client, slot)
    for api, floor in calls.values():  # warm up (the first read may compress)
        api(), floor()
    return measure(calls)


def report(medians: dict[str, Any], database: str) -> str:
    lines = [
        f"API CPU per request against plain DRF ({database}, median of {ROUNDS}):",
        f"{'request':<16}{'API ms':>9}{'floor ms':>10}{'ratio':>8}",
    ]
    for name, (api, floor) in medians.items():
        lines.append(f"{name:<16}{api:>9.2f}{floor:>10.2f}{api / floor:>8.2f}")
    return "\n".join(lines)


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    for scope in ("ANON", "USER", "COMPRESS", "SEARCH", "AUTH_FAILURES"):
        os.environ[f"API_THROTTLE_{scope}"] = "none"
    import django

    django.setup()
    from django.db import connection
    from django.test.utils import override_settings, setup_test_environment

    setup_test_environment(debug=False)
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        with override_settings(ROOT_URLCONF=__name__):
            medians = run()
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    print(report(medians, connection.vendor))
    worst = max(api / floor for api, floor in medians.values())
    print(f"worst ratio {worst:.2f} (target at most {TARGET})")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())

"""A primary/replica router: every read a save or a compression depends on goes to the primary."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Iterator
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections
from django.test import override_settings
from django.utils import timezone

from squad_memory.models import Compression, Message, Slot
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
from tests.conftest import msg, texts

# Transactional: the replica's connection sees the primary's committed rows only.
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True, databases=["default", "replica"]),
    pytest.mark.prepared,
]

THREADS, SAVES = 8, 15


@pytest.fixture(autouse=True)
def _close_replica() -> Iterator[None]:
    """The test database is dropped at the end: no connection of this thread may stay open."""
    yield
    connections["replica"].close()


class PrimaryReplicaRouter:
    """Django's multiple-databases pattern: reads to the replica, writes to the primary.

    Records every read it sends to the replica, with the squad_memory frames that asked.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.replica_reads: list[str] = []

    def db_for_read(self, model: type[Any], **hints: Any) -> str:
        frames = [
            f"{f.filename.rsplit('squad_memory/', 1)[-1]}:{f.lineno} {f.name}"
            for f in traceback.extract_stack()
            if "/squad_memory/" in f.filename and "/tests/" not in f.filename
        ]
        with self.lock:
            self.replica_reads.append(f"{model.__name__} <- {' <- '.join(reversed(frames))}")
        return "replica"

    def db_for_write(self, model: type[Any], **hints: Any) -> str:
        return "default"

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return db == "default"


def storage() -> SummarizingChatStorage:
    return SummarizingChatStorage(
        DjangoChatStorage(), "squad_memory.summarizers.offline.summarize", trigger_at=3, keep_last=1
    )


def activate(store: SummarizingChatStorage) -> None:
    """A long history, then a fetch: the buffer is active, so crossing saves compress."""
    store.save_chat_messages_sync("u", "s", "shared", [msg("user", "q"), msg("assistant", "a")] * 4)
    store.fetch_chat_sync("u", "s", "shared")


def save_from_threads(store: SummarizingChatStorage) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def writer(n: int) -> None:
        try:
            start.wait()
            for i in range(SAVES):
                pair = [msg("user", f"w{n}:{i}:q"), msg("assistant", f"w{n}:{i}:a")]
                store.save_chat_messages_sync("u", "s", "shared", pair)
        except BaseException as exc:  # reported by the test
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return errors


def test_concurrent_saves_and_compressions_read_nothing_from_the_replica() -> None:
    router, store = PrimaryReplicaRouter(), storage()
    with override_settings(DATABASE_ROUTERS=[router]):
        activate(store)
        errors = save_from_threads(store)
        fetched = store.fetch_chat_sync("u", "s", "shared")
        merged = store.fetch_all_chats_sync("u", "s")
    assert errors == []
    assert router.replica_reads == [], "\n".join(sorted(set(router.replica_reads)))

    slot = Slot.objects.get(agent_id="shared")
    seqs = list(Message.objects.filter(slot=slot).order_by("seq").values_list("seq", flat=True))
    stored = list(Message.objects.filter(slot=slot).values_list("content", flat=True))
    assert seqs == list(range(1, 8 + THREADS * SAVES * 2 + 1)) and slot.last_seq == len(seqs)
    written = [c[0]["text"] for c in stored if c[0]["text"].startswith("w")]
    assert len(set(written)) == len(written) == THREADS * SAVES * 2, "a message was lost or doubled"
    assert Compression.objects.filter(slot=slot, outcome="applied", trigger="save").count() >= 3
    assert slot.active and fetched and len(merged) == len(seqs)
    assert texts(fetched)[-1] == texts(merged)[-1].removeprefix("[shared] ")


def test_display_reads_may_use_the_replica() -> None:
    """The router is live in these tests: a plain read with no alias goes to the replica."""
    router = PrimaryReplicaRouter()
    with override_settings(DATABASE_ROUTERS=[router]):
        assert Slot.objects.count() == 0
    assert router.replica_reads and router.replica_reads[0].startswith("Slot")


@pytest.fixture
def lagging_replica(transactional_db: None) -> Iterator[Callable[[], None]]:
    """``freeze()``: from then on the replica alias sees the database as it was then, as a
    replica that never catches up (a REPEATABLE READ snapshot held open). Ended before the
    test database is flushed (this fixture depends on ``transactional_db``)."""
    replica = connections["replica"]

    def freeze() -> None:
        replica.ensure_connection()
        replica.set_autocommit(False)
        with replica.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cursor.execute("SELECT count(*) FROM squad_memory_slot")

    yield freeze
    if not replica.get_autocommit():
        replica.rollback()
        replica.set_autocommit(True)
    replica.close()


def own_replica_reads(router: PrimaryReplicaRouter) -> list[str]:
    """The reads squad_memory's code sent to the replica (a test's own reads name no frame)."""
    return [read for read in router.replica_reads if "<- " in read]


def test_forget_deletes_on_the_primary_what_the_replica_does_not_see_yet(
    lagging_replica: Callable[[], None],
) -> None:
    router = PrimaryReplicaRouter()
    lagging_replica()
    for i in range(25):
        DjangoChatStorage().save_chat_messages_sync(
            "U", f"s{i}", "a", [msg("user", "q"), msg("assistant", "a")]
        )
    DjangoChatStorage().save_chat_messages_sync("V", "s0", "a", [msg("user", "kept")])
    assert not Slot.objects.using("replica").exists()  # the replica lags
    out = StringIO()
    with override_settings(DATABASE_ROUTERS=[router]):
        call_command("squad_memory_forget", "--user", "U", stdout=out, stderr=StringIO())
    assert f"{Slot._meta.db_table}: 25" in out.getvalue()
    assert f"{Message._meta.db_table}: 50" in out.getvalue()
    assert list(Slot.objects.using("default").values_list("user_id", flat=True)) == ["V"]
    assert Message.objects.using("default").count() == 1
    assert own_replica_reads(router) == [], "\n".join(own_replica_reads(router))


def test_purge_judges_idleness_on_the_primary(
    lagging_replica: Callable[[], None], settings: Any
) -> None:
    settings.SQUAD_MEMORY = {"RETAIN_DAYS": 7}
    store, long_ago = DjangoChatStorage(), timezone.now() - timedelta(days=10)
    for session in ("active", "idle"):
        store.save_chat_messages_sync("U", session, "a", [msg("user", "q")])
    Slot.objects.using("default").update(updated_at=long_ago)
    lagging_replica()  # the replica sees both slots idle for ten days
    store.save_chat_messages_sync("U", "active", "a", [msg("assistant", "today")])
    store.save_chat_messages_sync("U", "unseen", "a", [msg("user", "q")])
    Slot.objects.using("default").filter(session_id="unseen").update(updated_at=long_ago)
    router, out = PrimaryReplicaRouter(), StringIO()
    with override_settings(DATABASE_ROUTERS=[router]):
        call_command("squad_memory_purge", stdout=out, stderr=StringIO())
    assert list(Slot.objects.using("default").values_list("session_id", flat=True)) == ["active"]
    assert Message.objects.using("default").count() == 2
    assert f"{Slot._meta.db_table}: 2" in out.getvalue()
    assert own_replica_reads(router) == [], "\n".join(own_replica_reads(router))

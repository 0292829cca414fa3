"""Async callers never wait on each other (``squad_memory.threads``): database calls on a
database thread outside a Django request, the caller's thread inside one or below
``async_to_sync``, summarizers never on a database thread, connections bounded and healed."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from agent_squad.types import ConversationMessage
from asgiref.local import Local
from asgiref.sync import ThreadSensitiveContext, async_to_sync
from django.db import OperationalError, connection, connections, transaction
from django.test import override_settings

from squad_memory import threads
from squad_memory.exceptions import DatabaseCallTimeout, SlotLocked
from squad_memory.models import Compression, Message, Slot
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
from squad_memory.threads import Threads, close_database_threads, database, for_slot
from tests import summarizers
from tests.conftest import msg, texts
from tests.processes import wait_for

# Database threads serve other connections than the test's: every test commits for real.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.prepared]

SLOW = ("u", "s", "slow")


@pytest.fixture(autouse=True)
def _fresh_threads() -> Iterator[None]:
    yield
    close_database_threads()


def primed(summarizer: Any) -> SummarizingChatStorage:
    """A storage whose slot SLOW is active and one saved message short of a compression."""
    storage = SummarizingChatStorage(DjangoChatStorage(), summarizer, trigger_at=2, keep_last=1)
    primer = SummarizingChatStorage(DjangoChatStorage(), summarizers.fold, 2, 1)
    for i in range(3):
        primer.save_chat_messages_sync(*SLOW, [msg("user", f"q{i}"), msg("assistant", f"a{i}")])
    primer.fetch_chat_sync(*SLOW)  # activates: [summary, q2, a2]
    primer.save_chat_message_sync(*SLOW, msg("user", "q3"))
    return storage


def primed_on_its_thread(summarizer: Any) -> SummarizingChatStorage:
    """:func:`primed`, on a thread that ends after it (``asyncio.to_thread``): the thread's
    connection closes here, as nothing else would close it (it outlives the thread until the
    garbage collector finds it, or until the process ends)."""
    try:
        return primed(summarizer)
    finally:
        connection.close()


async def others_turns(storage: SummarizingChatStorage, count: int) -> None:
    """Turns of other conversations, each one fetch and one save."""
    for i in range(count):
        await storage.fetch_chat("u", "s", f"other{i}")
        await storage.save_chat_message("u", "s", f"other{i}", msg("user", "hello"))


def test_no_conversation_waits_on_a_sync_summary() -> None:
    gate = summarizers.Gate()
    storage = primed(gate)

    async def main() -> list[ConversationMessage]:
        slow = asyncio.create_task(storage.save_chat_message(*SLOW, msg("assistant", "a3")))
        assert await asyncio.to_thread(gate.entered.wait, 10), "no compression started"
        await others_turns(storage, 5)  # while the summary runs, on the one database thread
        assert not slow.done()
        gate.release.set()
        return await slow

    with override_settings(SQUAD_MEMORY={"DATABASE_THREADS": 1}):
        answer = asyncio.run(main())
    assert texts(answer) == ["S(S(q0+a0+q1+a1)+q2+a2)", "q3", "a3"]  # inline: compressed
    assert Message.objects.filter(slot__agent_id__startswith="other").count() == 5


def test_a_sync_summarizer_runs_on_a_summarizer_thread_an_async_one_in_the_loop() -> None:
    seen: list[str] = []

    def sync(history: list[Any], keep_last: int) -> list[Any]:
        seen.append(threading.current_thread().name)
        return summarizers.fold(history, keep_last)

    async def asynchronous(history: list[Any], keep_last: int) -> list[Any]:
        seen.append(threading.current_thread().name)
        return summarizers.fold(history, keep_last)

    for summarizer in (sync, asynchronous):
        Slot.objects.all().delete()
        storage = primed(summarizer)
        asyncio.run(storage.save_chat_message(*SLOW, msg("assistant", "a3")))
    assert seen[0].startswith("squad-memory-summarizer")
    assert seen[1] == threading.current_thread().name  # the loop's (asyncio.run's) thread


def test_no_conversation_waits_on_an_async_summary() -> None:
    async def main() -> list[ConversationMessage]:
        entered, release = asyncio.Event(), asyncio.Event()

        async def summarizer(history: list[Any], keep_last: int) -> list[Any]:
            entered.set()
            await release.wait()
            return summarizers.fold(history, keep_last)

        storage = await asyncio.to_thread(primed_on_its_thread, summarizer)
        slow = asyncio.create_task(storage.save_chat_message(*SLOW, msg("assistant", "a3")))
        await asyncio.wait_for(entered.wait(), 10)
        await others_turns(storage, 5)
        assert not slow.done()
        release.set()
        return await slow

    with override_settings(SQUAD_MEMORY={"DATABASE_THREADS": 1}):
        answer = asyncio.run(main())
    assert texts(answer) == ["S(S(q0+a0+q1+a1)+q2+a2)", "q3", "a3"]


def test_inside_a_request_or_below_a_sync_caller_the_callers_thread_serves() -> None:
    async def thread_name() -> str:
        return await database(lambda: threading.current_thread().name)

    async def in_request() -> str:
        async with ThreadSensitiveContext():
            return await thread_name()

    assert asyncio.run(thread_name()).startswith("squad-memory-db")
    assert not asyncio.run(in_request()).startswith("squad-memory-db")
    assert async_to_sync(thread_name)() == threading.current_thread().name


def test_below_a_sync_caller_a_save_is_part_of_its_transaction() -> None:
    storage = DjangoChatStorage()
    with transaction.atomic():
        async_to_sync(storage.save_chat_message)("u", "s", "a", msg("user", "kept?"))
        assert texts(storage.fetch_chat_sync("u", "s", "a")) == ["kept?"]
        transaction.set_rollback(True)
    assert not Message.objects.exists()


async def conversations(storage: Any, count: int, turns: int) -> None:
    async def one(n: int) -> None:
        for t in range(turns):
            await storage.fetch_chat("u", "s", f"c{n}")
            await storage.save_chat_messages(
                "u", "s", f"c{n}", [msg("user", f"q{t}"), msg("assistant", f"a{t}")]
            )

    await asyncio.gather(*(one(n) for n in range(count)))


def database_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("squad-memory-db")]


def test_closing_the_database_threads_stops_those_of_every_size_the_setting_had() -> None:
    """A changed ``DATABASE_THREADS`` starts a pool of the new size on the next call; the
    pool of the old size stops with the others when the threads are closed, and its
    connections with it (they kept the test database from being dropped)."""

    async def count() -> int:
        return await database(Slot.objects.count)

    assert asyncio.run(count()) == 0
    with override_settings(SQUAD_MEMORY={"DATABASE_THREADS": 1}):
        assert asyncio.run(count()) == 0
    started = database_threads()
    assert len(started) >= 2  # a thread of each pool
    close_database_threads()
    assert not any(thread.is_alive() for thread in started)


@pytest.mark.postgres  # SQLite's in-memory test database locks whole tables across threads
def test_forty_conversations_use_at_most_database_threads_threads() -> None:
    storage = SummarizingChatStorage(DjangoChatStorage(), summarizers.fold, 3, 1)
    for _ in range(3):  # new event loops do not add threads
        asyncio.run(conversations(storage, 40, 4))
    assert 1 < len(database_threads()) <= 20  # the default DATABASE_THREADS
    slots = Slot.objects.filter(agent_id__startswith="c")
    assert slots.count() == 40 and {s.last_seq for s in slots} == {24}


@contextlib.contextmanager
def connection_settings(**values: Any) -> Iterator[None]:
    """The default database's ``values`` (``CONN_MAX_AGE``...) for the block, served by
    database threads started in it (the threads' connections read them as they open)."""
    settings = connections.settings["default"]
    saved = {name: settings[name] for name in values}
    close_database_threads()  # each thread's connections closed under the settings they had
    settings.update(values)
    try:
        yield
    finally:
        close_database_threads()
        settings.update(saved)


@pytest.fixture
def persistent_connections(request: pytest.FixtureRequest) -> Iterator[None]:
    """Connections that outlive a call (``CONN_MAX_AGE = None``), as a deployment keeps them;
    ``CONN_HEALTH_CHECKS`` as the test's parameter says."""
    with connection_settings(CONN_MAX_AGE=None, CONN_HEALTH_CHECKS=request.param):
        yield


def backends() -> int:
    """Other sessions on the test database (the database threads')."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


def drop_connections(keep: int = 0) -> None:
    """What a restart, a failover or an idle timeout does to the other sessions (but the
    session ``keep``)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid <> %s",
            [keep],
        )
        assert cursor.fetchone()[0] > 0


@pytest.mark.postgres
@pytest.mark.parametrize("persistent_connections", [False], indirect=True)
def test_connections_stay_bounded_across_event_loops(persistent_connections: None) -> None:
    storage = SummarizingChatStorage(DjangoChatStorage(), summarizers.fold, 3, 1)
    others = backends()  # sessions of other threads of this process (earlier tests')
    asyncio.run(conversations(storage, 40, 3))
    first = backends() - others
    assert 1 < first <= 20
    for _ in range(2):
        asyncio.run(conversations(storage, 40, 3))
    # New event loops add none (an earlier test's thread may close its session meanwhile).
    assert backends() - others <= first


@pytest.mark.postgres
@pytest.mark.parametrize("persistent_connections", [False, True], indirect=True)
def test_a_dropped_connection_heals(
    persistent_connections: None, caplog: pytest.LogCaptureFixture
) -> None:
    storage = SummarizingChatStorage(DjangoChatStorage(), summarizers.fold, 3, 1)
    asyncio.run(conversations(storage, 4, 2))
    drop_connections()
    asyncio.run(conversations(storage, 4, 2))  # a fresh event loop

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        test_session = cursor.fetchone()[0]

    async def same_loop() -> None:
        await conversations(storage, 4, 1)
        await asyncio.to_thread(drop_connections_and_close, test_session)
        await conversations(storage, 4, 1)

    asyncio.run(same_loop())
    for slot in Slot.objects.filter(agent_id__startswith="c"):  # nothing lost or repeated
        rows = list(Message.objects.filter(slot=slot).order_by("seq").values_list("seq", "text"))
        assert [seq for seq, _ in rows] == list(range(1, 13))
        assert [text for _, text in rows] == [f"{r}{t}" for t in (0, 1, 0, 1, 0, 0) for r in "qa"]


@pytest.mark.postgres
def test_with_conn_max_age_0_a_call_leaves_no_connection_open() -> None:
    """Django's default: a connection per call, closed when the call ends, as at the end of a
    request (with Django's pool, it goes back to the pool then)."""
    with connection_settings(CONN_MAX_AGE=0):
        others = backends()
        storage = SummarizingChatStorage(DjangoChatStorage(), summarizers.fold, 3, 1)
        asyncio.run(conversations(storage, 4, 2))
        assert len(database_threads()) > 1
        # The calls' connections all closed as they ended (the server ends each session
        # a moment after its client closed it).
        wait_for(lambda: backends() <= others, 10, "the database threads' sessions to end")


def test_a_connection_whose_setup_failed_is_closed_after_the_call_as_django_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A connection can open and then fail its setup before Django announces it (a failing
    ``SET ROLE``): the call fails, and the check after it closes that connection as
    ``close_old_connections()`` would (CONN_MAX_AGE=0), not leaving it open on the thread."""
    wrapper = type(connections["default"])
    setup = wrapper.init_connection_state
    failures = [RuntimeError("the connection's setup failed")]

    def failing_once(self: Any) -> None:
        setup(self)
        if failures:
            raise failures.pop()

    monkeypatch.setattr(wrapper, "init_connection_state", failing_once)
    with connection_settings(CONN_MAX_AGE=0):
        with pytest.raises(RuntimeError, match="setup failed"):
            asyncio.run(database(Slot.objects.count))
        # The next call, on the same (the only) thread, finds no connection left open.
        assert asyncio.run(database(lambda: connections["default"].connection is None))
        assert asyncio.run(database(Slot.objects.count)) == 0


def drop_connections_and_close(keep: int) -> None:
    drop_connections(keep)
    connection.close()


def test_a_lone_caller_is_served_by_one_thread_and_threads_start_only_when_all_are_busy() -> None:
    finalized: list[str] = []
    pool = Threads(3, "lifo", finalizer=lambda: finalized.append(thread_name()))
    # One caller at a time: one thread serves every call, and no other starts.
    assert {pool.submit(thread_name).result(10) for _ in range(50)} == {"lifo_0"}
    assert [t.name for t in threading.enumerate() if t.name.startswith("lifo_")] == ["lifo_0"]
    held = threading.Barrier(4)  # three calls at once: all three threads
    burst = [pool.submit(lambda: (held.wait(10), thread_name())[1]) for _ in range(3)]
    waiting = pool.submit(thread_name)  # all busy and none more allowed: it waits its turn
    held.wait(10)
    assert {f.result(10) for f in burst} == {"lifo_0", "lifo_1", "lifo_2"}
    assert waiting.result(10).startswith("lifo_")
    # One caller at a time again: the thread idle last serves every call.
    assert len({pool.submit(thread_name).result(10) for _ in range(50)}) == 1
    with pytest.raises(ValueError):  # a call's error reaches its caller
        pool.submit(int, "not a number").result(10)
    pool.shutdown(timeout=10)
    assert sorted(finalized) == ["lifo_0", "lifo_1", "lifo_2"]  # each thread's finalizer ran
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(thread_name)


def thread_name() -> str:
    return threading.current_thread().name


def test_the_callers_context_goes_along_to_the_database_thread() -> None:
    """As Django's own ``sync_to_async``: context variables and asgiref ``Local``s (a
    router's tenant, the active language) set by the caller are seen by the call."""
    tenant, request_id = Local(), contextvars.ContextVar[str]("request_id")

    async def main() -> tuple[str, str, str]:
        tenant.name = "t1"
        request_id.set("r1")
        return await database(lambda: (tenant.name, request_id.get(), thread_name()))

    name, rid, thread = asyncio.run(main())
    assert (name, rid) == ("t1", "r1") and thread.startswith("squad-memory-db")


HOT = ("u", "s", "hot")


class RowHolder(threading.Thread):
    """Another session holding a slot's row (a long ``ATOMIC_REQUESTS`` view that saved to
    it, an admin action) until told to let go, or for ``most`` seconds."""

    def __init__(self, key: tuple[str, str, str], most: float) -> None:
        super().__init__(daemon=True)
        self.key, self.most = key, most
        self.holding, self.done, self.released = (threading.Event() for _ in range(3))

    def run(self) -> None:
        try:
            with transaction.atomic():
                user_id, session_id, agent_id = self.key
                Slot.objects.select_for_update().get(
                    user_id=user_id, session_id=session_id, agent_id=agent_id
                )
                self.holding.set()
                self.done.wait(self.most)
            self.released.set()
        finally:
            connection.close()


@pytest.mark.postgres  # SQLite locks the whole database, not one slot's row
def test_a_slot_whose_row_another_session_holds_takes_one_database_thread() -> None:
    storage = DjangoChatStorage()
    storage.save_chat_message_sync(*HOT, msg("user", "q0"))
    holder = RowHolder(HOT, most=20)
    holder.start()
    assert holder.holding.wait(10)

    async def main() -> list[BaseException | list[ConversationMessage]]:
        hot = [
            asyncio.create_task(storage.save_chat_message(*HOT, msg("assistant", f"a{i}")))
            for i in range(5)
        ]
        await others_turns(storage, 10)  # on the thread the hot slot leaves them
        assert not holder.released.is_set(), "other conversations waited for the hot slot"
        return await asyncio.gather(*hot, return_exceptions=True)

    try:
        with override_settings(SQUAD_MEMORY={"DATABASE_THREADS": 2, "LOCK_TIMEOUT": 0.2}):
            results = asyncio.run(main())
    finally:
        holder.done.set()
        holder.join(30)
    assert all(isinstance(result, SlotLocked) for result in results), results
    assert "'hot'" in str(results[0]) and "LOCK_TIMEOUT" in str(results[0])
    assert Message.objects.filter(slot__agent_id__startswith="other").count() == 10
    # Once the row is let go, the slot takes saves again.
    answer = asyncio.run(storage.save_chat_message(*HOT, msg("assistant", "a")))
    assert texts(answer) == ["q0", "a"]


def test_a_stuck_call_fails_at_its_deadline_and_its_thread_is_replaced() -> None:
    """A call that never returns (a black-holed network) fails once ``CALL_TIMEOUT`` has
    passed, and another thread takes its place: the pool keeps its size. The stuck thread
    stops, its connections closed, when its call returns."""
    release = threading.Event()
    stuck: list[threading.Thread] = []

    def hangs() -> None:
        Slot.objects.count()  # it has a connection
        stuck.append(threading.current_thread())
        release.wait(20)

    async def main() -> int:
        with pytest.raises(DatabaseCallTimeout, match="CALL_TIMEOUT"):
            await asyncio.wait_for(database(hangs), 10)
        return await asyncio.wait_for(database(Slot.objects.count), 10)

    with override_settings(SQUAD_MEMORY={"DATABASE_THREADS": 1, "CALL_TIMEOUT": 0.5}):
        assert asyncio.run(main()) == 0  # on the thread that replaced the stuck one
    assert stuck[0].is_alive()
    release.set()
    stuck[0].join(10)
    assert not stuck[0].is_alive()


def test_with_debug_a_database_thread_keeps_no_log_of_earlier_calls() -> None:
    """``DEBUG`` logs each call's queries afresh, as Django logs each request's."""

    async def main() -> int:
        for _ in range(5):
            await database(Slot.objects.count)
        return await database(lambda: len(connections["default"].queries_log))

    with override_settings(DEBUG=True, SQUAD_MEMORY={"DATABASE_THREADS": 1}):
        assert asyncio.run(main()) == 0


@pytest.mark.postgres
def test_a_pool_timeout_is_not_taken_for_a_dead_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Django's PostgreSQL pool gave no connection in its timeout: the call fails at once,
    rather than waiting a second timeout as if its connection had died."""
    from psycopg_pool import ConnectionPool, PoolTimeout

    waits: list[float | None] = []

    def exhausted(self: Any, timeout: float | None = None) -> Any:
        waits.append(timeout)
        raise PoolTimeout("couldn't get a connection after 30.00 sec")

    monkeypatch.setattr(ConnectionPool, "getconn", exhausted)
    options = {**connections.settings["default"]["OPTIONS"], "pool": {"min_size": 0, "max_size": 1}}
    pools = type(connections["default"])._connection_pools
    try:
        with (
            connection_settings(OPTIONS=options, CONN_MAX_AGE=0),
            pytest.raises(OperationalError, match="couldn't get a connection"),
        ):
            asyncio.run(database(Slot.objects.count))
    finally:
        if "default" in pools:
            pools.pop("default").close()
    assert len(waits) == 1


def test_a_summarizer_that_never_returns_is_abandoned_at_its_timeout() -> None:
    """Past ``SUMMARIZER_TIMEOUT`` the compression fails (logged, its claim released), the
    save answers the buffer uncompressed, and the thread is replaced: the other
    conversations' compressions go on while the hung summary still holds its thread."""
    hung = summarizers.Gate()  # never released while the test looks
    storage = primed(hung)
    other = SummarizingChatStorage(DjangoChatStorage(), summarizers.fold, 2, 1)
    other_key = ("u", "s", "other")

    async def main() -> tuple[list[ConversationMessage], list[ConversationMessage]]:
        answer = await asyncio.wait_for(storage.save_chat_message(*SLOW, msg("assistant", "a3")), 8)
        for i in range(3):  # a sync summary on the one summarizer thread the hung one left
            await other.save_chat_messages(
                *other_key, [msg("user", f"q{i}"), msg("assistant", "a")]
            )
        return answer, await asyncio.wait_for(other.fetch_chat(*other_key), 8)

    settings = {"SUMMARIZER_THREADS": 1, "SUMMARIZER_TIMEOUT": 0.5}
    try:
        with override_settings(SQUAD_MEMORY=settings):
            answer, others = asyncio.run(main())
    finally:
        hung.release.set()
    assert texts(answer) == ["S(q0+a0+q1+a1)", "q2", "a2", "q3", "a3"]  # uncompressed
    failed = Compression.objects.filter(slot__agent_id="slow").latest("pk")
    assert failed.outcome == "failed" and "SummarizerTimeout" in failed.error
    assert "SUMMARIZER_TIMEOUT" in failed.error
    assert Slot.objects.get(agent_id="slow").pending_since is None  # the claim released
    assert texts(others)[0].startswith("S(")  # compressed on the thread that replaced it


def test_calls_for_one_slot_take_turns_and_a_cancelled_one_gives_its_turn_away() -> None:
    release = threading.Event()
    ran: list[str] = []

    def call(name: str) -> str:
        ran.append(name)
        if name == "first":
            release.wait(10)
        return name

    async def started() -> None:
        while not ran:
            await asyncio.sleep(0.01)

    async def main() -> tuple[str, str, bool]:
        first = asyncio.create_task(for_slot(HOT, call, "first"))
        await asyncio.wait_for(started(), 10)
        second = asyncio.create_task(for_slot(HOT, call, "second"))
        third = asyncio.create_task(for_slot(HOT, call, "third"))
        assert await for_slot(SLOW, call, "other") == "other"  # another slot does not wait
        second.cancel()
        assert ran == ["first", "other"]  # the slot's next calls wait on no thread
        release.set()
        return await first, await third, second.cancelled()

    with override_settings(SQUAD_MEMORY={"DATABASE_THREADS": 4}):
        assert asyncio.run(main()) == ("first", "third", True)
    assert ran == ["first", "other", "third"] and not threads._TURNS


@pytest.mark.parametrize("gives_up", ["cancelled", "past CALL_TIMEOUT"])
def test_a_call_its_caller_stopped_waiting_for_keeps_the_slots_turn_until_it_returns(
    gives_up: str,
) -> None:
    """A save whose caller was cancelled, or got ``DatabaseCallTimeout``, still runs on its
    thread: the slot's next call waits for it to return (its rows would otherwise be stored
    before the earlier save's), and a call that waits longer than ``CALL_TIMEOUT`` for it
    gets ``DatabaseCallTimeout``."""
    release = threading.Event()
    ran: list[str] = []

    def call(name: str) -> str:
        ran.append(f"{name} started")
        if name == "first":
            release.wait(10)
        ran.append(f"{name} returned")
        return name

    async def main() -> str:
        first = for_slot(HOT, call, "first")
        with pytest.raises(TimeoutError if gives_up == "cancelled" else DatabaseCallTimeout):
            await (asyncio.wait_for(first, 0.3) if gives_up == "cancelled" else first)
        with pytest.raises(DatabaseCallTimeout, match="the slot's call before it"):
            await for_slot(HOT, call, "impatient")  # waits its CALL_TIMEOUT for the first
        second = asyncio.create_task(for_slot(HOT, call, "second"))
        await asyncio.sleep(0.2)
        assert ran == ["first started"]  # neither took a thread beside the first
        release.set()
        return await second

    with override_settings(SQUAD_MEMORY={"CALL_TIMEOUT": 1.0}):
        try:
            assert asyncio.run(main()) == "second"
        finally:
            release.set()
            close_database_threads()
    assert ran == ["first started", "first returned", "second started", "second returned"]
    assert not threads._TURNS

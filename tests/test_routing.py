"""Every statement goes through Django's connections and the router's database: an execute
wrapper sees an async turn, and a router that keeps squad_memory's models in a database of
their own gets every statement and transaction of squad_memory there, none on default."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.db import connections
from django.db.backends.signals import connection_created
from django.test import Client, override_settings

from squad_memory.models import Slot
from squad_memory.operations import forgetting, transfer
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
from squad_memory.threads import close_database_threads
from tests.conftest import extra, msg, texts

pytestmark = pytest.mark.prepared

TABLES = ("squad_memory_slot", "squad_memory_message", "squad_memory_compression")


def store() -> SummarizingChatStorage:
    return SummarizingChatStorage(DjangoChatStorage(), "tests.summarizers.fold", 2, 1)


class Statements:
    """An execute wrapper on every connection Django opens (as an APM installs one)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        self.seen.append((context["connection"].alias, sql))
        return execute(sql, params, many, context)

    def install(self, sender: Any, connection: Any, **kwargs: Any) -> None:
        connection.execute_wrappers.append(self)

    def ours(self, alias: str) -> list[str]:
        return [sql for seen, sql in self.seen if seen == alias and any(t in sql for t in TABLES)]


@pytest.fixture
def statements() -> Iterator[Statements]:
    """Installed through ``connection_created`` on connections opened from now on (those
    open already, in this thread and in asgiref's thread, are closed first, and those that
    stay open, as SQLite's in-memory test database does, get it too)."""
    wrapper = Statements()

    def on_open_ones() -> None:  # SQLite's in-memory test database is never closed
        for open_one in connections.all(initialized_only=True):
            if open_one.connection is not None and wrapper not in open_one.execute_wrappers:
                open_one.execute_wrappers.append(wrapper)

    def off() -> None:
        for open_one in connections.all(initialized_only=True):
            if wrapper in open_one.execute_wrappers:
                open_one.execute_wrappers.remove(wrapper)
        connections.close_all()

    connections.close_all()
    asyncio.run(sync_to_async(connections.close_all)())
    close_database_threads()  # new threads, new connections (an in-memory SQLite never closes)
    connection_created.connect(wrapper.install)
    on_open_ones()
    asyncio.run(sync_to_async(on_open_ones)())
    yield wrapper
    connection_created.disconnect(wrapper.install)
    off()
    asyncio.run(sync_to_async(off)())


@pytest.mark.django_db(transaction=True)  # async code runs on another thread
def test_an_execute_wrapper_sees_every_statement_of_an_async_turn(statements: Statements) -> None:
    storage = store()
    storage.save_chat_messages_sync("u", "s", "a", [msg("user", "q0"), msg("assistant", "a0")])

    async def turn() -> list[int]:
        counts = []
        for step in (
            storage.save_chat_message("u", "s", "a", msg("user", "q1")),
            storage.save_chat_message("u", "s", "a", msg("assistant", "a1")),
            storage.fetch_chat("u", "s", "a"),
        ):
            before = len(statements.seen)
            await step
            counts.append(len(statements.seen) - before)
        return counts

    assert all(asyncio.run(turn())), statements.seen  # each call's statements were seen
    saved = [sql for sql in statements.ours("default") if "squad_memory_message" in sql]
    assert len(saved) >= 3  # two saves and the fetch, all through Django's cursor
    assert texts(storage.fetch_chat_sync("u", "s", "a"))[-2:] == ["q1", "a1"]


class OwnDatabaseRouter:
    """Django's multiple-databases pattern: squad_memory's models live in "memory"."""

    def _db(self, model: type[Any]) -> str | None:
        return "memory" if model._meta.app_label == "squad_memory" else None

    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        return self._db(model)

    def db_for_write(self, model: type[Any], **hints: Any) -> str | None:
        return self._db(model)

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        return None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return (app_label == "squad_memory") == (db == "memory")


@pytest.fixture
def own_database(statements: Statements) -> Iterator[Statements]:
    """squad_memory routed to "memory"; transactions opened on default are counted too."""
    begun: list[str] = []
    default = connections["default"]
    real = default.set_autocommit

    def set_autocommit(autocommit: bool, *args: Any, **kwargs: Any) -> None:
        if not autocommit:
            begun.append("atomic on default")
        real(autocommit, *args, **kwargs)

    default.set_autocommit = set_autocommit  # type: ignore[method-assign]
    statements.begun = begun  # type: ignore[attr-defined]
    with override_settings(DATABASE_ROUTERS=["tests.test_routing.OwnDatabaseRouter"]):
        yield statements
    del default.set_autocommit
    connections["memory"].close()


@pytest.mark.django_db(transaction=True, databases=["default", "memory"])  # compresses on commit
def test_a_database_of_its_own_gets_every_statement_and_transaction(
    own_database: Statements, tmp_path: Any
) -> None:
    storage = store()
    for n in range(4):  # saves (sync), past the trigger: a fetch activates and compresses
        storage.save_chat_message_sync("u", "s", "a", msg("user", f"q{n}"))
        storage.save_chat_message_sync("u", "s", "a", msg("assistant", f"a{n}"))
    assert texts(storage.fetch_chat_sync("u", "s", "a"))[0] == "S(q0+a0+q1+a1+q2+a2)"
    asyncio.run(storage.save_chat_message("u", "s", "a", msg("user", "async")))
    path = tmp_path / "export.jsonl"
    path.write_text("".join(transfer.export_lines(transfer.slots_for(user_id="u"))))
    assert transfer.import_file(str(path)).messages == 9  # appended again, in order
    assert Slot.objects.using("memory").get().last_seq == 18
    assert forgetting.purge_idle(1.0).slots == 0  # idle for a day: none yet
    assert forgetting.forget("u").slots == 1
    assert Slot.objects.using("memory").count() == 0
    assert own_database.ours("default") == []
    assert own_database.begun == []  # type: ignore[attr-defined]
    assert own_database.ours("memory")


# Transactional: own_database closes the "memory" connection at its end, which would close a
# rolled-back test's transaction under it.
@pytest.mark.django_db(transaction=True, databases=["default", "memory"])
def test_the_api_posts_with_an_idempotency_key_in_a_database_of_its_own(
    own_database: Statements,
) -> None:
    extra("rest_framework", "api")
    user = User.objects.create_user("owner", password="pw")
    from django.contrib.auth.models import Permission

    user.user_permissions.add(Permission.objects.get(codename="add_message"))
    client = Client()
    client.force_login(user)
    own_database.begun.clear()  # type: ignore[attr-defined]
    body = {
        "session_id": "s",
        "agent_id": "a",
        "message": {"role": "user", "content": [{"text": "hi"}]},
    }
    for _ in range(2):
        response = client.post(
            "/api/slots/messages/",
            json.dumps(body),
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY="key-1",
        )
        assert response.status_code == 201, response.content
    assert Slot.objects.using("memory").get().last_seq == 1
    assert own_database.ours("default") == []
    assert own_database.begun == []  # type: ignore[attr-defined]
    out = io.StringIO()
    transfer.export(out, user_id=str(user.pk))
    assert json.loads(out.getvalue().splitlines()[0])["content"] == [{"text": "hi"}]

"""Shared fixtures. Service tests skip with a reason where a service is missing,
and fail instead under ``CI=true``, where every service must be there."""

from __future__ import annotations

import asyncio
import atexit
import importlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from agent_squad.types import ConversationMessage
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

pytest.register_assert_rewrite("tests.celery_fixtures", "tests.api_fixtures")

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

# Connections outlive a call, as in a deployment that serves async callers: with Django's
# default CONN_MAX_AGE of 0, each call of the async API opens a connection of its own (on
# PostgreSQL, a third of the async tests' time). The tests of the database threads set
# CONN_MAX_AGE and CONN_HEALTH_CHECKS themselves.
for _database in settings.DATABASES.values():
    _database["CONN_MAX_AGE"] = None
    if _database["ENGINE"] == "django.db.backends.sqlite3":
        # A test database in a file, as the embedded default is (WAL, writers wait for the
        # lock): SQLite's in-memory test database locks whole tables across connections and
        # fails at once where a file waits, and async calls run on several threads.
        _files = Path(tempfile.mkdtemp(prefix="squad-memory-tests-"))
        atexit.register(shutil.rmtree, _files, ignore_errors=True)
        _test = _database.setdefault("TEST", {})
        _test["NAME"] = _test.get("NAME") or str(_files / Path(_database["NAME"]).name)


def require(condition: bool, reason: str) -> None:
    """Skip (or, under CI=true, fail) when a service a test needs is missing."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(reason)


def extra(module: str, name: str) -> Any:
    """``module`` of the package's optional extra ``name``: the test (or, at module level,
    the module) skips with a reason where it is not installed; under ``CI=true``, where
    every extra is installed, a missing one fails instead."""
    if IN_CI:
        return importlib.import_module(module)
    return pytest.importorskip(
        module, reason=f"needs the {name} extra: pip install 'squad-memory[{name}]'"
    )


#: The tiers beside the core one, by module (``tests/test_bench*.py`` are the benchmark's).
#: Any other test is ``core``, and so is a new module until it is named here; a test marked
#: ``services`` (a broker, a worker or a browser) is ``integration`` wherever it lives.
TIERS = {
    "integration": {  # they start processes, brokers, servers, workers or browsers
        "test_admin_browser",
        "test_api_docs_browser",
        "test_api_optional",
        "test_celery_integration",
        "test_concurrency",
        "test_demo",
        "test_middleware_uvicorn",
        "test_django_tasks_worker",
        "test_pgbouncer",
        "test_settings",
        "test_sqlite_locks",
        "test_threads_exit",
    },
    "docs": {"test_docs", "test_docs_site", "test_packaging", "test_layout"},
}


def tier(item: pytest.Item) -> str:
    found = getattr(item, "module", None)
    module = found.__name__.rsplit(".", 1)[-1] if found else ""
    if module.startswith("test_bench"):
        return "bench"
    for name, modules in TIERS.items():
        if module in modules:
            return name
    return "integration" if item.get_closest_marker("services") else "core"


def needs_a_database(item: pytest.Item) -> bool:
    """Whether ``item`` uses the configured database: the passes on other databases run
    only these (the others run in one pass). A test marked ``own_database`` uses databases
    it makes itself (a project's SQLite file, a cluster of its own); one marked
    ``any_database`` uses the test database, but what it checks does not depend on which."""
    names = getattr(item, "fixturenames", [])
    elsewhere = item.get_closest_marker("own_database") or item.get_closest_marker("any_database")
    return not elsewhere and bool(
        item.get_closest_marker("django_db")
        or item.get_closest_marker("postgres")
        or {"db", "transactional_db"} & set(names)
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("any_database") and item.get_closest_marker("postgres"):
            raise pytest.UsageError(
                f"{item.nodeid} is marked any_database (the SQLite pass only) and postgres "
                "(never there): no pass would run it"
            )
        item.add_marker(tier(item))
        if tier(item) == "bench" and needs_a_database(item):
            # The benchmark runs in autocommit, and its tests check it does: real commits.
            item.add_marker(pytest.mark.django_db(transaction=True), append=False)
        if not needs_a_database(item):
            item.add_marker("nodb")
        if item.get_closest_marker("postgres") and isinstance(item, pytest.Function):
            # a copy: parametrized items share the list
            item.fixturenames = ["_needs_postgres", *item.fixturenames]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Where ``--dist loadgroup`` did not group a test by its ``xdist_group`` mark, the test
    fails: tests that share a resource (a database they empty, a port) would run at once on
    two workers."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    for item in session.items:
        if item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
            assert isinstance(item, pytest.Function), item
            item.fixturenames.insert(0, "_ungrouped")


@pytest.fixture
def _ungrouped() -> None:
    pytest.fail(
        "pytest-xdist did not group this test by its xdist_group mark: this pytest and "
        "pytest-xdist do not work together (requirements-dev.txt pins them)."
    )


@pytest.fixture(scope="session", autouse=True)
def _close_worker_thread_connections(django_db_setup: None) -> Iterator[None]:
    """At the end, close the Django connections of asgiref's worker thread and of the
    database threads (async tests run sync code there, and their connections may outlive
    them), so the test database can be dropped: PostgreSQL refuses while a session still
    uses it."""
    yield
    from asgiref.sync import sync_to_async
    from django.db import connections

    from squad_memory.threads import close_database_threads

    asyncio.run(sync_to_async(connections.close_all)())
    close_database_threads()


@pytest.fixture
def _needs_postgres() -> None:
    require(
        connection.vendor == "postgresql",
        f"needs PostgreSQL as the database (DATABASE_URL=postgres://...); this run uses {connection.vendor}",
    )


_TX_CONTROL = re.compile(r"^\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE SAVEPOINT)", re.I)


class QueryCounter(CaptureQueriesContext):
    """Counts SQL statements, leaving out transaction control (BEGIN, COMMIT, savepoints)."""

    @property
    def statements(self) -> list[str]:
        return [q["sql"] for q in self.captured_queries if not _TX_CONTROL.match(q["sql"])]

    @property
    def count(self) -> int:
        return len(self.statements)


@pytest.fixture
def count_queries() -> Iterator[Any]:
    def make() -> QueryCounter:
        return QueryCounter(connection)

    yield make


def msg(role: str, text: str) -> ConversationMessage:
    return ConversationMessage(role=role, content=[{"text": text}])


def buffer_of(slot: Any) -> list[Mapping[str, Any]]:
    """What ``fetch_chat`` shows of ``slot`` now (its buffer), under the settings' sizes."""
    from squad_memory.models import Limits, Slot

    found, rows = Slot.objects.read(slot.key, namespace=slot.namespace)
    assert found is not None
    return found.buffer(rows, Limits.from_settings())


def texts(messages: list[ConversationMessage]) -> list[str]:
    return [m.content[0].get("text", "") if m.content else "" for m in messages]

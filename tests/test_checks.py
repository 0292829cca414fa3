"""System checks, settings and migrations."""

from __future__ import annotations

import sys
from io import StringIO
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import override_settings

from squad_memory import checks
from squad_memory.checks import check_settings, check_sweep_scheduled
from squad_memory.conf import app_settings


def ids(**settings: Any) -> list[str]:
    with override_settings(SQUAD_MEMORY=settings):
        return [m.id for m in check_settings()]


def test_defaults_pass() -> None:
    assert ids() == []


@pytest.mark.parametrize(
    "settings,expected",
    [
        ({"SUMMARIZER": "no.such.module.func"}, "squad_memory.E002"),
        ({"SUMMARIZER": 42}, "squad_memory.E002"),
        ({"TRIGGER_AT": 0}, "squad_memory.E003"),
        ({"KEEP_LAST": "2"}, "squad_memory.E004"),
        ({"TRIGGER_AT": 2, "KEEP_LAST": 2}, "squad_memory.E005"),
        ({"MODE": "threads"}, "squad_memory.E006"),
        ({"ON_ERROR": "ignore"}, "squad_memory.E007"),
        ({"PENDING_TIMEOUT": -1}, "squad_memory.E009"),
        ({"DATABASE_THREADS": 0}, "squad_memory.E009"),
        ({"SUMMARIZER_THREADS": "many"}, "squad_memory.E009"),
        ({"MAX_ID_LENGTH": 1000}, "squad_memory.E010"),
        ({"TRIGER_AT": 5}, "squad_memory.W001"),
        ({"TRIGGER_TOKENS": 0}, "squad_memory.E040"),
        ({"MAX_BUFFER_TOKENS": "many"}, "squad_memory.E040"),
        ({"TRIGGER_TOKENS": 500, "MAX_BUFFER_TOKENS": 100}, "squad_memory.E040"),
        ({"TOKEN_COUNTER": "no.such.module.count"}, "squad_memory.E041"),
        ({"TOKEN_COUNTER": "squad_memory.rules.BYTES_PER_TOKEN"}, "squad_memory.E041"),
        ({"CLAIM_LEASE": 0}, "squad_memory.E009"),
        ({"CLAIM_LEASE": -5}, "squad_memory.E009"),
        ({"PUBLISH_TIMEOUT": 0}, "squad_memory.E009"),
        ({"PUBLISH_TIMEOUT": -1.0}, "squad_memory.E009"),
        ({"PUBLISH_TIMEOUT": 2000}, "squad_memory.E009"),  # milliseconds, by mistake
        ({"RETRIES": 1.5}, "squad_memory.E009"),
        ({"RETRY_BACKOFF": -1}, "squad_memory.E009"),
        ({"RETRY_BACKOFF_MAX": "60"}, "squad_memory.E009"),
        ({"SEARCH_TIMEOUT": -1}, "squad_memory.E009"),
        ({"FETCH_ALL_LIMIT": 0}, "squad_memory.E009"),
        ({"FETCH_ALL_LIMIT": 2.5}, "squad_memory.E009"),
        ({"FETCH_ALL_LIMIT": "1000"}, "squad_memory.E009"),
        ({"MAX_ID_LENGTH": 0}, "squad_memory.E010"),
        ({"MAX_SUMMARY_CHARS": 50}, "squad_memory.E021"),
        ({"LLM": {"TIMEOUT": 0}}, "squad_memory.E025"),
        ({"LLM": {"TEMPERATURE": 5}}, "squad_memory.E025"),
        ({"LLM": {"MAX_TOKENS": 0}}, "squad_memory.E025"),
        ({"MAX_CONTENT_BLOCKS": 0}, "squad_memory.E050"),
        ({"MAX_CONTENT_BLOCKS": 10_001}, "squad_memory.E050"),
        ({"MAX_CONTENT_BLOCKS": 2.5}, "squad_memory.E050"),
        ({"MAX_CITATIONS": -1}, "squad_memory.E050"),
        ({"MAX_CITATIONS": "100"}, "squad_memory.E050"),
    ],
)
def test_bad_settings_are_reported(settings: dict[str, Any], expected: str) -> None:
    assert expected in ids(**settings)


def test_a_non_dict_setting_is_reported() -> None:
    with override_settings(SQUAD_MEMORY=["not", "a", "dict"]):
        assert [m.id for m in check_settings()] == ["squad_memory.E001"]


def test_settings_are_read_live(settings: Any) -> None:
    assert app_settings.trigger_at == 20
    with override_settings(SQUAD_MEMORY={"TRIGGER_AT": 9}):
        assert app_settings.trigger_at == 9
        with (
            override_settings(SQUAD_MEMORY=["not", "a", "dict"]),
            pytest.raises(ImproperlyConfigured, match="must be a dict"),
        ):
            app_settings.trigger_at  # noqa: B018
        assert app_settings.trigger_at == 9
    assert app_settings.trigger_at == 20
    settings.SQUAD_MEMORY = {"TRIGGER_AT": 7}  # pytest-django's fixture: a changed setting
    assert app_settings.trigger_at == 7
    settings.SQUAD_MEMORY["TRIGGER_AT"] = 8  # a value changed inside the dict
    assert app_settings.trigger_at == 8


def test_import_callable_names_the_setting() -> None:
    from django.core.exceptions import ImproperlyConfigured

    with (
        override_settings(SQUAD_MEMORY={"SUMMARIZER": "nowhere.fn"}),
        pytest.raises(ImproperlyConfigured, match="SUMMARIZER"),
    ):
        app_settings.import_callable("SUMMARIZER")


@pytest.mark.django_db
def test_migrations_are_complete() -> None:
    out = StringIO()
    call_command("makemigrations", "squad_memory", "--check", "--dry-run", stdout=out)


#: The migrations that index a big table, and their index.
BIG_TABLE_INDEXES = [("0009", "squad_memory_slot_activity"), ("0010", "squad_memory_comp_started")]


@pytest.mark.django_db
@pytest.mark.postgres
@pytest.mark.parametrize(("migration", "index"), BIG_TABLE_INDEXES)
def test_the_later_indexes_are_built_concurrently_on_postgres(migration: str, index: str) -> None:
    """A big table keeps taking writes while its index builds on PostgreSQL (the other
    databases build it plainly: every test database migrates through it)."""
    from django.db.migrations.loader import MigrationLoader

    out = StringIO()
    call_command("sqlmigrate", "squad_memory", migration, stdout=out)
    assert "CREATE INDEX CONCURRENTLY" in out.getvalue(), out.getvalue()
    assert index in out.getvalue()
    back = StringIO()
    call_command("sqlmigrate", "squad_memory", migration, "--backwards", stdout=back)
    assert f'DROP INDEX CONCURRENTLY IF EXISTS "{index}"' in back.getvalue(), back.getvalue()
    loader = MigrationLoader(None, ignore_no_migrations=True)
    assert not loader.get_migration_by_prefix("squad_memory", migration).atomic


@pytest.mark.django_db(transaction=True)  # SQLite's schema editor runs outside a transaction
def test_the_later_indexes_are_plain_indexes_elsewhere() -> None:
    """Off PostgreSQL the same migrations build the same indexes in a plain statement."""
    from django.db import connection

    if connection.vendor == "postgresql":
        pytest.skip("PostgreSQL builds them concurrently (the test above)")
    for migration, index in BIG_TABLE_INDEXES:
        out = StringIO()
        call_command("sqlmigrate", "squad_memory", migration, stdout=out)
        assert "CREATE INDEX" in out.getvalue() and "CONCURRENTLY" not in out.getvalue()
        assert index in out.getvalue(), out.getvalue()


def test_a_warning_where_nothing_schedules_the_sweep() -> None:
    from squad_memory.management.commands.squad_memory_sweep import Command

    checks._REPORTED.clear()
    with override_settings(CELERY_BEAT_SCHEDULE={"other": {"task": "x", "schedule": 60}}):
        [warning] = check_sweep_scheduled()
        assert check_sweep_scheduled() == []  # once per process
    assert warning.id == "squad_memory.W003" and "Idempotency-Key" in warning.msg
    assert "squad_memory_sweep" in (warning.hint or "") and "beat" in (warning.hint or "")
    beat = {"sweep": {"task": "squad_memory.tasks.sweep", "schedule": 300}}
    with override_settings(CELERY_BEAT_SCHEDULE=beat):
        assert check_sweep_scheduled() == []
    assert "cron" in Command.help and "squad_memory.tasks.sweep" in Command.help


#: Numeric settings whose range is checked elsewhere: the sizes together (E003-E005, E040)
#: and TASKS_PRIORITY (by the task backend, E006).
CHECKED_ELSEWHERE = {
    *("TRIGGER_AT", "KEEP_LAST", "MAX_BUFFER_PAIRS", "TRIGGER_TOKENS", "MAX_BUFFER_TOKENS"),
    "TASKS_PRIORITY",
}


def test_every_numeric_setting_has_a_checked_range() -> None:
    from squad_memory.conf import DEFAULTS, NUMBERS

    def numeric(value: Any) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool)

    top = {name for name, value in DEFAULTS.items() if numeric(value)} | {"RETAIN_DAYS"}
    assert top - CHECKED_ELSEWHERE <= set(NUMBERS)
    llm = {name for name, value in DEFAULTS["LLM"].items() if numeric(value)}
    assert {f"LLM.{name}" for name in llm} <= set(NUMBERS)
    assert ids() == []  # the defaults are in range


@pytest.mark.parametrize(
    "name,value,read",
    [
        ("CLAIM_LEASE", 0, lambda: app_settings.claim_lease),
        ("PUBLISH_TIMEOUT", -1, lambda: app_settings.publish_timeout),
        ("RETRY_BACKOFF", -2, lambda: app_settings.retry_backoff),
        ("FETCH_ALL_LIMIT", 0, lambda: app_settings.fetch_all_limit),
        ("LLM", {"TIMEOUT": 0}, lambda: app_settings.llm),
    ],
)
def test_a_number_out_of_range_raises_where_it_is_read(name: str, value: Any, read: Any) -> None:
    match = rf"SQUAD_MEMORY\['{name}'\].*got"
    with (
        override_settings(SQUAD_MEMORY={name: value}),
        pytest.raises(ImproperlyConfigured, match=match),
    ):
        read()


@pytest.mark.django_db
def test_a_save_with_a_zero_claim_lease_claims_nothing() -> None:
    """CLAIM_LEASE = 0 would renew the lease in a busy loop while a summarizer runs."""
    from django.core.exceptions import ImproperlyConfigured

    import squad_memory
    from squad_memory.models import Slot
    from tests.conftest import msg

    with override_settings(SQUAD_MEMORY={"CLAIM_LEASE": 0, "TRIGGER_AT": 1, "KEEP_LAST": 0}):
        store = squad_memory.get_storage()
        pairs = [msg("user", "q"), msg("assistant", "a")] * 2
        store.save_chat_messages_sync("u", "s", "a", pairs)
        with pytest.raises(ImproperlyConfigured, match="CLAIM_LEASE"):
            store.fetch_chat_sync("u", "s", "a")
    assert Slot.objects.get().pending_token == ""


def test_the_old_names_of_the_retry_settings_work_with_a_deprecation_warning() -> None:
    old = {"CELERY_MAX_RETRIES": 7, "CELERY_RETRY_BACKOFF": 5, "CELERY_RETRY_BACKOFF_MAX": 9}
    with override_settings(SQUAD_MEMORY=old):
        for name, value in (("RETRIES", 7), ("RETRY_BACKOFF", 5), ("RETRY_BACKOFF_MAX", 9)):
            with pytest.warns(DeprecationWarning, match=f"rename it '{name}'"):
                assert app_settings.raw(name) == value
        with pytest.warns(DeprecationWarning):
            assert "squad_memory.W001" not in ids(**old)  # known names, not unknown ones
    with override_settings(SQUAD_MEMORY={"CELERY_MAX_RETRIES": 7, "RETRIES": 1}):
        assert app_settings.raw("RETRIES") == 1  # the new name wins


def test_w003_names_celery_beat_only_where_celery_is_installed(monkeypatch: Any) -> None:
    monkeypatch.setitem(sys.modules, "celery", None)  # as if not installed: import fails
    checks._REPORTED.clear()
    with override_settings(CELERY_BEAT_SCHEDULE={}):
        [warning] = check_sweep_scheduled()
    text = f"{warning.msg} {warning.hint}"
    assert "cron" in text and "squad_memory_sweep" in text
    assert "beat" not in text.lower() and "CELERY" not in text


def test_w003_is_a_deployment_check_not_one_of_every_command() -> None:
    """``migrate`` or ``drf_create_token`` run the checks that are not deployment checks:
    W003 is not among them (it was printed into their output); ``check --deploy`` gives it."""
    from django.core.checks import run_checks

    checks._REPORTED.clear()
    with override_settings(CELERY_BEAT_SCHEDULE={}):
        assert "squad_memory.W003" not in [m.id for m in run_checks()]
        deploy = run_checks(include_deployment_checks=True)
    assert "squad_memory.W003" in [m.id for m in deploy]
    out, err = StringIO(), StringIO()
    checks._REPORTED.clear()
    with override_settings(CELERY_BEAT_SCHEDULE={}):
        call_command("check", stdout=out, stderr=err)
    assert "W003" not in out.getvalue() + err.getvalue()


@pytest.fixture
def first_request_hook() -> Any:
    """The hook connected again (an earlier request of this process took it off)."""
    from django.core.signals import request_started

    checks._REPORTED.clear()
    request_started.connect(checks.warn_at_first_request)
    yield
    request_started.disconnect(checks.warn_at_first_request)


@pytest.mark.django_db
@pytest.mark.usefixtures("first_request_hook")
def test_a_server_logs_w003_at_its_first_request(caplog: pytest.LogCaptureFixture) -> None:
    from django.test import Client

    with override_settings(CELERY_BEAT_SCHEDULE={}), caplog.at_level("WARNING", "squad_memory"):
        Client().get("/api/")
        Client().get("/api/")
    [record] = [r for r in caplog.records if "squad_memory.W003" in r.getMessage()]
    assert "squad_memory_sweep" in record.getMessage()  # the hint, too


@pytest.mark.django_db
@pytest.mark.usefixtures("first_request_hook")
def test_a_silenced_w003_is_not_logged_at_the_first_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from django.test import Client

    silenced = {"CELERY_BEAT_SCHEDULE": {}, "SILENCED_SYSTEM_CHECKS": ["squad_memory.W003"]}
    with override_settings(**silenced), caplog.at_level("WARNING", "squad_memory"):
        Client().get("/api/")
    assert not [r for r in caplog.records if "W003" in r.getMessage()]


def postgresql(**database: Any) -> dict[str, Any]:
    return {"ENGINE": "django.db.backends.postgresql", "NAME": "app", **database}


def connection_warnings(default: dict[str, Any], **more: dict[str, Any]) -> list[Any]:
    """W004 for these DATABASES (read only: nothing connects)."""
    checks._REPORTED.clear()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding setting DATABASES": only read here
        with override_settings(DATABASES={"default": default, **more}):
            return checks.check_connections()


def test_w004_where_async_callers_open_a_connection_per_call() -> None:
    [warning] = connection_warnings(postgresql())  # Django's default CONN_MAX_AGE: 0
    assert warning.id == "squad_memory.W004" and "'default'" in warning.msg
    assert "async" in warning.msg and "pool" in (warning.hint or "")
    assert "CONN_MAX_AGE" in (warning.hint or "") and "CONN_HEALTH_CHECKS" in (warning.hint or "")
    assert connection_warnings(postgresql(CONN_MAX_AGE=0)) != []


@pytest.mark.parametrize(
    "database",
    [
        postgresql(OPTIONS={"pool": True}),
        postgresql(OPTIONS={"pool": {"min_size": 2, "max_size": 30}}),
        postgresql(CONN_MAX_AGE=60, CONN_HEALTH_CHECKS=True),
        postgresql(CONN_MAX_AGE=None),
        {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"},
    ],
)
def test_w004_is_silenced_by_a_pool_or_kept_connections(database: dict[str, Any]) -> None:
    assert connection_warnings(database) == []


def test_w004_looks_at_the_database_the_router_gives_squad_memory(settings: Any) -> None:
    """A project whose router keeps squad_memory in "memory": that database's settings count."""
    settings.DATABASE_ROUTERS = ["tests.test_routing.OwnDatabaseRouter"]
    kept = postgresql(CONN_MAX_AGE=60)
    [warning] = connection_warnings(kept, memory=postgresql())
    assert "'memory'" in warning.msg
    assert connection_warnings(postgresql(), memory=kept) == []


def test_w004_is_given_once_per_process() -> None:
    checks._REPORTED.clear()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with override_settings(DATABASES={"default": postgresql()}):
            assert len(checks.check_connections()) == 1
            assert checks.check_connections() == []  # runserver's reloads, a nested command

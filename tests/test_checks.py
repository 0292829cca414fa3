"""System checks, settings and migrations."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import override_settings

from squad_memory.checks import check_settings
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
        ({"MAX_ID_LENGTH": 1000}, "squad_memory.E010"),
        ({"TRIGER_AT": 5}, "squad_memory.W001"),
        ({"TRIGGER_TOKENS": 0}, "squad_memory.E040"),
        ({"MAX_BUFFER_TOKENS": "many"}, "squad_memory.E040"),
        ({"TRIGGER_TOKENS": 500, "MAX_BUFFER_TOKENS": 100}, "squad_memory.E040"),
        ({"TOKEN_COUNTER": "no.such.module.count"}, "squad_memory.E041"),
        ({"TOKEN_COUNTER": "squad_memory.tokens.BYTES_PER_TOKEN"}, "squad_memory.E041"),
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

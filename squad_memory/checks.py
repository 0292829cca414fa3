"""System checks of ``settings.SQUAD_MEMORY`` (ids ``squad_memory.E001``...) and the
database, in the words of the rules they check (:mod:`squad_memory.compression.policy`,
:mod:`squad_memory.compression.dispatch`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.db import router
from django.utils.module_loading import import_string

from squad_memory.compression import dispatcher_class
from squad_memory.compression.policy import ON_ERROR, choice_problems, limits_problems
from squad_memory.conf import DEFAULTS, SETTING_NAME, app_settings
from squad_memory.exceptions import ConfigurationError
from squad_memory.models import Limits


def _error(text: str, check_id: str, hint: str | None = None) -> Error:
    return Error(f"{SETTING_NAME}{text}", hint=hint, id=f"squad_memory.{check_id}")


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if not isinstance(getattr(settings, SETTING_NAME, {}), dict):
        return [_error(" must be a dict.", "E001")]
    return [
        *(
            Warning(
                f"{SETTING_NAME}[{key!r}] is not a squad_memory setting.",
                hint=f"Known settings: {', '.join(sorted(DEFAULTS))}.",
                id="squad_memory.W001",
            )
            for key in app_settings.unknown_keys()
        ),
        *_callable("SUMMARIZER", "E002", "a function (history, keep_last) -> list of messages"),
        *_sizes(),
        *_choices(),
        *_numbers(),
        *_callable("TOKEN_COUNTER", "E041", "a function (message) -> int"),
        *_llm(),
    ]


def _callable(name: str, check_id: str, what: str) -> list[CheckMessage]:
    value = app_settings.raw(name)
    try:
        found = value if callable(value) else import_string(value)
    except (ImportError, TypeError, ValueError, AttributeError) as exc:
        found, reason = None, str(exc)
    else:
        reason = "it is not callable"
    if callable(found):
        return []
    return [_error(f"[{name!r}] = {value!r} cannot be used: {reason}.", check_id, f"Give {what}.")]


_SIZES = ("TRIGGER_AT", "KEEP_LAST", "MAX_BUFFER_PAIRS", "TRIGGER_TOKENS", "MAX_BUFFER_TOKENS")


def _sizes() -> list[CheckMessage]:
    """E003-E005 (pairs) and E040 (tokens), in the words of ``limits_problems``."""
    problems = limits_problems(Limits(*(app_settings.raw(name) for name in _SIZES)))
    return [_error(f": {text}", _SIZE_IDS.get(name, "E040")) for name, text in problems]


_SIZE_IDS = {
    "trigger_at": "E003",
    "max_buffer_pairs": "E003",
    "keep_last": "E004",
    "keep_last<trigger_at": "E005",
}


def _choices() -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    mode = str(app_settings.raw("MODE"))
    try:
        errors += [Error(text, id="squad_memory.E006") for text in dispatcher_class(mode).check()]
    except (ConfigurationError, ImportError) as exc:
        hint = f"pip install 'squad-memory[{mode}]'" if mode in ("celery", "tasks") else None
        errors.append(Error(str(exc), hint=hint, id="squad_memory.E006"))
    problems = choice_problems("ON_ERROR", app_settings.raw("ON_ERROR"), ON_ERROR)
    return errors + [_error(f": {problem}", "E007") for problem in problems]


#: Check ids of the numeric settings that have one of their own (the rest: E009).
_NUMBER_IDS = {
    "MAX_ID_LENGTH": "E010",
    "MAX_SUMMARY_CHARS": "E021",
    "RETAIN_DAYS": "E030",
    "MAX_CONTENT_BLOCKS": "E050",
    "MAX_CITATIONS": "E050",
}


def _numbers() -> list[CheckMessage]:
    """E009 (E010, E021, E030, E025 for ``LLM``'s): each numeric setting in its range."""
    return [
        Error(
            problem, id=f"squad_memory.{_NUMBER_IDS.get(name, 'E025' if '.' in name else 'E009')}"
        )
        for name, problem in app_settings.number_problems()
    ]


_LLM_PATH = "squad_memory.summarizers.llm.summarize"


def _llm() -> list[CheckMessage]:
    """``LLM`` (E020, E022-E024), checked fully when the LLM summarizer is configured."""
    conf = app_settings.raw("LLM")
    if not isinstance(conf, dict):
        return [_error("['LLM'] must be a dict.", "E020")]
    errors: list[CheckMessage] = []
    if app_settings.raw("SUMMARIZER") != _LLM_PATH:
        return errors
    merged = {**DEFAULTS["LLM"], **conf}
    backend = merged["BACKEND"]
    if backend not in ("openai", "anthropic", "agent"):
        text = f"['LLM']['BACKEND'] must be openai, anthropic or agent; got {backend!r}."
        errors.append(_error(text, "E022"))
    elif backend != "agent" and not merged["MODEL"]:
        text = f"['LLM']['MODEL'] is required by the {backend} backend."
        hint = "e.g. 'gpt-4o-mini', or the model name your server serves."
        errors.append(_error(text, "E023", hint))
    elif backend != "agent" and importlib.util.find_spec(backend) is None:
        text = f"['LLM']['BACKEND'] is {backend!r}, which is not installed."
        errors.append(_error(text, "E024", f"pip install 'squad-memory[{backend}]'"))
    return errors


APP_LABEL = "squad_memory"
_SQLITE_OPTIONS = '{"transaction_mode": "IMMEDIATE", "timeout": 20}'


@register()
def check_sqlite(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W002: a SQLite database squad_memory's models are written to (the router's choice,
    ``default`` without a router) must wait for a second writer's lock."""
    return [
        Warning(
            f"The database {alias!r} that squad_memory writes to is SQLite without OPTIONS "
            '"transaction_mode": "IMMEDIATE" and a "timeout": saves fail with '
            '"database is locked" while another process (a worker, a second web process, '
            "a management command) writes.",
            hint=f"Set DATABASES[{alias!r}]['OPTIONS'] to include {_SQLITE_OPTIONS}.",
            id="squad_memory.W002",
        )
        for alias in sorted(_written_aliases())
        if not _waits_for_writers(settings.DATABASES.get(alias, {}))
    ]


def _written_aliases() -> set[str]:
    """The aliases the routers send squad_memory's writes to (reads take no write lock)."""
    return {router.db_for_write(model) for model in apps.get_app_config(APP_LABEL).get_models()}


def _waits_for_writers(database: Mapping[str, Any]) -> bool:
    if database.get("ENGINE") != "django.db.backends.sqlite3":
        return True
    options = database.get("OPTIONS") or {}
    immediate = str(options.get("transaction_mode", "")).upper() == "IMMEDIATE"
    return immediate and "timeout" in options


SWEEP_TASK = "squad_memory.tasks.sweep"


#: Warnings this process has given already (the checks run again within one process: a
#: command that calls another, runserver's reloads).
_REPORTED: set[str] = set()


@register()
def check_sweep_scheduled(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W003, once per process: nothing is known to run the sweep (no ``CELERY_BEAT_SCHEDULE``
    entry). Nothing else deletes expired Idempotency-Key answers (they hold message text)
    or applies ``RETAIN_DAYS``. It names Celery beat only where Celery is installed."""
    entries = (getattr(settings, "CELERY_BEAT_SCHEDULE", None) or {}).values()
    if any(isinstance(entry, dict) and entry.get("task") == SWEEP_TASK for entry in entries):
        return []
    if "W003" in _REPORTED:
        return []
    _REPORTED.add("W003")
    cron = (
        "Run 'manage.py squad_memory_sweep' every few minutes from cron (or your platform's "
        "scheduler) and add 'squad_memory.W003' to SILENCED_SYSTEM_CHECKS"
    )
    if importlib.util.find_spec("celery") is None:
        where, hint = "Nothing is known to run squad_memory_sweep", f"{cron}."
    else:
        where = f"No CELERY_BEAT_SCHEDULE entry runs {SWEEP_TASK}, and unless cron runs it"
        beat = f"{{'task': '{SWEEP_TASK}', 'schedule': 300}}"
        hint = f"{cron}, or add a Celery beat entry {beat} and run celery beat."
    return [
        Warning(
            f"{where}: expired Idempotency-Key answers (they hold message text) are never "
            "deleted, RETAIN_DAYS is never applied and slots left over the threshold wait "
            "for their next save.",
            hint=hint,
            id="squad_memory.W003",
        )
    ]

"""System checks of ``settings.SQUAD_MEMORY`` (ids ``squad_memory.E001``...) and the
database, in the words of the rules they check (:mod:`squad_memory.compression.policy`,
:mod:`squad_memory.compression.dispatch`).
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Mapping
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.core.signals import request_started
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

logger = logging.getLogger("squad_memory")


@register(deploy=True)
def check_sweep_scheduled(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W003, once per process: nothing is known to run the sweep (no ``CELERY_BEAT_SCHEDULE``
    entry). Nothing else deletes expired Idempotency-Key answers (they hold message text)
    or applies ``RETAIN_DAYS``. It names Celery beat only where Celery is installed.

    A deployment check (``check --deploy``), and logged by a server at its first request
    (:func:`warn_at_first_request`): the schedule matters where the project is served, not
    in the output of every management command (``migrate``, ``drf_create_token``)."""
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


def warn_at_first_request(**kwargs: Any) -> None:
    """W003 in a server's log (runserver, any WSGI or ASGI server), once, at the first request
    it serves: Django runs no system check when a server starts, and runserver only those
    that are not deployment checks. ``SILENCED_SYSTEM_CHECKS`` silences it here too."""
    request_started.disconnect(warn_at_first_request)
    if "squad_memory.W003" in settings.SILENCED_SYSTEM_CHECKS:
        return
    for warning in check_sweep_scheduled():
        logger.warning("%s", warning)


@register()
def check_connections(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W004, once per process: a PostgreSQL database squad_memory's models are read from or
    written to (the routers' choice) closes its connection after each use (``CONN_MAX_AGE``
    0) and has no pool. A request is not slowed (it opens one connection), but an async
    caller outside a request (AgentSquad in a bot, ``asyncio.run``) has each of its database
    calls served as a request of its own (:mod:`squad_memory.threads`): three or four
    connections opened and closed a turn, a turn several times slower."""
    aliases = sorted(a for a in _used_aliases() if _opens_per_call(settings.DATABASES.get(a, {})))
    if not aliases or "W004" in _REPORTED:
        return []
    _REPORTED.add("W004")
    return [
        Warning(
            f"The database {alias!r} that squad_memory uses is PostgreSQL with CONN_MAX_AGE 0 "
            "and no pool: an async caller (AgentSquad outside a Django request) opens and "
            "closes a connection for each database call, three or four a turn, which makes a "
            "turn several times slower.",
            hint=f"In DATABASES[{alias!r}], set 'OPTIONS': {{'pool': True}} (Django 5.1+, "
            "pip install 'psycopg[pool]'), or 'CONN_MAX_AGE': 60 with 'CONN_HEALTH_CHECKS': "
            "True.",
            id="squad_memory.W004",
        )
        for alias in aliases
    ]


def _used_aliases() -> set[str]:
    """The aliases the routers send squad_memory's reads and writes to."""
    models = apps.get_app_config(APP_LABEL).get_models()
    return {alias for m in models for alias in (router.db_for_read(m), router.db_for_write(m))}


#: The ``ENGINE`` of Django's PostgreSQL backends (GeoDjango's builds on it).
_POSTGRESQL = ("django.db.backends.postgresql", "django.contrib.gis.db.backends.postgis")


def _opens_per_call(database: Mapping[str, Any]) -> bool:
    if database.get("ENGINE") not in _POSTGRESQL:
        return False
    options = database.get("OPTIONS") or {}
    return database.get("CONN_MAX_AGE", 0) == 0 and not options.get("pool")

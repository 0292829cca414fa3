"""System checks for ``settings.SQUAD_MEMORY`` (ids ``squad_memory.E001``...) and the database."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.utils.module_loading import import_string

from squad_memory.conf import DEFAULTS, SETTING_NAME, app_settings


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    value = getattr(settings, SETTING_NAME, {})
    if not isinstance(value, dict):
        return [Error(f"{SETTING_NAME} must be a dict.", id="squad_memory.E001")]
    errors: list[CheckMessage] = []
    errors += _check_unknown()
    errors += _check_summarizer()
    errors += _check_sizes()
    errors += _check_choices()
    errors += _check_limits()
    errors += _check_tokens()
    errors += _check_llm()
    return errors


def _check_unknown() -> list[CheckMessage]:
    return [
        Warning(
            f"{SETTING_NAME}[{key!r}] is not a squad_memory setting.",
            hint=f"Known settings: {', '.join(sorted(DEFAULTS))}.",
            id="squad_memory.W001",
        )
        for key in app_settings.unknown_keys()
    ]


def _check_summarizer() -> list[CheckMessage]:
    value = app_settings.raw("SUMMARIZER")
    if callable(value):
        return []
    try:
        func = import_string(value) if isinstance(value, str) else None
    except ImportError as exc:
        func, reason = None, str(exc)
    else:
        reason = "not a dotted path" if func is None else "not callable"
    if func is not None and callable(func):
        return []
    return [
        Error(
            f"{SETTING_NAME}['SUMMARIZER'] = {value!r} cannot be used: {reason}.",
            hint="Give the dotted path of a function (history, keep_last) -> list of messages.",
            id="squad_memory.E002",
        )
    ]


def _is_int(value: Any, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _check_sizes() -> list[CheckMessage]:
    trigger, keep = app_settings.raw("TRIGGER_AT"), app_settings.raw("KEEP_LAST")
    if not _is_int(trigger, 1):
        return [
            Error(
                f"{SETTING_NAME}['TRIGGER_AT'] must be an integer >= 1, got {trigger!r}.",
                id="squad_memory.E003",
            )
        ]
    if not _is_int(keep, 0):
        return [
            Error(
                f"{SETTING_NAME}['KEEP_LAST'] must be an integer >= 0, got {keep!r}.",
                id="squad_memory.E004",
            )
        ]
    if keep >= trigger:
        return [
            Error(
                f"{SETTING_NAME}['KEEP_LAST'] ({keep}) must be smaller than "
                f"TRIGGER_AT ({trigger}).",
                hint="Otherwise a compression can never shorten the buffer.",
                id="squad_memory.E005",
            )
        ]
    return []


def _check_choices() -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for name, choices, check_id in (
        ("MODE", ("inline", "celery"), "squad_memory.E006"),
        ("ON_ERROR", ("record", "raise"), "squad_memory.E007"),
    ):
        value = app_settings.raw(name)
        if value not in choices:
            errors.append(
                Error(
                    f"{SETTING_NAME}[{name!r}] must be one of {', '.join(choices)}; got {value!r}.",
                    id=check_id,
                )
            )
    if app_settings.raw("MODE") == "celery" and not _celery_installed():
        errors.append(
            Error(
                f"{SETTING_NAME}['MODE'] is 'celery' but Celery is not installed.",
                hint="pip install 'squad-memory[celery]'",
                id="squad_memory.E008",
            )
        )
    return errors


def _celery_installed() -> bool:
    try:
        import celery  # noqa: F401
    except ImportError:
        return False
    return True


def _check_limits() -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for name in (
        "PENDING_TIMEOUT",
        "MAX_MESSAGE_BYTES",
        "MAX_BATCH_SIZE",
        "MAX_ID_LENGTH",
        "CELERY_MAX_RETRIES",
    ):
        value = app_settings.raw(name)
        minimum = 0 if name == "CELERY_MAX_RETRIES" else 1
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < minimum:
            errors.append(
                Error(
                    f"{SETTING_NAME}[{name!r}] must be a number >= {minimum}, got {value!r}.",
                    id="squad_memory.E009",
                )
            )
    if _is_int(app_settings.raw("MAX_ID_LENGTH"), 1) and app_settings.raw("MAX_ID_LENGTH") > 255:
        errors.append(
            Error(
                f"{SETTING_NAME}['MAX_ID_LENGTH'] cannot exceed 255, the length of the id columns.",
                id="squad_memory.E010",
            )
        )
    return errors


def _check_tokens() -> list[CheckMessage]:
    """Token budgets (E040) and the counter (E041)."""
    errors: list[CheckMessage] = []
    budgets = {name: app_settings.raw(name) for name in ("TRIGGER_TOKENS", "MAX_BUFFER_TOKENS")}
    for name, value in budgets.items():
        if value is not None and not _is_int(value, 1):
            errors.append(
                Error(
                    f"{SETTING_NAME}[{name!r}] must be None or an integer >= 1, got {value!r}.",
                    id="squad_memory.E040",
                )
            )
    trigger, limit = budgets["TRIGGER_TOKENS"], budgets["MAX_BUFFER_TOKENS"]
    if not errors and trigger is not None and limit is not None and limit < trigger:
        errors.append(
            Error(
                f"{SETTING_NAME}['MAX_BUFFER_TOKENS'] ({limit}) must be at least "
                f"TRIGGER_TOKENS ({trigger}).",
                id="squad_memory.E040",
            )
        )
    counter = app_settings.raw("TOKEN_COUNTER")
    try:
        resolved = counter if callable(counter) else import_string(counter)
    except (ImportError, TypeError, ValueError) as exc:
        resolved, reason = None, str(exc)
    else:
        reason = "it is not callable"
    if not callable(resolved):
        errors.append(
            Error(
                f"{SETTING_NAME}['TOKEN_COUNTER'] = {counter!r} cannot be used: {reason}.",
                hint="A dotted path of a function (message) -> int.",
                id="squad_memory.E041",
            )
        )
    return errors


_LLM_PATH = "squad_memory.summarizers.llm.summarize"


def _check_llm() -> list[CheckMessage]:
    """SQUAD_MEMORY['LLM'] (E020-E024), checked fully when the LLM summarizer is configured."""
    conf = app_settings.raw("LLM")
    if not isinstance(conf, dict):
        return [Error(f"{SETTING_NAME}['LLM'] must be a dict.", id="squad_memory.E020")]
    size = app_settings.raw("MAX_SUMMARY_CHARS")
    errors: list[CheckMessage] = []
    if not _is_int(size, 100):
        errors.append(
            Error(
                f"{SETTING_NAME}['MAX_SUMMARY_CHARS'] must be an integer >= 100, got {size!r}.",
                id="squad_memory.E021",
            )
        )
    if app_settings.raw("SUMMARIZER") != _LLM_PATH:
        return errors
    merged = {**DEFAULTS["LLM"], **conf}
    backend = merged["BACKEND"]
    if backend not in ("openai", "anthropic", "agent"):
        errors.append(
            Error(
                f"{SETTING_NAME}['LLM']['BACKEND'] must be openai, anthropic or "
                f"agent; got {backend!r}.",
                id="squad_memory.E022",
            )
        )
    elif backend != "agent" and not merged["MODEL"]:
        errors.append(
            Error(
                f"{SETTING_NAME}['LLM']['MODEL'] is required by the {backend} backend.",
                hint="e.g. 'gpt-4o-mini', or the model name your server serves.",
                id="squad_memory.E023",
            )
        )
    elif backend != "agent" and not _installed(backend):
        errors.append(
            Error(
                f"{SETTING_NAME}['LLM']['BACKEND'] is {backend!r} "
                "but that package is not installed.",
                hint=f"pip install 'squad-memory[{backend}]'",
                id="squad_memory.E024",
            )
        )
    return errors


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@register()
def check_retention(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``RETAIN_DAYS`` is None (keep forever) or a positive number of days (E030)."""
    value = getattr(settings, SETTING_NAME, {})
    days = value.get("RETAIN_DAYS") if isinstance(value, dict) else None
    valid = isinstance(days, int | float) and not isinstance(days, bool) and days > 0
    if days is None or valid:
        return []
    return [
        Error(
            f"{SETTING_NAME}['RETAIN_DAYS'] must be None (keep forever) or a positive number "
            f"of days, not {days!r}.",
            id="squad_memory.E030",
        )
    ]


_SQLITE_OPTIONS = '{"transaction_mode": "IMMEDIATE", "timeout": 20}'


@register()
def check_sqlite(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W002: SQLite as the default database must wait for a second writer's lock."""
    default = settings.DATABASES.get("default", {})
    if default.get("ENGINE") != "django.db.backends.sqlite3":
        return []
    options = default.get("OPTIONS") or {}
    immediate = str(options.get("transaction_mode", "")).upper() == "IMMEDIATE"
    if immediate and "timeout" in options:
        return []
    return [
        Warning(
            "The default database is SQLite without OPTIONS "
            '"transaction_mode": "IMMEDIATE" and a "timeout": saves fail with '
            '"database is locked" while another process (a Celery worker, a second '
            "web process, a management command) writes.",
            hint=f"Set DATABASES['default']['OPTIONS'] to include {_SQLITE_OPTIONS}.",
            id="squad_memory.W002",
        )
    ]

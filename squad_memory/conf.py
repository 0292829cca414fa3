"""Settings of squad_memory: one ``SQUAD_MEMORY`` dict over :data:`DEFAULTS`, read live
(never at import time or in model definitions), so ``override_settings`` works. Every
setting is documented in ``docs/reference/settings.md``, kept in step with this table.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

SETTING_NAME = "SQUAD_MEMORY"

DEFAULTS: dict[str, Any] = {
    # The summarizer: dotted path of ``(history, keep_last) -> list[ConversationMessage]``.
    "SUMMARIZER": "squad_memory.summarizers.offline.summarize",
    "TRIGGER_AT": 20,
    "KEEP_LAST": 2,
    "MAX_BUFFER_PAIRS": None,
    "TRIGGER_TOKENS": None,
    "MAX_BUFFER_TOKENS": None,
    # The most newest messages of each slot fetch_all_chats reads (None: every one).
    "FETCH_ALL_LIMIT": 1000,
    "TOKEN_COUNTER": "squad_memory.rules.estimate_tokens",
    "ON_ERROR": "record",
    # "inline", "celery", "tasks", or the dotted path of a Dispatcher class.
    "MODE": "inline",
    "PENDING_TIMEOUT": 600,
    "CLAIM_LEASE": 30,
    "PUBLISH_TIMEOUT": 2.0,
    # Threads serving async callers outside a Django request: database calls (one
    # connection per thread and database at most) and synchronous summarizers.
    "DATABASE_THREADS": 20,
    "SUMMARIZER_THREADS": 20,
    # Seconds: a database call of an async caller, a wait on a slot's row lock (by the database
    # threads' sessions), a summarizer call on a summarizer thread or awaited. None: no bound.
    "CALL_TIMEOUT": 30.0,
    "LOCK_TIMEOUT": 10.0,
    "SUMMARIZER_TIMEOUT": 120.0,
    # Under ASGI with squad_memory.middleware.AdmissionMiddleware: the longest a request waits
    # for one of the DATABASE_THREADS turns before its 503.
    "REQUEST_QUEUE_TIMEOUT": 30.0,
    # Retries of a queued compression (Celery and tasks mode), with exponential backoff.
    "RETRIES": 3,
    "RETRY_BACKOFF": 2,
    "RETRY_BACKOFF_MAX": 60,
    "CELERY_QUEUE": None,
    # Tasks mode: the alias of the backend in Django's TASKS, the queue and priority.
    "TASKS_BACKEND": "default",
    "TASKS_QUEUE": "default",
    "TASKS_PRIORITY": 0,
    # Tasks mode with django-tasks-db: seconds finished compressions' task rows are kept.
    "TASKS_RESULTS_TTL": 24 * 60 * 60,
    "USER_ID_RESOLVER": "squad_memory.api.access.default_user_id",
    "API_POST_PERMISSION": "squad_memory.add_message",
    "MAX_MESSAGE_BYTES": 64 * 1024,
    # Parts per message: each costs the server to validate, store and echo, whatever its size.
    "MAX_CONTENT_BLOCKS": 100,
    "MAX_CITATIONS": 100,
    "MAX_BATCH_SIZE": 100,
    "MAX_ID_LENGTH": 255,
    "RETAIN_DAYS": None,
    "ALLOW_INVISIBLE_IDS": False,
    "IDEMPOTENCY_TTL": 24 * 60 * 60,
    "MAX_SUMMARY_CHARS": 4000,
    "SEARCH_TIMEOUT": 5.0,
    "LLM": {
        "BACKEND": "openai",
        "BASE_URL": None,
        "API_KEY": None,
        "MODEL": None,
        "TIMEOUT": 30.0,
        "MAX_RETRIES": 2,
        "MAX_TOKENS": 1024,
        "SUMMARY_TOKENS": None,
        "TEMPERATURE": 0.2,
        "PROMPT": None,
        "SYSTEM": None,
        "AGENT": None,
    },
}


#: The longest time setting, in days (a cutoff date further back would be before year 1).
MAX_DAYS = 36525


@dataclass(frozen=True)
class Range:
    """The values a numeric setting accepts: ``low`` (excluded if ``above``) to ``high``,
    integers only if ``integer``, and None too if ``optional``."""

    low: float
    high: float = math.inf
    integer: bool = False
    optional: bool = False
    above: bool = False

    def accepts(self, value: Any) -> bool:
        if value is None or isinstance(value, bool):
            return value is None and self.optional
        if not isinstance(value, int if self.integer else int | float) or not math.isfinite(value):
            return False
        return self.low < value <= self.high if self.above else self.low <= value <= self.high

    def __str__(self) -> str:
        kind = "an integer" if self.integer else "a number"
        low = f"above {self.low:g}" if self.above else f"of at least {self.low:g}"
        high = "" if math.isinf(self.high) else f" and at most {self.high:g}"
        return f"{'None or ' if self.optional else ''}{kind} {low}{high}"


#: The range of each numeric setting, checked by the system checks and where it is read (the
#: sizes are checked together by the compression policy, ``TASKS_PRIORITY`` by the task
#: backend); ``LLM.`` names the keys of ``LLM``.
NUMBERS: dict[str, Range] = {
    "PENDING_TIMEOUT": Range(1, MAX_DAYS * 86400),
    "CLAIM_LEASE": Range(0.5, MAX_DAYS * 86400),
    "PUBLISH_TIMEOUT": Range(0, 60, above=True),
    "RETRIES": Range(0, 100, integer=True),
    "RETRY_BACKOFF": Range(0, 86400),
    "RETRY_BACKOFF_MAX": Range(0, 86400),
    "MAX_MESSAGE_BYTES": Range(1, integer=True),
    "MAX_BATCH_SIZE": Range(1, integer=True),
    "MAX_ID_LENGTH": Range(1, 255, integer=True),
    "MAX_SUMMARY_CHARS": Range(100, integer=True),
    "FETCH_ALL_LIMIT": Range(1, integer=True, optional=True),
    # Past 10,000 parts a message, a batch at the size limit costs the server seconds
    # (``python -m bench.api_cost --bodies``).
    "MAX_CONTENT_BLOCKS": Range(1, 10_000, integer=True),
    "MAX_CITATIONS": Range(1, 10_000, integer=True),
    "SEARCH_TIMEOUT": Range(0, 3600, optional=True),
    "TASKS_RESULTS_TTL": Range(0, MAX_DAYS * 86400, optional=True),
    "DATABASE_THREADS": Range(1, 1000, integer=True),
    "SUMMARIZER_THREADS": Range(1, 1000, integer=True),
    "CALL_TIMEOUT": Range(0, 86400, optional=True, above=True),
    "LOCK_TIMEOUT": Range(0, 3600, optional=True, above=True),
    "SUMMARIZER_TIMEOUT": Range(0, 86400, optional=True, above=True),
    "REQUEST_QUEUE_TIMEOUT": Range(0, 3600, above=True),
    "IDEMPOTENCY_TTL": Range(0, MAX_DAYS * 86400),
    "RETAIN_DAYS": Range(0, MAX_DAYS, optional=True, above=True),  # days
    "LLM.TIMEOUT": Range(0, 3600, above=True),
    "LLM.MAX_RETRIES": Range(0, 100, integer=True),
    "LLM.MAX_TOKENS": Range(1, integer=True, optional=True),
    "LLM.SUMMARY_TOKENS": Range(1, integer=True, optional=True),
    "LLM.TEMPERATURE": Range(0, 2, optional=True),
}


def number_problem(name: str, value: Any) -> str | None:
    """Why ``value`` cannot be the numeric setting ``name`` (a key of :data:`NUMBERS`)."""
    if NUMBERS[name].accepts(value):
        return None
    where = "".join(f"[{part!r}]" for part in name.split("."))
    return f"{SETTING_NAME}{where} must be {NUMBERS[name]}, got {value!r}."


#: Old names that still work, with a ``DeprecationWarning``: old name -> new name.
RENAMED = {
    "CELERY_MAX_RETRIES": "RETRIES",
    "CELERY_RETRY_BACKOFF": "RETRY_BACKOFF",
    "CELERY_RETRY_BACKOFF_MAX": "RETRY_BACKOFF_MAX",
}
_OLD_NAMES = {new: old for old, new in RENAMED.items()}

T = TypeVar("T")


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


class Setting(Generic[T]):
    """A typed attribute of :class:`Settings`: the setting of its name in upper case, read
    live and converted by ``convert``."""

    def __init__(self, convert: Callable[[Any], T]) -> None:
        self.convert = convert
        #: The value last read and what it became: read again, the same object is not
        #: checked and converted again (a changed setting is a different object).
        self._last: tuple[Any, T] | None = None

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name.upper()

    @overload
    def __get__(self, instance: None, owner: type) -> Setting[T]: ...
    @overload
    def __get__(self, instance: Settings, owner: type) -> T: ...
    def __get__(self, instance: Settings | None, owner: type) -> Setting[T] | T:
        if instance is None:
            return self
        value = instance.raw(self.name)
        last = self._last
        if last is not None and last[0] is value:
            return last[1]
        if self.name in NUMBERS and (problem := number_problem(self.name, value)) is not None:
            raise ImproperlyConfigured(problem)
        converted = self.convert(value)
        self._last = (value, converted)
        return converted


class Settings:
    """Typed, live view of ``settings.SQUAD_MEMORY`` over :data:`DEFAULTS`."""

    trigger_at = Setting(int)
    keep_last = Setting(int)
    max_buffer_pairs = Setting(_optional_int)
    trigger_tokens = Setting(_optional_int)
    max_buffer_tokens = Setting(_optional_int)
    fetch_all_limit = Setting(_optional_int)
    on_error = Setting(str)
    mode = Setting(str)
    pending_timeout = Setting(float)
    claim_lease = Setting(float)
    publish_timeout = Setting(float)
    database_threads = Setting(int)
    summarizer_threads = Setting(int)
    call_timeout = Setting(_optional_float)
    lock_timeout = Setting(_optional_float)
    summarizer_timeout = Setting(_optional_float)
    request_queue_timeout = Setting(float)
    retries = Setting(int)
    retry_backoff = Setting(float)
    retry_backoff_max = Setting(float)
    tasks_results_ttl = Setting(lambda value: None if value is None else float(value))
    max_message_bytes = Setting(int)
    max_content_blocks = Setting(int)
    max_citations = Setting(int)
    max_batch_size = Setting(int)
    max_id_length = Setting(int)
    max_summary_chars = Setting(int)
    allow_invisible_ids = Setting(bool)
    idempotency_ttl = Setting(float)
    search_timeout = Setting(lambda value: float(value or 0))

    def user(self) -> dict[str, Any]:
        """The dict as configured (``ImproperlyConfigured`` if it is not a dict)."""
        value = getattr(django_settings, SETTING_NAME, {})
        if not isinstance(value, dict):
            raise ImproperlyConfigured(
                f"{SETTING_NAME} must be a dict, not {type(value).__name__}."
            )
        return value

    def raw(self, name: str) -> Any:
        """The value as configured, unchecked (the system checks check it)."""
        if name not in DEFAULTS:
            raise AttributeError(f"Unknown {SETTING_NAME} setting {name!r}.")
        user = self.user()
        old = _OLD_NAMES.get(name)
        if name not in user and old in user:
            warnings.warn(
                f"{SETTING_NAME}[{old!r}] is deprecated (it governs tasks mode too): "
                f"rename it {name!r}.",
                DeprecationWarning,
                stacklevel=2,
            )
            return user[old]
        return user.get(name, DEFAULTS[name])

    def unknown_keys(self) -> list[str]:
        return sorted(set(self.user()) - set(DEFAULTS) - set(RENAMED))

    def import_callable(self, name: str) -> Callable[..., Any]:
        """Resolve a dotted-path setting, with an error that names the setting."""
        return resolve_callable(name, self.raw(name))

    @property
    def llm(self) -> dict[str, Any]:
        """``LLM`` merged over its defaults."""
        configured = self.raw("LLM") or {}
        if not isinstance(configured, dict):
            raise ImproperlyConfigured(f"{SETTING_NAME}['LLM'] must be a dict.")
        merged = {**DEFAULTS["LLM"], **configured}
        for key, value in merged.items():
            if f"LLM.{key}" in NUMBERS and (problem := number_problem(f"LLM.{key}", value)):
                raise ImproperlyConfigured(problem)
        return merged

    def number_problems(self) -> list[tuple[str, str]]:
        """(name, why) of each numeric setting of :data:`NUMBERS` out of its range."""
        llm = self.raw("LLM") if isinstance(self.raw("LLM"), dict) else {}
        values = {f"LLM.{key}": value for key, value in {**DEFAULTS["LLM"], **llm}.items()}
        values.update((name, self.raw(name)) for name in NUMBERS if name in DEFAULTS)
        found = ((name, number_problem(name, values[name])) for name in NUMBERS)
        return [(name, problem) for name, problem in found if problem is not None]


def resolve_callable(name: str, value: Any) -> Callable[..., Any]:
    """The callable a setting ``name`` holds, or imports by dotted path ``value``."""
    if callable(value):
        return value  # type: ignore[no-any-return]
    try:
        return import_string(value)  # type: ignore[no-any-return]
    except (ImportError, TypeError, ValueError, AttributeError) as exc:
        raise ImproperlyConfigured(
            f"{SETTING_NAME}[{name!r}] = {value!r} cannot be imported: {exc}"
        ) from exc


app_settings = Settings()

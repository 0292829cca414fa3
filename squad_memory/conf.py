"""Settings of squad_memory: one ``SQUAD_MEMORY`` dict over :data:`DEFAULTS`, read live
(never at import time or in model definitions), so ``override_settings`` works. Every
setting is documented in ``docs/reference/settings.md``, kept in step with this table.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
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
    "TOKEN_COUNTER": "squad_memory.rules.estimate_tokens",
    "ON_ERROR": "record",
    # "inline", "celery", "tasks", or the dotted path of a Dispatcher class.
    "MODE": "inline",
    "PENDING_TIMEOUT": 600,
    "CLAIM_LEASE": 30,
    "PUBLISH_TIMEOUT": 2.0,
    # Retries of a queued compression (Celery and tasks mode), with exponential backoff.
    "RETRIES": 3,
    "RETRY_BACKOFF": 2,
    "RETRY_BACKOFF_MAX": 60,
    "CELERY_QUEUE": None,
    # Tasks mode: the alias of the backend in Django's TASKS, the queue and priority.
    "TASKS_BACKEND": "default",
    "TASKS_QUEUE": "default",
    "TASKS_PRIORITY": 0,
    "USER_ID_RESOLVER": "squad_memory.api.access.default_user_id",
    "API_POST_PERMISSION": "squad_memory.add_message",
    "MAX_MESSAGE_BYTES": 64 * 1024,
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


class Setting(Generic[T]):
    """A typed attribute of :class:`Settings`: the setting of its name in upper case, read
    live and converted by ``convert``."""

    def __init__(self, convert: Callable[[Any], T]) -> None:
        self.convert = convert

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name.upper()

    @overload
    def __get__(self, instance: None, owner: type) -> Setting[T]: ...
    @overload
    def __get__(self, instance: Settings, owner: type) -> T: ...
    def __get__(self, instance: Settings | None, owner: type) -> Setting[T] | T:
        return self if instance is None else self.convert(instance.raw(self.name))


class Settings:
    """Typed, live view of ``settings.SQUAD_MEMORY`` over :data:`DEFAULTS`."""

    trigger_at = Setting(int)
    keep_last = Setting(int)
    max_buffer_pairs = Setting(_optional_int)
    trigger_tokens = Setting(_optional_int)
    max_buffer_tokens = Setting(_optional_int)
    on_error = Setting(str)
    mode = Setting(str)
    pending_timeout = Setting(float)
    claim_lease = Setting(float)
    publish_timeout = Setting(float)
    max_message_bytes = Setting(int)
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
        return {**DEFAULTS["LLM"], **configured}


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

"""Settings of squad_memory: one ``SQUAD_MEMORY`` dict, read live.

Every value is looked up in the dict when used, and the dict is looked up again
whenever Django signals a change to it, so ``override_settings`` works; nothing
is read at import time or in model definitions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

SETTING_NAME = "SQUAD_MEMORY"

DEFAULTS: dict[str, Any] = {
    # Dotted path of the summarizer: ``(history, keep_last) -> list[ConversationMessage]``.
    "SUMMARIZER": "squad_memory.summarizers.offline.summarize",
    # Compress when the buffer holds more than TRIGGER_AT message pairs.
    "TRIGGER_AT": 20,
    # Message pairs the summarizer keeps verbatim.
    "KEEP_LAST": 2,
    # The hard limit: fetch_chat returns at most the summary plus this many newest pairs
    # while compressions lag or fail. None: 3 x TRIGGER_AT (the slot's own trigger_at).
    "MAX_BUFFER_PAIRS": None,
    # Token budgets (None: off). Compress an active buffer also when it holds more than
    # TRIGGER_TOKENS tokens (whichever of TRIGGER_AT and TRIGGER_TOKENS trips first).
    "TRIGGER_TOKENS": None,
    # The hard limit in tokens: fetch_chat returns the summary plus the newest messages
    # that fit in MAX_BUFFER_TOKENS while compressions lag or fail.
    "MAX_BUFFER_TOKENS": None,
    # Dotted path of ``(message) -> int``: the tokens of one stored message, counted once
    # at save. The default is an offline estimate (UTF-8 bytes of text / 4).
    "TOKEN_COUNTER": "squad_memory.tokens.estimate",
    # "record": a summarizer error is logged and the save succeeds; "raise": the save raises.
    "ON_ERROR": "record",
    # "inline": compress on the caller's thread; "celery": in a worker.
    "MODE": "inline",
    # Seconds a claim waiting in a queue for a worker lives (its worker or broker died).
    "PENDING_TIMEOUT": 600,
    # Seconds a running compression's claim lives unless renewed (renewed every third of it):
    # a claim whose process died is taken over within this time.
    "CLAIM_LEASE": 30,
    # Celery mode: seconds a save waits for the broker (connect and publish) before giving up.
    "PUBLISH_TIMEOUT": 2.0,
    # Celery mode: attempts after the first, and backoff base/maximum in seconds.
    "CELERY_MAX_RETRIES": 3,
    "CELERY_RETRY_BACKOFF": 2,
    "CELERY_RETRY_BACKOFF_MAX": 60,
    "CELERY_QUEUE": None,
    # API: maps a request user to the user_id of the slots they own.
    "USER_ID_RESOLVER": "squad_memory.api.access.default_user_id",
    # Limits applied to messages entering through the API and importers.
    "MAX_MESSAGE_BYTES": 64 * 1024,
    "MAX_BATCH_SIZE": 100,
    "MAX_ID_LENGTH": 255,
    # Retention: slots idle for more than this many days are deleted by the sweep and
    # squad_memory_purge; None keeps everything forever.
    "RETAIN_DAYS": None,
    # Async ChatStorage calls run on the event loop with their own connection (PostgreSQL
    # with psycopg 3, SQLite) where they can, instead of a thread hop per call.
    "NATIVE_ASYNC": True,
    # Allow bidirectional controls and zero-width characters in ids (refused by default).
    "ALLOW_INVISIBLE_IDS": False,
    # API: seconds an Idempotency-Key (and the response it replays) is kept.
    "IDEMPOTENCY_TTL": 24 * 60 * 60,
    # Shipped summarizers: the summary message's maximum length in characters (offline and LLM).
    "MAX_SUMMARY_CHARS": 4000,
    # The LLMSummarizer built from settings ("squad_memory.summarizers.llm.summarize").
    # Keys given in settings are merged over these.
    "LLM": {
        # "openai" (any OpenAI-compatible chat-completions endpoint) or "anthropic".
        "BACKEND": "openai",
        # None: the SDK's default endpoint (or OPENAI_BASE_URL / ANTHROPIC_BASE_URL).
        "BASE_URL": None,
        # None: the SDK reads OPENAI_API_KEY / ANTHROPIC_API_KEY.
        "API_KEY": None,
        # Required: the model name, e.g. "gpt-4o-mini", "llama3.1" (Ollama), a Claude model.
        "MODEL": None,
        # Seconds per request; a timeout raises SummarizerTimeout and is retried later.
        "TIMEOUT": 30.0,
        # Retries done by the SDK itself within one compression.
        "MAX_RETRIES": 2,
        "MAX_TOKENS": 1024,
        # None: no token budget; else the summary's budget in tokens, put in the prompt
        # and sent as the request's max_tokens.
        "SUMMARY_TOKENS": None,
        "TEMPERATURE": 0.2,
        # None: the built-in prompt; else a template with {previous}, {messages}, {max_chars}.
        "PROMPT": None,
        # None: the built-in system prompt.
        "SYSTEM": None,
        # BACKEND "agent": the agent-squad agent (object or dotted path) that writes summaries.
        "AGENT": None,
    },
}

_MODES = ("inline", "celery")
_ON_ERROR = ("record", "raise")


class Settings:
    """Typed, live view of ``settings.SQUAD_MEMORY`` over :data:`DEFAULTS`.

    The dict is looked up once and kept until Django's ``setting_changed`` signal says
    it changed (``override_settings``, the test runner's settings fixtures); a value
    changed inside the dict shows at once."""

    _configured: dict[str, Any] | None = None
    _changes = 0  # forget() calls: a read that raced one is not kept

    def _user(self) -> dict[str, Any]:
        value = self._configured
        if value is not None:
            return value
        changes = self._changes
        value = getattr(django_settings, SETTING_NAME, {})
        if not isinstance(value, dict):
            raise ImproperlyConfigured(
                f"{SETTING_NAME} must be a dict, not {type(value).__name__}."
            )
        if changes == self._changes:  # else the setting changed meanwhile: read it again next time
            self._configured = value
        return value

    def forget(self) -> None:
        """Look ``settings.SQUAD_MEMORY`` up again on the next read."""
        self._changes += 1
        self._configured = None

    def raw(self, name: str) -> Any:
        """The value as configured, unchecked (for the system checks)."""
        if name not in DEFAULTS:
            raise AttributeError(f"Unknown {SETTING_NAME} setting {name!r}.")
        return self._user().get(name, DEFAULTS[name])

    def unknown_keys(self) -> list[str]:
        return sorted(set(self._user()) - set(DEFAULTS))

    @property
    def summarizer_path(self) -> str | Callable[..., Any]:
        value: str | Callable[..., Any] = self.raw("SUMMARIZER")
        return value

    @property
    def trigger_at(self) -> int:
        return int(self.raw("TRIGGER_AT"))

    @property
    def keep_last(self) -> int:
        return int(self.raw("KEEP_LAST"))

    @property
    def max_buffer_pairs(self) -> int | None:
        value = self.raw("MAX_BUFFER_PAIRS")
        return None if value is None else int(value)

    @property
    def trigger_tokens(self) -> int | None:
        value = self.raw("TRIGGER_TOKENS")
        return None if value is None else int(value)

    @property
    def max_buffer_tokens(self) -> int | None:
        value = self.raw("MAX_BUFFER_TOKENS")
        return None if value is None else int(value)

    @property
    def on_error(self) -> str:
        return str(self.raw("ON_ERROR"))

    @property
    def mode(self) -> str:
        return str(self.raw("MODE"))

    @property
    def pending_timeout(self) -> float:
        return float(self.raw("PENDING_TIMEOUT"))

    @property
    def max_message_bytes(self) -> int:
        return int(self.raw("MAX_MESSAGE_BYTES"))

    @property
    def max_batch_size(self) -> int:
        return int(self.raw("MAX_BATCH_SIZE"))

    @property
    def max_id_length(self) -> int:
        return int(self.raw("MAX_ID_LENGTH"))

    @property
    def claim_lease(self) -> float:
        return float(self.raw("CLAIM_LEASE"))

    @property
    def publish_timeout(self) -> float:
        return float(self.raw("PUBLISH_TIMEOUT"))

    @property
    def celery_max_retries(self) -> int:
        return int(self.raw("CELERY_MAX_RETRIES"))

    @property
    def celery_retry_backoff(self) -> float:
        return float(self.raw("CELERY_RETRY_BACKOFF"))

    @property
    def celery_retry_backoff_max(self) -> float:
        return float(self.raw("CELERY_RETRY_BACKOFF_MAX"))

    @property
    def celery_queue(self) -> str | None:
        value = self.raw("CELERY_QUEUE")
        return str(value) if value else None

    @property
    def max_summary_chars(self) -> int:
        return int(self.raw("MAX_SUMMARY_CHARS"))

    @property
    def llm(self) -> dict[str, Any]:
        """``LLM`` merged over its defaults."""
        configured = self.raw("LLM") or {}
        if not isinstance(configured, dict):
            raise ImproperlyConfigured(f"{SETTING_NAME}['LLM'] must be a dict.")
        return {**DEFAULTS["LLM"], **configured}

    @property
    def retain_days(self) -> float | None:
        value = self.raw("RETAIN_DAYS")
        return None if value is None else float(value)

    @property
    def native_async(self) -> bool:
        return bool(self.raw("NATIVE_ASYNC"))

    @property
    def allow_invisible_ids(self) -> bool:
        return bool(self.raw("ALLOW_INVISIBLE_IDS"))

    @property
    def idempotency_ttl(self) -> float:
        return float(self.raw("IDEMPOTENCY_TTL"))

    def import_callable(self, name: str) -> Callable[..., Any]:
        """Resolve a dotted-path setting, with an error that names the setting."""
        return resolve_callable(name, self.raw(name))


def resolve_callable(name: str, value: Any) -> Callable[..., Any]:
    """The callable a setting ``name`` holds, or imports by dotted path ``value``."""
    if callable(value):
        return value  # type: ignore[no-any-return]
    try:
        return import_string(value)  # type: ignore[no-any-return]
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"{SETTING_NAME}[{name!r}] = {value!r} cannot be imported: {exc}"
        ) from exc


app_settings = Settings()


@receiver(setting_changed)
def _setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == SETTING_NAME:
        app_settings.forget()

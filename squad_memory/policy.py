"""A storage's compression policy: the summarizer, the sizes and the mode, checked once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from squad_memory.conf import app_settings
from squad_memory.exceptions import ConfigurationError
from squad_memory.summarizers import Summarizer, require_importable

MODES = ("inline", "celery")
ON_ERROR = ("record", "raise")


@dataclass(frozen=True)
class Policy:
    """How a storage compresses: each slot's own overrides win over these."""

    summarizer: Summarizer
    trigger_at: int = 20
    keep_last: int = 2
    mode: str = "inline"
    on_error: str = "record"
    #: The hard limit on what a fetch returns, in pairs; None: 3 x the slot's trigger_at.
    max_buffer_pairs: int | None = None
    #: Compress also when the buffer holds more tokens than this; None: off.
    trigger_tokens: int | None = None
    #: The hard limit on what a fetch returns, in tokens; None: off.
    max_buffer_tokens: int | None = None

    def __post_init__(self) -> None:
        check_sizes(self.trigger_at, self.keep_last)
        if self.max_buffer_pairs is not None and (
            not isinstance(self.max_buffer_pairs, int) or self.max_buffer_pairs < self.trigger_at
        ):
            raise ConfigurationError(
                f"max_buffer_pairs must be an integer of at least trigger_at ({self.trigger_at}), "
                f"got {self.max_buffer_pairs!r}."
            )
        check_tokens(self.trigger_tokens, self.max_buffer_tokens)
        check_choice("mode", self.mode, MODES)
        check_choice("on_error", self.on_error, ON_ERROR)
        if self.mode == "celery":
            require_importable(self.summarizer)

    @property
    def lease_seconds(self) -> float:
        """How long a running compression's claim lives unless renewed."""
        return app_settings.claim_lease

    @property
    def queued_lease_seconds(self) -> float:
        """How long a claim waiting in a queue for a worker lives (``PENDING_TIMEOUT``)."""
        return app_settings.pending_timeout


def check_sizes(trigger_at: Any, keep_last: Any) -> None:
    """``trigger_at`` a positive integer, ``keep_last`` a smaller non-negative one."""
    if not isinstance(trigger_at, int) or isinstance(trigger_at, bool) or trigger_at < 1:
        raise ConfigurationError(f"trigger_at must be a positive integer, got {trigger_at!r}.")
    if not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 0:
        raise ConfigurationError(f"keep_last must be a non-negative integer, got {keep_last!r}.")
    if keep_last >= trigger_at:
        raise ConfigurationError(
            f"keep_last ({keep_last}) must be smaller than trigger_at ({trigger_at}), "
            f"or a compression could never shorten the buffer."
        )


def check_tokens(trigger_tokens: Any, max_buffer_tokens: Any) -> None:
    """Token budgets: None or positive integers, the hard limit not below the trigger."""
    for name, value in (
        ("trigger_tokens", trigger_tokens),
        ("max_buffer_tokens", max_buffer_tokens),
    ):
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            raise ConfigurationError(f"{name} must be None or a positive integer, got {value!r}.")
    if (
        trigger_tokens is not None
        and max_buffer_tokens is not None
        and (max_buffer_tokens < trigger_tokens)
    ):
        raise ConfigurationError(
            f"max_buffer_tokens ({max_buffer_tokens}) must be at least trigger_tokens "
            f"({trigger_tokens})."
        )


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigurationError(f"{name} must be one of {', '.join(choices)}; got {value!r}.")

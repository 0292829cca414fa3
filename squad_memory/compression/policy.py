"""A storage's compression policy: the summarizer, the sizes, the mode, checked once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from squad_memory.conf import app_settings
from squad_memory.exceptions import ConfigurationError
from squad_memory.models import Limits
from squad_memory.summarizers import Summarizer

ON_ERROR = ("record", "raise")


@dataclass(frozen=True)
class Policy:
    """How a storage compresses; each slot's own overrides win over ``limits``."""

    summarizer: Summarizer
    limits: Limits = field(default_factory=Limits)
    #: "inline", "celery", "tasks", or the dotted path of a Dispatcher class.
    mode: str = "inline"
    #: "record": a failed compression is logged and the save succeeds; "raise": it raises.
    on_error: str = "record"

    def __post_init__(self) -> None:
        problems = [text for _, text in limits_problems(self.limits)]
        problems += choice_problems("on_error", self.on_error, ON_ERROR)
        if problems:
            raise ConfigurationError(problems[0])

    @property
    def lease_seconds(self) -> float:
        """How long a running compression's claim lives unless renewed (``CLAIM_LEASE``)."""
        return app_settings.claim_lease


def _positive_int(value: Any, minimum: int = 1) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def limits_problems(limits: Limits) -> list[tuple[str, str]]:
    """What is wrong with a set of sizes, as (the size's name, the words the checks report)."""
    trigger, keep = limits.trigger_at, limits.keep_last
    if not _positive_int(trigger):
        return [("trigger_at", f"trigger_at must be a positive integer, got {trigger!r}.")]
    if not _positive_int(keep, 0):
        return [("keep_last", f"keep_last must be a non-negative integer, got {keep!r}.")]
    if keep >= trigger:
        text = (
            f"keep_last ({keep}) must be smaller than trigger_at ({trigger}), "
            "or a compression could never shorten the buffer."
        )
        return [("keep_last<trigger_at", text)]
    pairs = limits.max_buffer_pairs
    if pairs is not None and (not _positive_int(pairs) or pairs < trigger):
        text = f"max_buffer_pairs must be an integer of at least trigger_at ({trigger}): {pairs!r}."
        return [("max_buffer_pairs", text)]
    for name in ("trigger_tokens", "max_buffer_tokens"):
        value = getattr(limits, name)
        if value is not None and not _positive_int(value):
            return [(name, f"{name} must be None or a positive integer, got {value!r}.")]
    tokens, most = limits.trigger_tokens, limits.max_buffer_tokens
    if tokens is not None and most is not None and most < tokens:
        text = f"max_buffer_tokens ({most}) must be at least trigger_tokens ({tokens})."
        return [("max_buffer_tokens", text)]
    return []


def choice_problems(name: str, value: Any, choices: tuple[str, ...]) -> list[str]:
    if value in choices:
        return []
    return [f"{name} must be one of {', '.join(choices)}; got {value!r}."]

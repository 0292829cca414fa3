"""Token counts: what a message costs in a model's context window.

Every message is counted once, when it is saved, by the ``TOKEN_COUNTER`` setting
(a dotted path or a callable, ``(message) -> int``, where ``message`` is the stored
dict ``{"role", "content", "citations"}``); the count is stored on the row and
the slot keeps the running total of its buffer. The default, :func:`estimate`,
is a fast offline estimate that needs no tokenizer; the README shows how to plug
tiktoken or a provider's counter.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from squad_memory.conf import SETTING_NAME, app_settings, resolve_callable

#: Bytes of UTF-8 text per token in :func:`estimate` (about right for English prose).
BYTES_PER_TOKEN = 4
#: What :func:`estimate` charges for each block that is not text (an image, a tool call).
NON_TEXT_BLOCK_TOKENS = 64

Counter = Callable[[Mapping[str, Any]], int]


def estimate(message: Mapping[str, Any]) -> int:
    """UTF-8 bytes of the text blocks / 4 (rounded up), plus a fixed cost per other block."""
    text_bytes, other = 0, 0
    for block in message.get("content") or []:
        text = block.get("text") if isinstance(block, dict) else None
        if isinstance(text, str):
            text_bytes += len(text.encode("utf-8"))
        else:
            other += 1
    return math.ceil(text_bytes / BYTES_PER_TOKEN) + other * NON_TEXT_BLOCK_TOKENS


@functools.lru_cache(maxsize=8)
def _resolve(value: Any) -> Counter:
    # Cached: a save counts every message it stores.
    return resolve_callable("TOKEN_COUNTER", value)


def counter() -> Counter:
    """The configured ``TOKEN_COUNTER`` (resolved once per configured value)."""
    return _resolve(app_settings.raw("TOKEN_COUNTER"))


def count(message: Mapping[str, Any]) -> int:
    """The tokens of one stored message, by the configured counter (never negative)."""
    value = counter()(message)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ImproperlyConfigured(
            f"{SETTING_NAME}['TOKEN_COUNTER'] must return an int, got {type(value).__name__}."
        )
    return max(value, 0)


def count_all(messages: Iterable[Mapping[str, Any]]) -> int:
    """The tokens of several stored messages."""
    return sum(count(m) for m in messages)

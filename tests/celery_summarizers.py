"""Summarizers for the Celery tests: module level, so a worker process imports them by path.

Behaviour a test needs is set through module attributes (same process) or
environment variables (worker processes):

- ``SM_SUMMARIZER_SLEEP``: seconds :func:`slow` sleeps per call.
- ``SM_MARKER_DIR``: :func:`slow` writes a file there when a call starts.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_squad.types import ConversationMessage

#: Length of the history of every call made in this process.
CALLS: list[int] = []
#: Functions :func:`fold` runs in the middle of its call (saves "meanwhile").
DURING: list[Callable[[], None]] = []
#: How many more calls of :func:`flaky` fail.
FAILURES_LEFT = [0]


def _text(m: ConversationMessage) -> str:
    return str((m.content or [{}])[0].get("text", "")) if m.content else ""


def fold(history: list[ConversationMessage], keep_last: int) -> list[ConversationMessage]:
    """``[S(old texts joined by +)] + last keep_last pairs``; runs :data:`DURING` hooks first."""
    CALLS.append(len(history))
    while DURING:
        DURING.pop(0)()
    cut = max(len(history) - keep_last * 2, 0)
    old = "+".join(_text(m) for m in history[:cut])
    return [ConversationMessage("user", [{"text": f"S({old})"}]), *history[cut:]]


def short(history: list[ConversationMessage], keep_last: int) -> list[ConversationMessage]:
    """A summary of constant size: ``S<n>``, n the messages folded."""
    cut = max(len(history) - keep_last * 2, 0)
    return [ConversationMessage("user", [{"text": f"S{cut}"}]), *history[cut:]]


def forbidden(history: list[Any], keep_last: int) -> list[Any]:
    """Fails loudly: used where no summarizer call may happen in this process."""
    CALLS.append(len(history))
    raise AssertionError("the summarizer was called on the request path")


def flaky(history: list[ConversationMessage], keep_last: int) -> list[ConversationMessage]:
    """Fails while :data:`FAILURES_LEFT` is positive, then folds."""
    if FAILURES_LEFT[0] > 0:
        FAILURES_LEFT[0] -= 1
        CALLS.append(len(history))
        raise RuntimeError("summarizer backend unavailable (test)")
    return fold(history, keep_last)


def always_fails(history: list[Any], keep_last: int) -> list[Any]:
    CALLS.append(len(history))
    raise RuntimeError("summarizer backend unavailable (test)")


def slow(history: list[ConversationMessage], keep_last: int) -> list[ConversationMessage]:
    """Writes a marker file (if asked), sleeps ``SM_SUMMARIZER_SLEEP`` seconds, then folds."""
    marker_dir = os.environ.get("SM_MARKER_DIR")
    if marker_dir:
        Path(marker_dir, f"started-{os.getpid()}-{uuid.uuid4().hex}").write_text(str(len(history)))
    time.sleep(float(os.environ.get("SM_SUMMARIZER_SLEEP", "0.5")))
    return fold(history, keep_last)

"""The fake summarizer every system uses: deterministic, with a configurable sleep.

The sleep stands in for the LLM call. It is read from the environment at each
call so the benchmark process and the Celery worker agree:
``BENCH_SUMMARIZER_SLEEP`` for :func:`summarize` (0 by default) and
``BENCH_SLOW_SLEEP`` for :func:`summarize_slow` (1 s by default).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from agent_squad.types import ConversationMessage

FAST_ENV = "BENCH_SUMMARIZER_SLEEP"
SLOW_ENV = "BENCH_SLOW_SLEEP"


def sleep_of(env: str, default: float) -> float:
    return float(os.environ.get(env, default))


def _text(message: Any) -> str:
    content = getattr(message, "content", None) or []
    return " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))


def compress(history: list[Any], keep_last: int) -> list[Any]:
    """Keep the last ``keep_last`` pairs and fold the rest into one summary message."""
    cut = max(len(history) - keep_last * 2, 0)
    old, recent = history[:cut], history[cut:]
    first = _text(old[0])[:60] if old else ""
    last = _text(old[-1])[:60] if old else ""
    text = f"[Summary] {len(old)} earlier messages, from '{first}' to '{last}'."
    return [ConversationMessage(role="user", content=[{"text": text}]), *recent]


def summary_text(text: str) -> str:
    """The same summary for LangChain, whose LLM receives a prompt string."""
    return f"[Summary] {len(text)} characters of earlier conversation."


def summarize(history: list[Any], keep_last: int) -> list[Any]:
    """Sleep ``BENCH_SUMMARIZER_SLEEP`` seconds, then summarize (squad_memory, sync)."""
    time.sleep(sleep_of(FAST_ENV, 0.0))
    return compress(history, keep_last)


def summarize_slow(history: list[Any], keep_last: int) -> list[Any]:
    """Sleep ``BENCH_SLOW_SLEEP`` seconds, then summarize (the latency workload)."""
    time.sleep(sleep_of(SLOW_ENV, 1.0))
    return compress(history, keep_last)


async def asummarize(history: list[Any], keep_last: int) -> list[Any]:
    """Async twin of :func:`summarize` (agent-squad's wrapper awaits its summarizer)."""
    await asyncio.sleep(sleep_of(FAST_ENV, 0.0))
    return compress(history, keep_last)


async def asummarize_slow(history: list[Any], keep_last: int) -> list[Any]:
    """Async twin of :func:`summarize_slow`."""
    await asyncio.sleep(sleep_of(SLOW_ENV, 1.0))
    return compress(history, keep_last)

"""Summarizers: how the storage finds, names and calls one, and the two that ship. A
summarizer is ``(history: list[ConversationMessage], keep_last: int) ->
list[ConversationMessage]``: a function, async or not, a callable, or the dotted path of one.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync, iscoroutinefunction
from django.utils.module_loading import import_string

from squad_memory.conf import app_settings
from squad_memory.exceptions import ConfigurationError, SummarizerNotImportable
from squad_memory.summarizers.base import SUMMARY_PREFIX, is_summary, max_summary_chars
from squad_memory.summarizers.llm import LLMSummarizer
from squad_memory.summarizers.offline import OfflineSummarizer
from squad_memory.threads import summarizer_thread, summary_expired

SummarizerFunc = Callable[[list[Any], int], Any]


@dataclass(frozen=True)
class Summarizer:
    """A resolved summarizer: the callable, a label for the log, and its import path if any."""

    func: SummarizerFunc
    label: str
    path: str | None


def resolve(value: str | SummarizerFunc | Summarizer) -> Summarizer:
    """Resolve a dotted path or a callable into a :class:`Summarizer`."""
    if isinstance(value, Summarizer):
        return value
    if isinstance(value, str):
        try:
            func = import_string(value)
        except ImportError as exc:
            raise ConfigurationError(f"Summarizer {value!r} cannot be imported: {exc}") from exc
        return Summarizer(func, value, value)
    if not callable(value):
        raise ConfigurationError(
            f"summarizer must be a callable or a dotted path, got {type(value).__name__}."
        )
    path = importable_path(value)
    return Summarizer(value, path or _describe(value), path)


def resolve_or_failing(value: str) -> Summarizer:
    """The summarizer at ``value``; one that cannot be imported fails each call instead,
    so a worker's compression log says why (a worker must not crash on a bad path)."""
    try:
        return resolve(value)
    except ConfigurationError as exc:
        error = exc

        def unavailable(history: list[Any], keep_last: int) -> Any:
            raise error

        return Summarizer(unavailable, value, value)


def importable_path(func: Any) -> str | None:
    """The dotted path a worker can import ``func`` by, or None (lambda, closure, method)."""
    module, qualname = getattr(func, "__module__", None), getattr(func, "__qualname__", None)
    if module is None or qualname is None or "<" in qualname:
        # A callable instance: importable when it is a module-level object.
        return _instance_path(func)
    path = f"{module}.{qualname}"
    try:
        return path if import_string(path) is func else None
    except ImportError:
        return None


def _instance_path(obj: Any) -> str | None:
    for name, module in list(sys.modules.items()):
        for attr, value in list(getattr(module, "__dict__", {}).items()):
            if value is obj and not attr.startswith("_"):
                return f"{name}.{attr}"
    return None


def _describe(func: Any) -> str:
    module = getattr(func, "__module__", None) or type(func).__module__
    qualname = getattr(func, "__qualname__", None) or type(func).__qualname__
    return f"{module}.{qualname}"


def require_importable(summarizer: Summarizer) -> str:
    """The import path of a summarizer, or an error saying why a worker cannot run it."""
    if summarizer.path is None:
        raise SummarizerNotImportable(
            f"Celery mode runs the summarizer in a worker, which must import it by dotted path; "
            f"{summarizer.label} is a lambda, closure or local object. Define it at module level "
            f"or pass its dotted path as a string."
        )
    return summarizer.path


def call_summarizer(func: SummarizerFunc, history: list[Any], keep_last: int) -> Any:
    """Call a sync or async summarizer from synchronous code."""
    result = func(history, keep_last)
    return async_to_sync(_wait)(result) if inspect.isawaitable(result) else result


async def _wait(awaitable: Any) -> Any:
    return await awaitable


async def acall_summarizer(func: SummarizerFunc, history: list[Any], keep_last: int) -> Any:
    """Call a summarizer from async code: an async one is awaited in this loop, a sync one
    runs on a summarizer thread (never on the loop's thread, never on a database thread).
    Either way, one that has not returned after ``SUMMARIZER_TIMEOUT`` seconds raises
    :class:`~squad_memory.exceptions.SummarizerTimeout` (a sync one's thread is replaced)."""
    if iscoroutinefunction(func) or iscoroutinefunction(type(func).__call__):
        return await _within_timeout(func(history, keep_last))
    result = await summarizer_thread(func, history, keep_last)
    return await _within_timeout(result) if inspect.isawaitable(result) else result


async def _within_timeout(awaitable: Any) -> Any:
    seconds = app_settings.summarizer_timeout
    deadline = asyncio.timeout(seconds)
    try:
        async with deadline:
            return await awaitable
    except TimeoutError as exc:
        if deadline.expired():  # not a TimeoutError of the summarizer's own
            raise summary_expired(seconds or 0) from exc
        raise


__all__ = [
    "SUMMARY_PREFIX",
    "LLMSummarizer",
    "OfflineSummarizer",
    "Summarizer",
    "acall_summarizer",
    "call_summarizer",
    "is_summary",
    "max_summary_chars",
    "require_importable",
    "resolve",
    "resolve_or_failing",
]

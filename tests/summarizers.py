"""Deterministic summarizers for the tests (module level, so importable by dotted path)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from agent_squad.types import ConversationMessage

CALLS: list[int] = []


def _text(m: ConversationMessage) -> str:
    return str((m.content or [{}])[0].get("text", "")) if m.content else ""


def fold(history: list[ConversationMessage], keep_last: int) -> list[ConversationMessage]:
    """``[summary of the old part] + last keep_last pairs``; the summary names what it folded."""
    CALLS.append(len(history))
    cut = max(len(history) - keep_last * 2, 0)
    old = "+".join(_text(m) for m in history[:cut])
    return [ConversationMessage("user", [{"text": f"S({old})"}]), *history[cut:]]


async def afold(history: list[ConversationMessage], keep_last: int) -> list[ConversationMessage]:
    await asyncio.sleep(0)
    return fold(history, keep_last)


def boom(history: list[ConversationMessage], keep_last: int) -> list[ConversationMessage]:
    raise RuntimeError("LLM unavailable")


def not_a_list(history: list[ConversationMessage], keep_last: int) -> Any:
    return "a summary string"


class Gate:
    """A summarizer that blocks until released, counting concurrent calls."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.active = 0
        self.max_active = 0
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, history: list[ConversationMessage], keep_last: int) -> list[ConversationMessage]:
        with self._lock:
            self.active += 1
            self.calls += 1
            self.max_active = max(self.max_active, self.active)
        self.entered.set()
        self.release.wait(10)
        with self._lock:
            self.active -= 1
        return fold(history, keep_last)


FLAKY = {"fail": False}


def flaky(history: list[ConversationMessage], keep_last: int) -> list[ConversationMessage]:
    """``fold``, or an error while ``FLAKY["fail"]`` is set."""
    if FLAKY["fail"]:
        raise RuntimeError("flaky summarizer is down")
    return fold(history, keep_last)

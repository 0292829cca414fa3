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

    def __call__(
        self, history: list[ConversationMessage], keep_last: int
    ) -> list[ConversationMessage]:
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


def long_text(i: int) -> str:
    """About 400 characters, its first sentence naming the turn."""
    return f"Turn {i} names item {i}. " + " ".join(f"detail-{i}-{k}" for k in range(30)) + "."


def compress_many_times(summarizer: Any, times: int = 10) -> list[ConversationMessage]:
    """Play long messages through ``summarizer`` (trigger 3 pairs, keep 1) until it has
    compressed ``times`` times in a row; every attempt must apply and the buffer must stay
    within its bounds. Returns the buffer."""
    from squad_memory.models import Compression
    from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
    from squad_memory.summarizers import is_summary, max_summary_chars

    storage = SummarizingChatStorage(DjangoChatStorage(), summarizer, trigger_at=3, keep_last=1)
    turn = 0
    while Compression.objects.count() < times and turn < 20 * times:
        role = "user" if turn % 2 == 0 else "assistant"
        if role == "user":  # as the orchestrator does: the first fetch over 3 pairs activates
            storage.fetch_chat_sync("u", "s", "a")
        storage.save_chat_message_sync(
            "u", "s", "a", ConversationMessage(role, [{"text": long_text(turn)}])
        )
        turn += 1
    refused = list(Compression.objects.exclude(outcome="applied").values_list("outcome", "error"))
    assert not refused and Compression.objects.count() >= times, refused
    buffer = storage.fetch_chat_sync("u", "s", "a")
    assert is_summary(buffer[0]) and len(buffer) <= 2 * 3 + 2, len(buffer)
    assert len(buffer[0].content[0]["text"]) <= max_summary_chars()
    assert buffer[-1].content == [{"text": long_text(turn - 1)}]
    return buffer

"""An offline, deterministic, extractive summarizer (no network, no model)."""

from __future__ import annotations

from typing import Any

from agent_squad.types import ConversationMessage

SUMMARY_PREFIX = "[Summary]"
MAX_CHARS = 2000


def _text(message: ConversationMessage) -> str:
    return " ".join(str(b.get("text", "")) for b in message.content or [] if isinstance(b, dict))


def summarize(history: list[ConversationMessage], keep_last: int) -> list[Any]:
    """Keep the last ``keep_last`` pairs; fold the rest into one extractive summary message."""
    cut = max(len(history) - keep_last * 2, 0)
    old, recent = history[:cut], history[cut:]
    lines = [f"{m.role}: {_text(m)[:120]}" for m in old]
    text = f"{SUMMARY_PREFIX} (extractive, {len(old)} messages) " + " | ".join(lines)
    return [ConversationMessage(role="user", content=[{"text": text[:MAX_CHARS]}]), *recent]

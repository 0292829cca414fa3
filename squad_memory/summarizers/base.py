"""What every shipped summarizer shares: the summary marker, the cut and the size cap.

A summarizer gets the buffer ``[previous summary?, message, ...]`` and returns
``[summary, *recent]``. :func:`split` cuts it alike for all: the previous summary is folded
in (never re-derived from raw history), the last ``keep_last`` pairs stay verbatim, a tool
use and its result stay on one side, and the verbatim part starts with an ``assistant``
message whenever it can, so roles alternate from the summary on, as Bedrock's Converse and
Anthropic's Messages APIs require.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agent_squad.types import ConversationMessage

from squad_memory.conf import app_settings
from squad_memory.rules import role_value

SUMMARY_PREFIX = "[Summary]"
"""Every summary message's single text block starts with this (stable, documented)."""

SUMMARY_ROLE = "user"
TRUNCATION_NOTE = " [summary truncated to {limit} characters]"

_USE_KEYS = ("toolUse", "tool_use")
_RESULT_KEYS = ("toolResult", "tool_result")


def max_summary_chars(wanted: int | None = None) -> int:
    """The longest summary to write: ``wanted`` if smaller than ``MAX_SUMMARY_CHARS``, the
    longest message a summarizer may write (a compression that writes more is refused)."""
    return min(wanted or app_settings.max_summary_chars, app_settings.max_summary_chars)


def is_summary(message: Any) -> bool:
    """True when ``message`` (a ``ConversationMessage`` or a dict) is a summary message:
    a ``user`` message whose first block is text starting with :data:`SUMMARY_PREFIX`."""
    content = _content(message)
    if role_of(message) != SUMMARY_ROLE or not content or not isinstance(content[0], dict):
        return False
    text = content[0].get("text")
    return isinstance(text, str) and text.startswith(SUMMARY_PREFIX)


def make_summary(body: str, max_chars: int | None = None) -> ConversationMessage:
    """The marked summary message for ``body``, capped at :func:`max_summary_chars`."""
    text = cap(f"{SUMMARY_PREFIX} {body.strip()}", max_summary_chars(max_chars))
    return ConversationMessage(role=SUMMARY_ROLE, content=[{"text": text}])


def cap(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters, ending with a note saying it was cut."""
    if len(text) <= max_chars:
        return text
    note = TRUNCATION_NOTE.format(limit=max_chars)
    return text[: max(max_chars - len(note), 0)].rstrip() + note


@dataclass
class Split:
    """One compression's input, cut: ``previous`` summary text, messages to ``fold``, ``recent``."""

    previous: str | None
    fold: list[Any]
    recent: list[Any]


def split(history: list[Any], keep_last: int) -> Split:
    """Cut the buffer: fold the head into the summary, keep the tail verbatim (rules above)."""
    start = 1 if history and is_summary(history[0]) else 0
    previous = _content(history[0])[0]["text"][len(SUMMARY_PREFIX) :].strip() if start else None
    cut = _cut(history, start, max(len(history) - keep_last * 2, start))
    return Split(previous, list(history[start:cut]), list(history[cut:]))


def _cut(history: list[Any], start: int, cut: int) -> int:
    cut = _keep_tool_pairs(history, start, cut)
    # Begin the verbatim part with an assistant message so roles alternate.
    starts_with_user = cut == len(history) or role_of(history[cut]) == SUMMARY_ROLE
    if cut > start and starts_with_user and role_of(history[cut - 1]) != SUMMARY_ROLE:
        cut = _keep_tool_pairs(history, start, cut - 1)
    return cut


def _keep_tool_pairs(history: list[Any], start: int, cut: int) -> int:
    while cut > start and _splits_tool_pair(history, cut):
        cut -= 1
    return cut


def _splits_tool_pair(history: list[Any], cut: int) -> bool:
    """True when a tool result at or after ``cut`` answers a tool use before it."""
    if cut >= len(history):
        return False
    folded_uses = {i for m in history[:cut] for i in _ids(m, _USE_KEYS)}
    if any(folded_uses & set(_ids(m, _RESULT_KEYS)) for m in history[cut:]):
        return True
    # Blocks without ids: a result right after the cut answers the use right before it.
    return _has(history[cut], _RESULT_KEYS) and _has(history[cut - 1], _USE_KEYS)


def _blocks(message: Any, keys: tuple[str, ...]) -> Iterable[dict[str, Any]]:
    for block in _content(message):
        if not isinstance(block, dict):
            continue
        for key in keys:
            if isinstance(block.get(key), dict):
                yield block[key]
        if block.get("type") in keys:
            yield block


def _has(message: Any, keys: tuple[str, ...]) -> bool:
    return any(True for _ in _blocks(message, keys))


def _ids(message: Any, keys: tuple[str, ...]) -> list[str]:
    names = ("toolUseId", "tool_use_id", "id")
    blocks = _blocks(message, keys)
    found = (next((b[n] for n in names if isinstance(b.get(n), str)), None) for b in blocks)
    return [i for i in found if i]


def role_of(message: Any) -> str:
    """The plain role string of a message or dict."""
    role = message.get("role") if isinstance(message, dict) else getattr(message, "role", "")
    return role_value(role)


def _content(message: Any) -> list[Any]:
    if isinstance(message, dict):
        return list(message.get("content") or [])
    return list(getattr(message, "content", None) or [])


def transcript(messages: list[Any], block_chars: int = 2000) -> str:
    """A plain-text rendering of messages for a prompt: ``role: text`` lines, tools shown."""
    return "\n".join(f"{role_of(m)}: {render(m, block_chars)}" for m in messages)


def render(message: Any, block_chars: int = 2000) -> str:
    """One message as text: its text blocks, and tool calls and results in brackets."""
    parts = [_render_block(b, block_chars) for b in _content(message) if isinstance(b, dict)]
    return " ".join(p for p in parts if p)


def _render_block(block: dict[str, Any], limit: int) -> str:
    if isinstance(block.get("text"), str):
        return _short(block["text"], limit)
    for use in _blocks({"content": [block]}, _USE_KEYS):
        return f"[tool call {use.get('name', '?')}({_short(str(use.get('input', '')), limit)})]"
    for res in _blocks({"content": [block]}, _RESULT_KEYS):
        return f"[tool result: {_short(str(res.get('content', '')), limit)}]"
    return ""


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"

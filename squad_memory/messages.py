"""Conversation messages: agent-squad's ``ConversationMessage`` and the stored dicts.
:func:`to_dict` is the one validation of a message entering squad_memory (storage, API or
importer): its role, its content blocks, JSON a database can store, and its size.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NotRequired, TypedDict

from agent_squad.types import ConversationMessage

from squad_memory.exceptions import InvalidMessage, InvalidSummarizerOutput
from squad_memory.rules import ROLES, parts_problems, role_value, size_problem


class MessageDict(TypedDict):
    """A stored message: what a save keeps, a buffer holds and a summarizer's output becomes."""

    role: str
    content: list[dict[str, Any]]
    citations: list[Any] | None
    #: Importers keep the original time (milliseconds); saves stamp their own.
    timestamp: NotRequired[int]


def now_ms() -> int:
    return int(time.time() * 1000)


#: ``json.dumps(value, allow_nan=False)`` without building an encoder per call.
_STRICT_JSON = json.JSONEncoder(allow_nan=False)


def to_dict(
    message: Any, *, error: type[ValueError] = InvalidMessage, check_size: bool = True
) -> MessageDict:
    """Validate one message (a ``ConversationMessage`` or a dict); its stored form. ``check_size``:
    refuse one over ``MAX_MESSAGE_BYTES``, ``MAX_CONTENT_BLOCKS`` or ``MAX_CITATIONS`` (a
    summarizer's output has ``MAX_SUMMARY_CHARS``)."""
    if isinstance(message, ConversationMessage):
        role, content = message.role, message.content
        citations = getattr(message, "citations", None)
    elif isinstance(message, dict):
        role, content, citations = (message.get(k) for k in ("role", "content", "citations"))
    else:
        raise error(f"Expected a ConversationMessage or a dict, got {type(message).__name__}.")
    role = role_value(role)
    if role not in ROLES:
        raise error(f"role must be one of {', '.join(ROLES)}; got {role!r}.")
    content = [] if content is None else content
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise error("content must be a list of block dicts such as [{'text': '...'}].")
    if citations is not None and not isinstance(citations, list):
        raise error(f"citations must be a list or None, got {type(citations).__name__}.")
    if check_size and (problems := parts_problems({"content": content, "citations": citations})):
        raise error(next(iter(problems.values())))
    check_storable(content, "content", error)
    check_storable(citations, "citations", error)
    stored: MessageDict = {"role": role, "content": content, "citations": citations or None}
    if check_size and (problem := size_problem(stored)):
        raise error(problem)
    return stored


def to_dicts(messages: Iterable[Any], *, check_size: bool = True) -> list[MessageDict]:
    return [to_dict(m, check_size=check_size) for m in messages]


def check_storable(value: Any, name: str, error: type[ValueError] = ValueError) -> None:
    """Content is stored as JSON: plain JSON types, finite numbers, no NUL characters and
    no lone surrogates (the one rule for the storages, the importer and the API)."""
    if value is None:
        return
    try:
        text = _STRICT_JSON.encode(value)
    except (TypeError, ValueError) as exc:
        raise error(
            f"{name} must hold only JSON values (str, int, finite float, bool, None, list, "
            f"dict with str keys): {exc}. Encode binary data (such as image bytes) as base64."
        ) from exc
    # JSON escapes NUL as \u0000 and every surrogate as \udXXX: without either in the text,
    # no string holds one.
    if ("\\u0000" in text or "\\ud" in text) and any(_bad_text(s) for s in _strings(value)):
        raise error(
            f"{name} must not contain NUL (\\x00) characters or lone surrogates; "
            "databases cannot store them."
        )


def _bad_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return "\x00" in text


def _strings(value: Any) -> Iterator[str]:
    """Every string of a JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def validate_summary(output: Any) -> list[MessageDict]:
    """A summarizer's output: a non-empty list of messages with a role and content blocks."""
    if isinstance(output, (str, bytes)) or not isinstance(output, Sequence):
        raise InvalidSummarizerOutput(
            "The summarizer must return a list of ConversationMessage, "
            f"got {type(output).__name__}."
        )
    result = [to_dict(m, error=InvalidSummarizerOutput, check_size=False) for m in output]
    if not result:
        raise InvalidSummarizerOutput("The summarizer returned an empty list; keep a summary.")
    return result


def to_messages(rows: Iterable[Mapping[str, Any]]) -> list[ConversationMessage]:
    """``ConversationMessage`` objects of stored dicts. Rows read from the database are
    fresh objects, so callers may mutate what they get without touching the store."""
    return [
        ConversationMessage(role=r["role"], content=r["content"] or [], citations=r["citations"])
        for r in rows
    ]


def copied(rows: list[MessageDict]) -> list[MessageDict]:
    """A deep copy of JSON dicts (for rows a caller also holds)."""
    result: list[MessageDict] = json.loads(json.dumps(rows))
    return result


# -- plain text, for search and the admin -------------------------------------------------
_TOOL_KEYS = ("toolUse", "toolResult")


def extract_text(content: Any) -> str:
    """The plain text of a message's content blocks: text blocks, and the values of tool
    inputs and tool results (strings and numbers, in order), one line per block."""
    if not isinstance(content, list):
        return " ".join(_leaves(content))
    return "\n".join(line for line in (_block_text(b) for b in content) if line)


def _block_text(block: Any) -> str:
    if not isinstance(block, dict):
        return " ".join(_leaves(block))
    if isinstance(block.get("text"), str):
        return str(block["text"])
    for key in _TOOL_KEYS:
        if isinstance(block.get(key), dict):
            return _tool_text(block[key])
    if block.get("type") in ("tool_use", "tool_result"):
        return _tool_text(block)
    return " ".join(_leaves(block.get("json", "")))


def _tool_text(tool: dict[str, Any]) -> str:
    name = tool.get("name")
    parts = [name] if isinstance(name, str) else []
    parts += _leaves(tool.get("input"))
    content = tool.get("content")
    if isinstance(content, list):
        parts += [_block_text(b) for b in content]
    else:
        parts += _leaves(content)
    return " ".join(p for p in parts if p)


def _leaves(value: Any) -> list[str]:
    """String and number leaves of a JSON value (keys are structure, not text)."""
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int | float):
        return [str(value)]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [leaf for item in items for leaf in _leaves(item)]


def block_text(block: dict[str, Any]) -> str:
    """A content block as one line: its text, or its kind (``[toolUse: get_weather]``)."""
    if isinstance(block.get("text"), str):
        return str(block["text"])
    kind = next(iter(block), "empty")
    value = block.get(kind)
    name = value.get("name") if isinstance(value, dict) else None
    return f"[{kind}: {name}]" if isinstance(name, str) and name else f"[{kind}]"

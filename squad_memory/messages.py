"""Conversation messages: validation, conversion, and the rules every path shares."""

from __future__ import annotations

import json
import marshal
import time
from collections.abc import Iterable, Sequence
from enum import Enum
from typing import Any, NotRequired, TypedDict

from agent_squad.types import ConversationMessage

from squad_memory.exceptions import InvalidMessage, InvalidSlotKey, InvalidSummarizerOutput
from squad_memory.querysets import needs_compression as needs_compression  # the trigger rule
from squad_memory.validation import id_problem

ROLES = ("user", "assistant")


class MessageDict(TypedDict):
    """A stored message: what a save keeps, a buffer holds and a summarizer's output becomes."""

    role: str
    content: list[dict[str, Any]]
    citations: list[Any] | None
    #: Importers keep the original time (milliseconds); saves stamp their own.
    timestamp: NotRequired[int]


def now_ms() -> int:
    return int(time.time() * 1000)


def role_value(role: Any) -> str:
    """The plain string of a role (agent-squad passes both enum members and strings)."""
    return str(role.value) if isinstance(role, Enum) else str(role)


def is_same_role(last_role: str, new_role: str) -> bool:
    """The role rule of ``save_chat_message``: a message repeating the last role is skipped."""
    return bool(last_role) and last_role == new_role


def trim_size(max_history_size: int | None) -> int:
    """Messages kept by ``trim_conversation``; 0 means everything (None, 0 and 1)."""
    if max_history_size is None:
        return 0
    return max(max_history_size - max_history_size % 2, 0)


def trim(messages: list[Any], max_history_size: int | None) -> list[Any]:
    keep = trim_size(max_history_size)
    return messages[-keep:] if keep else messages


def validate_key(user_id: Any, session_id: Any, agent_id: Any, max_length: int = 255) -> None:
    """Raise :class:`InvalidSlotKey` for an id breaking the id rule (:func:`id_problem`)."""
    for name, value in (("user_id", user_id), ("session_id", session_id), ("agent_id", agent_id)):
        problem = id_problem(value, max_length)
        if problem is not None:
            raise InvalidSlotKey(f"{name} {problem}.")


def to_dict(message: Any, *, error: type[ValueError] = InvalidMessage) -> MessageDict:
    """Validate one message (a ``ConversationMessage`` or a dict) and return its stored form."""
    if isinstance(message, ConversationMessage):
        role, content = message.role, message.content
        citations = getattr(message, "citations", None)
    elif isinstance(message, dict):
        role, content, citations = (
            message.get("role"),
            message.get("content"),
            message.get("citations"),
        )
    else:
        raise error(f"Expected a ConversationMessage or a dict, got {type(message).__name__}.")
    role = role_value(role)
    if role not in ROLES:
        raise error(f"role must be one of {', '.join(ROLES)}; got {role!r}.")
    if content is None:
        content = []
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise error("content must be a list of block dicts such as [{'text': '...'}].")
    if citations is not None and not isinstance(citations, list):
        raise error(f"citations must be a list or None, got {type(citations).__name__}.")
    global _encoded
    text = _check_storable(content, "content", error)
    _check_storable(citations, "citations", error)
    _encoded = (content, text)
    return {"role": role, "content": content, "citations": citations or None}


#: ``json.dumps(value, allow_nan=False)`` without building an encoder per call.
_STRICT_JSON = json.JSONEncoder(allow_nan=False)
#: The content last validated and its JSON text, as ``json.dumps`` writes it.
_encoded: tuple[Any, str | None] = (None, None)


def encoded(content: Any) -> str | None:
    """The JSON text of ``content`` if it is the content validated last (the same
    object, on this thread or another), for the INSERT that stores it; else None. The
    INSERT then stores the content as validated, even if the caller changed the list in
    place since."""
    last = _encoded
    return last[1] if last[0] is content else None


def _check_storable(value: Any, name: str, error: type[ValueError]) -> str | None:
    """Content is stored as JSON: plain JSON types, finite numbers, no NUL characters."""
    if value is None:
        return None
    try:
        text: str = _STRICT_JSON.encode(value)
    except (TypeError, ValueError) as exc:
        raise error(
            f"{name} must hold only JSON values (str, int, finite float, bool, None, list, "
            f"dict with str keys): {exc}. Encode binary data (such as image bytes) as base64."
        ) from exc
    # The text escapes NUL as \u0000 and every surrogate as \udXXX: without either, no
    # string in ``value`` holds one, and the walk is not needed.
    if ("\\u0000" in text or "\\ud" in text) and _has_bad_text(value):
        raise error(
            f"{name} must not contain NUL (\\x00) characters or lone surrogates; "
            "databases cannot store them."
        )
    return text


def _has_bad_text(value: Any) -> bool:
    if isinstance(value, str):
        if "\x00" in value:
            return True
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_bad_text(k) or _has_bad_text(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):  # JSON writes a tuple as an array
        return any(_has_bad_text(v) for v in value)
    return False


def to_dicts(messages: Iterable[Any]) -> list[MessageDict]:
    return [to_dict(m) for m in messages]


def validate_summary(output: Any) -> list[MessageDict]:
    """Validate a summarizer's output: a list of messages with a role and content blocks."""
    if isinstance(output, (str, bytes)) or not isinstance(output, Sequence):
        raise InvalidSummarizerOutput(
            "The summarizer must return a list of ConversationMessage, "
            f"got {type(output).__name__}."
        )
    result = [to_dict(m, error=InvalidSummarizerOutput) for m in output]
    if not result:
        raise InvalidSummarizerOutput(
            "The summarizer returned an empty list; keep at least a summary."
        )
    return result


def check_smaller(output: list[MessageDict], given: list[MessageDict], max_chars: int) -> None:
    """A compression's output must not be larger than its input: no more messages, and
    each message it wrote (one not copied from the input) within ``max_chars`` characters.

    (A first compression of a short buffer may fold one message into one summary: as
    many messages, none longer than the limit, so repeated compressions never grow.)
    """
    if len(output) > len(given):
        raise InvalidSummarizerOutput(
            f"The summarizer returned {len(output)} messages for {len(given)}; a compression "
            "must not return more messages than it was given (a summary plus the kept pairs)."
        )
    copied = {_fingerprint(m) for m in given}
    for message in output:
        size = _chars(message)
        if size > max_chars and _fingerprint(message) not in copied:
            raise InvalidSummarizerOutput(
                f"The summarizer wrote a message of {size} characters; the limit is "
                f"MAX_SUMMARY_CHARS ({max_chars})."
            )


def _fingerprint(message: MessageDict) -> str:
    return json.dumps([message["role"], message["content"]], sort_keys=True)


def _chars(message: MessageDict) -> int:
    """Characters of a message: its text blocks' text, other blocks as JSON."""
    return sum(
        len(block["text"]) if isinstance(block.get("text"), str) else len(json.dumps(block))
        for block in message["content"] or []
    )


def to_message(data: MessageDict) -> ConversationMessage:
    """A fresh ``ConversationMessage`` from a stored dict (content copied: callers may mutate)."""
    citations = data.get("citations")
    return ConversationMessage(
        role=data["role"],
        content=_copy(data.get("content") or []),
        citations=_copy(citations) if citations else None,
    )


_CONTAINERS = (dict, list)


def _copy(value: Any) -> Any:
    """A copy of JSON containers, all the way down (callers may mutate what they get)."""
    if isinstance(value, dict):
        return {k: _copy(v) if isinstance(v, _CONTAINERS) else v for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) if isinstance(v, _CONTAINERS) else v for v in value]
    return value


def to_messages(rows: Iterable[MessageDict], *, stored: bool = False) -> list[ConversationMessage]:
    """Fresh ``ConversationMessage`` objects (see :func:`to_message`), their JSON copied
    in one go: content is plain JSON, which ``marshal`` copies in C. ``stored``: the rows
    were read from the database or the tail cache, so no two of them share an object,
    and marshal may use its faster format (which keeps shared objects shared)."""
    parts = [(r["role"], r.get("content") or [], r.get("citations") or None) for r in rows]
    try:
        copies = marshal.loads(marshal.dumps(parts, 4 if stored else 2))
    except ValueError:  # a caller's subclass of a JSON type: copy it in Python
        copies = [(role, _copy(content), _copy(cited)) for role, content, cited in parts]
    return [ConversationMessage(*part) for part in copies]

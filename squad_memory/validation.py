"""The rules for ids and message sizes that every entry point shares (API, storage, importers).

Nothing here imports Django REST Framework: the storage and the API call the same functions.
"""

from __future__ import annotations

import json
import re
from typing import Any

from squad_memory.conf import app_settings

#: C0 and C1 control characters, DEL, and lone surrogates: never allowed in an id.
CONTROL_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
#: Bidirectional controls and zero-width characters: refused unless ``ALLOW_INVISIBLE_IDS``.
INVISIBLE_CHARS = re.compile("[\u202a-\u202e\u2066-\u2069\u200b-\u200d\u2060\ufeff]")
#: Both, for the OpenAPI pattern of an id (the default, strict rule).
ID_PATTERN = (
    "^[^\\u0000-\\u001f\\u007f-\\u009f\\ud800-\\udfff"
    "\\u202a-\\u202e\\u2066-\\u2069\\u200b-\\u200d\\u2060\\ufeff]+$"
)


def id_problem(value: Any, max_length: int | None = None) -> str | None:
    """Why ``value`` is not a valid ``user_id``, ``session_id`` or ``agent_id``, or None.

    An id is a non-empty string of at most ``max_length`` (default ``MAX_ID_LENGTH``)
    characters with no control character, no lone surrogate, and, unless
    ``ALLOW_INVISIBLE_IDS``, no bidirectional control or zero-width character (such
    characters make ``ticket-\\u202e4321-gnp.exe`` display as ``ticket-exe.png-1234``).
    """
    limit = app_settings.max_id_length if max_length is None else max_length
    if not isinstance(value, str) or not value:
        return f"must be a non-empty string, got {value!r}"
    if len(value) > limit:
        return f"is {len(value)} characters long; the limit is {limit}"
    if CONTROL_CHARS.search(value):
        return "must not contain control characters (NUL, tab, newline...) or lone surrogates"
    if not app_settings.allow_invisible_ids and INVISIBLE_CHARS.search(value):
        return (
            "must not contain bidirectional controls (U+202A..U+202E, U+2066..U+2069) or "
            "zero-width characters (U+200B..U+200D, U+2060, U+FEFF); "
            "set SQUAD_MEMORY['ALLOW_INVISIBLE_IDS'] = True to allow them"
        )
    return None


def visible(value: str) -> str:
    """``value`` with control and invisible characters written as ``<U+202E>`` escapes."""
    return _HIDDEN.sub(lambda m: f"<U+{ord(m.group()):04X}>", value)


_HIDDEN = re.compile(
    "[\x00-\x1f\x7f-\x9f\ud800-\udfff\u202a-\u202e\u2066-\u2069\u200b-\u200d\u2060\ufeff]"
)


def json_size(value: Any) -> int:
    """The size of ``value`` as compact JSON (no spaces), in UTF-8 bytes: what
    ``MAX_MESSAGE_BYTES`` limits."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", "surrogatepass"))

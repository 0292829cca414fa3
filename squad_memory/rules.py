"""The rules every path shares, each stated once: roles, trimming, the trigger, token counts, ids
and message sizes. The one SQL save of :mod:`squad_memory.models.append` states the role rule and
the trim again; a property test holds the two to the same decisions.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any

from squad_memory.conf import SETTING_NAME, app_settings
from squad_memory.exceptions import InvalidSlotKey, LookalikeSlotKey

logger = logging.getLogger("squad_memory")

ROLES = ("user", "assistant")


# -- roles and trimming -----------------------------------------------------------------
def role_value(role: Any) -> str:
    """The plain string of a role (agent-squad passes both enum members and strings)."""
    return str(role.value) if isinstance(role, Enum) else str(role)


def is_same_role(last_role: str, new_role: str) -> bool:
    """The role rule of ``save_chat_message``: a message repeating the last role is skipped."""
    return bool(last_role) and last_role == new_role


def trim_size(max_history_size: int | None) -> int:
    """Messages kept by agent-squad's ``trim_conversation``; 0 keeps everything (None, 0, 1)."""
    return 0 if max_history_size is None else max(max_history_size - max_history_size % 2, 0)


def trim(messages: list[Any], max_history_size: int | None) -> list[Any]:
    keep = trim_size(max_history_size)
    return messages[-keep:] if keep else messages


# -- the trigger ------------------------------------------------------------------------
def needs_compression(
    buffer_length: int,
    trigger_at: int,
    buffer_tokens: int = 0,
    trigger_tokens: int | None = None,
    summary_tokens: int = 0,
    new_messages: int = 0,
    keep_last: int = 0,
) -> bool:
    """The trigger rule (``SlotQuerySet.over_threshold`` states it as a query): a buffer longer
    than ``trigger_at`` pairs is compressed; so is one over ``trigger_tokens`` tokens (when set)
    whose messages after the summary prefix make at least half of that, or number ``keep_last``
    pairs (at least one). A prefix that alone fills the budget (a long summary, or a huge message
    it kept verbatim) is folded again once those pairs have left the window, never on every save."""
    new_tokens = buffer_tokens - summary_tokens
    over_tokens = (
        trigger_tokens is not None
        and buffer_tokens > trigger_tokens
        and (2 * new_tokens > trigger_tokens or new_messages >= 2 * max(keep_last, 1))
    )
    return buffer_length > trigger_at * 2 or over_tokens


# -- token counts -----------------------------------------------------------------------
#: Bytes of UTF-8 text per token in :func:`estimate_tokens` (about right for English prose).
BYTES_PER_TOKEN = 4
#: What :func:`estimate_tokens` charges for each block that is not text (an image, a tool call).
NON_TEXT_BLOCK_TOKENS = 64
#: The largest count a message row holds (``Message.tokens`` is a 32-bit integer).
MAX_TOKENS = 2**31 - 1


def estimate_tokens(message: Mapping[str, Any]) -> int:
    """The default ``TOKEN_COUNTER``: UTF-8 bytes of the text blocks / 4 (rounded up), plus
    a fixed cost per other block. Offline, no tokenizer."""
    text_bytes, other = 0, 0
    for block in message.get("content") or []:
        text = block.get("text") if isinstance(block, dict) else None
        if isinstance(text, str):
            text_bytes += len(text.encode("utf-8", "surrogatepass"))
        else:
            other += 1
    return math.ceil(text_bytes / BYTES_PER_TOKEN) + other * NON_TEXT_BLOCK_TOKENS


def count_tokens(message: Mapping[str, Any]) -> int:
    """The tokens of one message by ``TOKEN_COUNTER``, counted once at save and kept between
    0 and :data:`MAX_TOKENS`. A counter that fails (it raises, or returns no int) is logged
    and the estimate is stored instead: a raw message is never lost to a plug-in."""
    try:
        value = app_settings.import_callable("TOKEN_COUNTER")(message)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"it returned {type(value).__name__}, not int")
    except Exception as exc:
        logger.error(
            "%s['TOKEN_COUNTER'] failed (%s: %s); the message is stored with the estimate.",
            SETTING_NAME,
            type(exc).__name__,
            exc,
        )
        value = estimate_tokens(message)
    return min(max(value, 0), MAX_TOKENS)


def count_all(messages: Iterable[Mapping[str, Any]]) -> int:
    """The tokens of several messages."""
    return sum(count_tokens(m) for m in messages)


# -- ids --------------------------------------------------------------------------------
#: C0 and C1 control characters, DEL, and lone surrogates: never allowed in an id.
_CONTROL = "\x00-\x1f\x7f-\x9f\ud800-\udfff"
#: Unicode's default-ignorable code points (invisible: soft hyphen, zero-width and bidi
#: controls, variation selectors, tag characters, fillers) and every separator but the
#: ASCII space (no-break spaces, line and paragraph separators), and blank symbols (the
#: braille blank U+2800): characters that make one id display as another. Refused unless
#: ``ALLOW_INVISIBLE_IDS``.
_INVISIBLE_BMP = (
    "\u00a0\u00ad\u034f\u061c\u115f\u1160\u1680\u17b4\u17b5\u180b-\u180f\u2000-\u200f"
    "\u2028-\u202f\u205f-\u206f\u2800\u3000\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
)
_INVISIBLE = _INVISIBLE_BMP + "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
CONTROL_CHARS = re.compile(f"[{_CONTROL}]")
INVISIBLE_CHARS = re.compile(f"[{_INVISIBLE}]")
_HIDDEN = re.compile(f"[{_CONTROL}{_INVISIBLE}]")
#: The alphabets whose letters look alike (``a`` and the Cyrillic ``\u0430``, ``o`` and the
#: Greek ``\u03bf``): an id's letters come from one of them at most. Letters of other
#: scripts (Chinese, Japanese, Arabic...) may go with any, as ``\u6771\u4eac-abc`` does.
LOOKALIKE_SCRIPTS = ("LATIN", "GREEK", "CYRILLIC", "ARMENIAN", "CHEROKEE", "COPTIC")


def id_problem(
    value: Any, max_length: int | None = None, allow_invisible: bool | None = None
) -> str | None:
    """Why ``value`` is not a valid ``user_id``, ``session_id`` or ``agent_id``, or None: an
    id is a non-empty string of at most ``MAX_ID_LENGTH`` characters with no control
    character, no lone surrogate and, unless ``ALLOW_INVISIBLE_IDS``, nothing that makes it
    display as another id (:func:`lookalike_problem`). Such ids are refused, never
    normalized: a stored id is never rewritten. ``max_length`` and ``allow_invisible``: the
    settings as already read (None: read them)."""
    limit = app_settings.max_id_length if max_length is None else max_length
    if not isinstance(value, str) or not value:
        return f"must be a non-empty string, got {value!r}"
    if len(value) > limit:
        return f"is {len(value)} characters long; the limit is {limit}"
    if CONTROL_CHARS.search(value):
        return "must not contain control characters (NUL, tab, newline...) or lone surrogates"
    if app_settings.allow_invisible_ids if allow_invisible is None else allow_invisible:
        return None
    return lookalike_problem(value)


def lookalike_problem(value: str) -> str | None:
    """Why the id ``value`` may display as another id, or None: an invisible,
    bidirectional-control, blank or non-ASCII space character (they make
    ``ticket-\u202e4321-gnp.exe`` display as ``ticket-exe.png-1234``), a space at either
    end, a decomposed character (not in Unicode NFC), a compatibility character (a
    fullwidth letter, the ligature U+FB01 for ``fi``: Unicode NFKC rewrites them), or letters
    of two :data:`LOOKALIKE_SCRIPTS` (a Cyrillic U+0435 for an ``e`` in a Latin id)."""
    allow = f"; set {SETTING_NAME}['ALLOW_INVISIBLE_IDS'] = True to allow such ids"
    if found := INVISIBLE_CHARS.search(value):
        return (
            f"must not contain zero-width, invisible, blank or bidirectional-control "
            f"characters or non-ASCII spaces (found U+{ord(found.group()):04X}){allow}"
        )
    if value != value.strip(" "):
        return f"must not begin or end with a space (it shows as {value.strip(' ')!r}){allow}"
    if not unicodedata.is_normalized("NFC", value):
        return (
            f"must be in Unicode normalization form NFC (it shows as the NFC id "
            f"{unicodedata.normalize('NFC', value)!r}, a different id; send that){allow}"
        )
    if not unicodedata.is_normalized("NFKC", value):
        char = next((c for c in value if unicodedata.normalize("NFKC", c) != c), value[0])
        return (
            f"must not contain compatibility characters such as fullwidth letters or "
            f"ligatures (found U+{ord(char):04X} {char!r}, which Unicode NFKC writes as "
            f"{unicodedata.normalize('NFKC', char)!r}; send "
            f"{unicodedata.normalize('NFKC', value)!r}){allow}"
        )
    return mixed_scripts_problem(value, allow)


def letter_script(char: str) -> str | None:
    """The script of a letter, as the first word of its Unicode name (None: not a letter)."""
    if not unicodedata.category(char).startswith("L"):
        return None
    return unicodedata.name(char, "UNKNOWN").split()[0]


def mixed_scripts_problem(value: str, allow: str = "") -> str | None:
    """Why ``value`` mixes letters of two :data:`LOOKALIKE_SCRIPTS`, or None."""
    first: dict[str, str] = {}
    for char in value:
        if (script := letter_script(char)) in LOOKALIKE_SCRIPTS:
            first.setdefault(script, char)
    if len(first) < 2:
        return None
    found = ", ".join(f"{s.title()} {c!r} (U+{ord(c):04X})" for s, c in first.items())
    return (
        f"must not mix letters of the Latin, Greek, Cyrillic, Armenian, Cherokee and Coptic "
        f"alphabets (found {found}): such an id can display as another; write its letters "
        f"in one alphabet{allow}"
    )


#: The Basic Multilingual Plane but for the blocks of Han, Yi and Hangul syllables (most of
#: its letters, none of them in :data:`LOOKALIKE_SCRIPTS`) and the surrogates.
_NAMED_RANGES = ((0, 0x3400), (0xA4D0, 0xAC00), (0xD7B0, 0xD800), (0xE000, 0x10000))


@functools.cache
def id_pattern() -> str:
    """The id rule as the OpenAPI pattern of an id (the default, strict rule; built from
    this Python's Unicode tables, as the rule is). The server alone checks lone surrogates
    (no UTF-8 request carries one), the characters beyond the Basic Multilingual Plane (a
    pattern naming them is one that request generators cannot use) and sequences that NFC
    composes (``e`` and a combining accent)."""
    refused: list[str] = []
    letters: dict[str, str] = {}
    for start, end in _NAMED_RANGES:
        for char in map(chr, range(start, end)):
            if _HIDDEN.match(char) or not unicodedata.is_normalized("NFKC", char):
                refused.append(char)
            elif (script := letter_script(char)) in LOOKALIKE_SCRIPTS:
                letters[char] = str(script)
    alphabets = {one: [c for c, s in letters.items() if s == one] for one in LOOKALIKE_SCRIPTS}
    mixed = "".join(
        f"(?!.*[{_char_class(alphabets[one])}]"
        f".*[{_char_class([c for c, s in letters.items() if s != one])}])"
        for one in LOOKALIKE_SCRIPTS
    )
    shown, inner = _char_class([*refused, " "]), _char_class(refused)
    return f"^{mixed}[^{shown}](?:[^{inner}]*[^{shown}])?$"


def _char_class(chars: list[str]) -> str:
    """The inside of a regular expression's ``[...]`` matching ``chars``, as ``\\uXXXX``
    ranges (ECMA-262 and Python read them alike)."""
    points = sorted(ord(c) for c in chars)
    ranges: list[list[int]] = []
    for point in points:
        if ranges and point == ranges[-1][1] + 1:
            ranges[-1][1] = point
        else:
            ranges.append([point, point])
    return "".join(f"\\u{a:04x}" if a == b else f"\\u{a:04x}-\\u{b:04x}" for a, b in ranges)


#: Keys found valid, with the settings they were checked under (a conversation's key is
#: checked on every call; the rule depends on nothing else). Emptied when full.
_VALID_KEYS: set[tuple[str, str, str, int, bool]] = set()
_VALID_KEYS_MAX = 4096


def validate_key(user_id: Any, session_id: Any, agent_id: Any) -> tuple[str, str, str]:
    """The slot key, or :class:`InvalidSlotKey` naming the id that breaks the id rule
    (:class:`LookalikeSlotKey` for one that would display as another id)."""
    limit, allow = app_settings.max_id_length, app_settings.allow_invisible_ids  # read once
    known = (user_id, session_id, agent_id, limit, allow)
    if type(user_id) is type(session_id) is type(agent_id) is str and known in _VALID_KEYS:
        return (user_id, session_id, agent_id)
    for name, value in (("user_id", user_id), ("session_id", session_id), ("agent_id", agent_id)):
        if (problem := id_problem(value, limit, allow)) is not None:
            plain = id_problem(value, limit, allow_invisible=True) is not None
            raise (InvalidSlotKey if plain else LookalikeSlotKey)(f"{name} {problem}.")
    if len(_VALID_KEYS) >= _VALID_KEYS_MAX:
        _VALID_KEYS.clear()
    _VALID_KEYS.add(known)
    return (user_id, session_id, agent_id)


def visible(value: str) -> str:
    """``value`` with control and invisible characters written as ``<U+202E>`` escapes."""
    return _HIDDEN.sub(lambda m: f"<U+{ord(m.group()):04X}>", value)


# -- sizes ------------------------------------------------------------------------------
def json_size(value: Any) -> int:
    """The size of ``value`` as compact JSON (no spaces, no ASCII escapes), in UTF-8 bytes."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", "surrogatepass"))


#: The parts of a message that are bounded: its field, what they are, and the setting.
_PARTS = (
    ("content", "content blocks", "MAX_CONTENT_BLOCKS"),
    ("citations", "citations", "MAX_CITATIONS"),
)


def parts_problems(message: Mapping[str, Any]) -> dict[str, str]:
    """Why a message holds too many parts, by field (empty: none): at most
    ``MAX_CONTENT_BLOCKS`` content blocks and ``MAX_CITATIONS`` citations. Each part costs
    the server to validate, store and echo whatever its size, so this is checked first."""
    problems = {}
    for field, what, name in _PARTS:
        parts, limit = message.get(field), int(getattr(app_settings, name.lower()))
        if isinstance(parts, list) and len(parts) > limit:
            problems[field] = (
                f"The message has {len(parts)} {what}; the limit is {limit} "
                f"({SETTING_NAME}['{name}'])."
            )
    return problems


def size_problem(message: Mapping[str, Any]) -> str | None:
    """Why a message is too large to store, or None: ``MAX_MESSAGE_BYTES`` limits its role,
    content and citations as compact UTF-8 JSON (as the API, the importer and the storage do)."""
    measured = {"role": message.get("role"), "content": message.get("content")}
    if message.get("citations") is not None:
        measured["citations"] = message["citations"]
    size = json_size(measured)
    limit = app_settings.max_message_bytes
    if size > limit:
        return (
            f"The message is {size} bytes of compact JSON; the limit is {limit} "
            f"({SETTING_NAME}['MAX_MESSAGE_BYTES'])."
        )
    return None

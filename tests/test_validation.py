"""The shared id rule and the compact-JSON size measure."""

from __future__ import annotations

import json
import re
from io import StringIO

import pytest
from django.test import override_settings

import squad_memory
from squad_memory.exceptions import InvalidSlotKey, LookalikeSlotKey
from squad_memory.models import Message, Slot
from squad_memory.operations import transfer
from squad_memory.rules import id_problem, json_size, validate_key, visible
from squad_memory.storage import DjangoChatStorage
from tests.conftest import extra, msg


@pytest.mark.parametrize(
    "value",
    [
        "a",
        "ticket-1234",
        "é/ü 漢字",
        "x" * 255,
        "Ελληνικά-1",
        "доклад-2",
        "東京タワーのひらがな-abc",
        "한국어-abc",
        "注音ㄅㄆ-abc",
        "محمد",
        "user-\u0645\u062d\u0645\u062f",  # Arabic letters go with Latin ones
        "\u02bcokina",  # a modifier letter is of no one script
    ],
)
def test_valid_ids(value: str) -> None:
    assert id_problem(value) is None


@pytest.mark.parametrize(
    "value",
    [
        *("", None, 3, "x" * 256, "nul\x00", "tab\t", "\x85", "\ud800", "a\u202eb", "\u200b"),
        "\u0434\u043e\u043a\u043b\u0430\u0434-o",  # a Latin o after Cyrillic letters
        "\u03b1\u03bb\u03c6\u03b1-\u0430",  # a Cyrillic a after Greek letters
    ],
)
def test_invalid_ids(value: object) -> None:
    assert id_problem(value) is not None


@pytest.mark.parametrize(
    "char", ["\u202a", "\u202e", "\u2066", "\u2069", "\u200b", "\u2060", "\ufeff"]
)
def test_storage_refuses_invisible_characters_through_the_same_rule(db: object, char: str) -> None:
    with pytest.raises(InvalidSlotKey, match="zero-width"):
        validate_key("u", f"s{char}", "a")
    with pytest.raises(InvalidSlotKey):
        squad_memory.get_storage().save_chat_message_sync("u", "s", f"a{char}", msg("user", "x"))
    with override_settings(SQUAD_MEMORY={"ALLOW_INVISIBLE_IDS": True}):
        validate_key("u", f"s{char}", "a")


def test_a_key_found_valid_is_checked_again_under_other_settings() -> None:
    """Keys found valid are remembered with the settings they were checked under: a key
    accepted once is refused once ``MAX_ID_LENGTH`` or ``ALLOW_INVISIBLE_IDS`` refuses it."""
    validate_key("u", "s" * 20, "a")
    too_long = pytest.raises(InvalidSlotKey, match="session_id is 20 characters long")
    with override_settings(SQUAD_MEMORY={"MAX_ID_LENGTH": 10}), too_long:
        validate_key("u", "s" * 20, "a")
    with override_settings(SQUAD_MEMORY={"ALLOW_INVISIBLE_IDS": True}):
        validate_key("u", "s\u200b", "a")
    with pytest.raises(InvalidSlotKey, match="zero-width"):
        validate_key("u", "s\u200b", "a")


def test_visible_escapes_invisible_and_control_characters() -> None:
    assert visible("ticket-\u202e4321-gnp.exe") == "ticket-<U+202E>4321-gnp.exe"
    assert visible("\u200b\u200b") == "<U+200B><U+200B>"
    assert visible("a\tb") == "a<U+0009>b"
    assert visible("plain é") == "plain é"


def test_json_size_is_compact_utf8() -> None:
    value = {"a": [1, 2, 3], "b": "é"}
    assert json_size(value) == len('{"a":[1,2,3],"b":"é"}'.encode())
    assert json_size(value) < len(json.dumps(value).encode())


#: Characters that make one id display as another, each refused as a class (issue 22).
LOOKALIKES = {
    "LRM": "\u200e",
    "RLM": "\u200f",
    "ALM": "\u061c",
    "INVISIBLE TIMES": "\u2062",
    "SOFT HYPHEN": "\u00ad",
    "COMBINING GRAPHEME JOINER": "\u034f",
    "TAG LATIN SMALL LETTER A": "\U000e0061",
    "CANCEL TAG": "\U000e007f",
    "HANGUL FILLER": "\u3164",
    "VS16": "\ufe0f",
    "LINE SEPARATOR": "\u2028",
    "MONGOLIAN VOWEL SEPARATOR": "\u180e",
    "NBSP": "\u00a0",
    "BRAILLE PATTERN BLANK": "\u2800",
}


@pytest.mark.parametrize("char", LOOKALIKES.values(), ids=LOOKALIKES.keys())
def test_every_entry_point_refuses_invisible_and_bidi_characters(db: object, char: str) -> None:
    escape = f"U+{ord(char):04X}"
    for store in (DjangoChatStorage(), squad_memory.get_storage()):
        with pytest.raises(InvalidSlotKey, match=re.escape(escape)):
            store.save_chat_message_sync("u", f"ticket{char}1", "a", msg("user", "x"))
        with pytest.raises(InvalidSlotKey, match=re.escape(escape)):
            store.fetch_chat_sync(f"u{char}", "s", "a")
    line = {
        "user_id": "u",
        "session_id": "s",
        "agent_id": f"a{char}",
        "role": "user",
        "content": "x",
    }
    report = transfer.validate(StringIO(json.dumps(line) + "\n"))
    assert [n for n, _ in report.errors] == [1] and escape in report.errors[0][1]
    assert not Slot.objects.exists() and not Message.objects.exists()


@pytest.mark.parametrize("char", LOOKALIKES.values(), ids=LOOKALIKES.keys())
def test_the_api_refuses_invisible_and_bidi_characters(db: object, char: str) -> None:
    extra("rest_framework", "api")
    from tests.api_support import client_for, make_user, one, post

    client = client_for(make_user("writer"))
    body = {"session_id": f"s{char}", "agent_id": "a", "message": one("user", "x")}
    response = post(client, body)
    assert response.status_code == 400 and f"U+{ord(char):04X}" in str(
        response.json()["session_id"]
    )
    assert not Slot.objects.exists()


@pytest.mark.parametrize("char", LOOKALIKES.values(), ids=LOOKALIKES.keys())
def test_ids_stored_before_the_rule_show_escaped(db: object, char: str) -> None:
    slot = Slot.objects.create(user_id=f"u{char}", session_id="s", agent_id=f"a{char}")
    shown = str(slot)
    assert char not in shown and shown == f"u<U+{ord(char):04X}>/s/a<U+{ord(char):04X}>"


#: Ids that display as another id: (the id, the id it looks like, words of the error).
LOOKALIKE_IDS = {
    "leading space": (" ticket", "ticket", "begin or end with a space"),
    "trailing space": ("ticket ", "ticket", "begin or end with a space"),
    "NFD": ("cafe\u0301", "caf\u00e9", "NFC"),
    "NFD in the middle": ("x-\u1100\u1161-y", "x-\uac00-y", "NFC"),
    "fullwidth": ("\uff54icket", "ticket", "compatibility characters"),
    "ligature": ("pro\ufb01le", "profile", "compatibility characters"),
    "superscript": ("ticket\u00b2", "ticket2", "compatibility characters"),
    "Cyrillic a in Latin": ("p\u0430ypal", "paypal", "mix letters of the Latin, Greek"),
    "Greek o in Latin": ("g\u03bfogle", "google", "mix letters of the Latin, Greek"),
}


@pytest.mark.parametrize(("value", "twin", "words"), LOOKALIKE_IDS.values(), ids=LOOKALIKE_IDS)
def test_every_entry_point_refuses_ids_that_look_like_another(
    db: object, value: str, twin: str, words: str
) -> None:
    """Refused, not normalized: a stored id is never rewritten, so an id reaches the same
    conversation however it is written, and two ids never show alike in the admin."""
    assert id_problem(twin) is None and id_problem(f"a {twin} b") is None
    storage = squad_memory.get_storage()
    with pytest.raises(LookalikeSlotKey, match=words):
        storage.save_chat_message_sync("u", value, "a", msg("user", "x"))
    with pytest.raises(LookalikeSlotKey, match=words):
        storage.fetch_chat_sync(value, "s", "a")
    line = {"user_id": "u", "session_id": "s", "agent_id": value, "role": "user", "content": "x"}
    report = transfer.validate(StringIO(json.dumps(line) + "\n"))
    assert [n for n, _ in report.errors] == [1] and words in report.errors[0][1]
    extra("rest_framework", "api")
    from tests.api_support import client_for, make_user, one, post

    body = {"session_id": value, "agent_id": "a", "message": one("user", "x")}
    response = post(client_for(make_user("writer")), body)
    assert response.status_code == 400 and words in str(response.json()["session_id"])
    assert not Slot.objects.exists()
    with override_settings(SQUAD_MEMORY={"ALLOW_INVISIBLE_IDS": True}):
        assert id_problem(value) is None


def test_every_entry_point_bounds_blocks_and_citations(db: object) -> None:
    from squad_memory.exceptions import InvalidMessage

    storage = squad_memory.get_storage()
    with override_settings(SQUAD_MEMORY={"MAX_CONTENT_BLOCKS": 2, "MAX_CITATIONS": 1}):
        many = {"role": "user", "content": [{"text": "a"}] * 3}
        with pytest.raises(InvalidMessage, match=r"3 content blocks.*MAX_CONTENT_BLOCKS"):
            storage.save_chat_message_sync("u", "s", "a", many)
        cited = {"role": "user", "content": [{"text": "a"}], "citations": ["x", "y"]}
        with pytest.raises(InvalidMessage, match=r"2 citations.*MAX_CITATIONS"):
            storage.save_chat_messages_sync("u", "s", "a", [cited])
        line = {"user_id": "u", "session_id": "s", "agent_id": "a", **many}
        report = transfer.validate(StringIO(json.dumps(line) + "\n"))
        assert "MAX_CONTENT_BLOCKS" in report.errors[0][1]
        assert not Message.objects.exists()

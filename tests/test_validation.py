"""The shared id rule and the compact-JSON size measure."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

import squad_memory
from squad_memory.exceptions import InvalidSlotKey
from squad_memory.messages import validate_key
from squad_memory.validation import id_problem, json_size, visible
from tests.conftest import msg


@pytest.mark.parametrize("value", ["a", "ticket-1234", "é/ü 漢字", "x" * 255])
def test_valid_ids(value: str) -> None:
    assert id_problem(value) is None


@pytest.mark.parametrize(
    "value", ["", None, 3, "x" * 256, "nul\x00", "tab\t", "\x85", "\ud800", "a\u202eb", "\u200b"]
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


def test_visible_escapes_invisible_and_control_characters() -> None:
    assert visible("ticket-\u202e4321-gnp.exe") == "ticket-<U+202E>4321-gnp.exe"
    assert visible("\u200b\u200b") == "<U+200B><U+200B>"
    assert visible("a\tb") == "a<U+0009>b"
    assert visible("plain é") == "plain é"


def test_json_size_is_compact_utf8() -> None:
    value = {"a": [1, 2, 3], "b": "é"}
    assert json_size(value) == len('{"a":[1,2,3],"b":"é"}'.encode())
    assert json_size(value) < len(json.dumps(value).encode())

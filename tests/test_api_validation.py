"""Bad input gets a 400 with field errors (or 413/415), never a 500, and stores nothing."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings

from squad_memory.models import Message, Slot
from tests.api_support import Users, client_for, fill, one, post
from tests.conftest import extra

extra("rest_framework", "api")  # every test here talks to the REST API

pytest_plugins = ["tests.api_fixtures"]

URL = "/api/slots/messages/"


def body(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"session_id": "s", "agent_id": "a", "message": one("user", "hi")}
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


def raw(client: Any, payload: bytes, content_type: str = "application/json") -> Any:
    return client.generic("POST", URL, payload, content_type=content_type)


def post_escaped(client: Any, data: Any) -> Any:
    """Post ``data`` as ASCII-escaped JSON, so lone surrogates travel as ``\\ud800``."""
    return raw(client, json.dumps(data).encode("ascii"))


def assert_nothing_stored() -> None:
    assert Message.objects.count() == 0 and Slot.objects.count() == 0


@pytest.mark.parametrize("role", ["system", "", None, 1, ["user"], "User", "\ud800"])
def test_role_must_be_a_contract_role(users: Users, role: Any) -> None:
    message = {"role": role, "content": [{"text": "x"}]}
    response = post_escaped(client_for(users.owner), body(message=message))
    assert response.status_code == 400 and "role" in response.json()["message"]
    assert_nothing_stored()


@pytest.mark.parametrize(
    "content",
    [[], None, "hi", {"text": "hi"}, ["hi"], [{}], [{"text": "ok"}, 3], [[{"text": "x"}]]],
)
def test_content_must_be_a_non_empty_list_of_block_objects(users: Users, content: Any) -> None:
    message = {"role": "user"} if content is None else {"role": "user", "content": content}
    response = post(client_for(users.owner), body(message=message))
    assert response.status_code == 400 and "content" in response.json()["message"]
    assert_nothing_stored()


@pytest.mark.parametrize("field", ["session_id", "agent_id", "user_id"])
@pytest.mark.parametrize(
    "value",
    ["", "tab\there", "nul\x00", "bell\x07", "c1\x85", "\ud800", "\udc00x", 12, None, ["s"]],
)
def test_ids_must_be_printable_strings(users: Users, field: str, value: Any) -> None:
    data = body()
    data[field] = value
    response = post_escaped(client_for(users.staff), data)
    assert response.status_code == 400 and field in response.json()
    assert_nothing_stored()


def test_ids_within_the_configured_length(users: Users) -> None:
    client = client_for(users.owner)
    with override_settings(SQUAD_MEMORY={"MAX_ID_LENGTH": 8}):
        assert post(client, body(session_id="x" * 9)).status_code == 400
        assert post(client, body(agent_id="y" * 9)).json()["agent_id"]
        assert post(client, body(session_id="x" * 8)).status_code == 201
    assert post(client, body(session_id="z" * 256)).status_code == 400


def test_message_size_limit(users: Users) -> None:
    client = client_for(users.owner)
    with override_settings(SQUAD_MEMORY={"MAX_MESSAGE_BYTES": 200}):
        fits = post(client, body(message=one("user", "é" * 50)))
        too_big = post(client, body(message=one("user", "é" * 100)))  # 200 bytes of text alone
    assert fits.status_code == 201
    assert too_big.status_code == 400 and "limit is 200" in str(too_big.json()["message"])


def test_blocks_and_citations_per_message_are_bounded(users: Users) -> None:
    client = client_for(users.owner)
    blocks = [{"text": str(i)} for i in range(4)]
    with override_settings(SQUAD_MEMORY={"MAX_CONTENT_BLOCKS": 3, "MAX_CITATIONS": 2}):
        over = post(client, body(message={"role": "user", "content": blocks}))
        assert over.status_code == 400
        assert "MAX_CONTENT_BLOCKS" in str(over.json()["message"]["content"])
        cited = {"role": "user", "content": blocks[:3], "citations": ["a", "b", "c"]}
        over = post(client, body(message=None, messages=[one("user", "x"), cited]))
        assert over.status_code == 400
        assert "MAX_CITATIONS" in str(over.json()["messages"]["1"]["citations"])
        assert_nothing_stored()
        cited["citations"] = ["a", "b"]
        assert post(client, body(message=cited)).status_code == 201  # at the bounds


def test_a_batch_of_many_tiny_blocks_at_the_size_limit_is_400(users: Users) -> None:
    """The costly body: MAX_BATCH_SIZE messages of MAX_MESSAGE_BYTES in 8,100 tiny blocks
    each (``python -m bench.api_cost --bodies`` measures what it costs)."""
    message = {"role": "user", "content": [{"x": 0}] * 8_100}
    batch = json.dumps(body(message=None, messages=[message] * 100), separators=(",", ":"))
    response = raw(client_for(users.owner), batch.encode())
    assert response.status_code == 400
    errors = response.json()["messages"]
    assert len(errors) == 100 and "MAX_CONTENT_BLOCKS" in str(errors["99"]["content"])
    assert_nothing_stored()


def test_batch_size_limit_and_a_rejected_batch_stores_nothing(users: Users) -> None:
    client = client_for(users.owner)
    with override_settings(SQUAD_MEMORY={"MAX_BATCH_SIZE": 3}):
        over = post(client, body(message=None, messages=[one("user", str(i)) for i in range(4)]))
        assert over.status_code == 400 and "at most 3" in str(over.json()["messages"])
        empty = post(client, body(message=None, messages=[]))
        assert empty.status_code == 400 and "messages" in empty.json()
    assert_nothing_stored()
    bad_third = [one("user", "a"), one("assistant", "b"), {"role": "robot", "content": []}]
    response = post(client, body(message=None, messages=bad_third))
    assert response.status_code == 400 and response.json()["messages"]["2"]["role"]
    assert_nothing_stored()


@pytest.mark.parametrize("extra", [{"messages": [one("user", "x")]}, {"message": None}])
def test_exactly_one_of_message_and_messages(users: Users, extra: dict[str, Any]) -> None:
    response = post(client_for(users.owner), body(**extra))
    assert response.status_code == 400 and "non_field_errors" in response.json()
    assert_nothing_stored()


@pytest.mark.parametrize("size", [-1, "ten", 1.5, 10**12])
def test_max_history_size_must_be_a_small_non_negative_integer(users: Users, size: Any) -> None:
    response = post(client_for(users.owner), body(max_history_size=size))
    assert response.status_code == 400 and "max_history_size" in response.json()


@pytest.mark.parametrize(
    "payload",
    [
        b"{",
        b"",
        b"null",
        b"[]",
        b'"text"',
        b"{'single': 'quotes'}",
        b'{"a": NaN}',
        b"\xff\xfe{}",
        b'{"session_id": "\xed\xa0\x80"}',
        b"[" * 100_000 + b"]" * 100_000,
    ],
)
def test_malformed_bodies_are_400(users: Users, payload: bytes) -> None:
    response = raw(client_for(users.owner), payload)
    assert response.status_code == 400, response.content[:200]
    assert_nothing_stored()


def test_form_bodies_are_415(users: Users) -> None:
    response = raw(client_for(users.owner), b"session_id=s", "application/x-www-form-urlencoded")
    assert response.status_code == 415


def test_huge_bodies_are_413(users: Users) -> None:
    with override_settings(SQUAD_MEMORY={"MAX_MESSAGE_BYTES": 1000, "MAX_BATCH_SIZE": 2}):
        payload = json.dumps(body(message=one("user", "x" * 200_000))).encode()
        response = raw(client_for(users.owner), payload)
    assert response.status_code == 413
    assert_nothing_stored()


def test_large_batches_within_the_limits_are_accepted(users: Users, settings: Any) -> None:
    batch = [one("user" if i % 2 == 0 else "assistant", f"{i}" + "x" * 60_000) for i in range(45)]
    payload = json.dumps(body(message=None, messages=batch)).encode()
    assert len(payload) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE  # Django's own cap, 2.5 MB
    response = raw(client_for(users.owner), payload)
    assert response.status_code == 201, response.content[:200]
    assert Message.objects.count() == 45


def test_bodies_over_the_api_limit_get_a_json_413(users: Users) -> None:
    payload = b"[" + b"0," * 4_000_000 + b"0]"  # 8 MB: over a full batch of full messages
    response = raw(client_for(users.owner), payload)
    assert response.status_code == 413 and response["Content-Type"] == "application/json"
    assert "exceeds" in response.json()["detail"]
    assert_nothing_stored()


@pytest.mark.parametrize(
    "text",
    ["\ud800", "a\udfffb", "nul\x00", "\ud83d"],
)
def test_unstorable_strings_in_content_are_400(users: Users, text: str) -> None:
    message = {"role": "user", "content": [{"text": text}], "citations": None}
    response = post_escaped(client_for(users.owner), body(message=message))
    assert response.status_code == 400 and "message" in response.json()
    key_message = {"role": "user", "content": [{text: "x"}]}
    key_response = post_escaped(client_for(users.owner), body(message=key_message))
    assert key_response.status_code == 400
    assert_nothing_stored()


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ('{"role": "user", "content": [{"text": 1e400}]}', "content"),
        ('{"role": "user", "content": [{"json": {"a": [1, -1e999]}}]}', "content"),
        ('{"role": "user", "content": [{"text": "x"}], "citations": [{"n": 1e400}]}', "citations"),
    ],
)
def test_non_finite_numbers_are_400_field_errors(users: Users, message: str, field: str) -> None:
    client = client_for(users.owner)
    single = raw(client, f'{{"session_id": "s", "agent_id": "a", "message": {message}}}'.encode())
    assert single.status_code == 400 and field in single.json()["message"]
    batch = raw(client, f'{{"session_id": "s", "agent_id": "a", "messages": [{message}]}}'.encode())
    assert batch.status_code == 400 and field in batch.json()["messages"]["0"]
    assert_nothing_stored()


def test_deeply_nested_content_is_400(users: Users) -> None:
    nested: Any = "leaf"
    for _ in range(40):
        nested = {"n": nested}
    response = post(client_for(users.owner), body(message={"role": "user", "content": [nested]}))
    assert response.status_code == 400
    assert_nothing_stored()


def test_valid_unicode_round_trips(users: Users) -> None:
    text = "😀 e\u0301 \U0010fffd ﷽ \u202e rtl"
    client = client_for(users.owner)
    response = post(client, body(session_id="sé😀", message=one("user", text)))
    assert response.status_code == 201
    slot_id = response.json()["slot"]["id"]
    page = client.get(f"/api/slots/{slot_id}/messages/").json()
    assert page["results"][0]["content"] == [{"text": text}]
    assert (
        client.get("/api/sessions/sé😀/history/").json()["messages"][0]["content"][0]["text"]
        == text
    )


@pytest.mark.parametrize(
    ("url", "status"),
    [
        ("/api/slots/?session_id=a%00b", 400),
        ("/api/slots/?agent_id=", 400),
        ("/api/slots/?page_size=0", 400),
        ("/api/slots/?page_size=%C2%B2", 400),
        ("/api/slots/?cursor=not-base64!", 404),
        ("/api/slots/?cursor=cD1hYmM%3D", 404),  # position "abc"
        ("/api/slots/?cursor=cD05OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OQ%3D%3D", 404),  # huge position
        ("/api/slots/999999999999999999/", 404),
        ("/api/slots/99999999999999999999999/", 404),
        ("/api/sessions/a%00b/history/", 400),
        ("/api/sessions/s/history/?user_id=a%01", 400),
    ],
)
def test_bad_query_and_path_values(users: Users, url: str, status: int) -> None:
    assert client_for(users.owner).get(url).status_code == status


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("ordering=seq;drop", "ordering"),
        ("page_size=-1", "page_size"),
        ("max_history_size=-1", ""),
    ],
)
def test_bad_paging_of_messages(users: Users, query: str, field: str) -> None:
    slot = fill(users.owner, 3)
    client = client_for(users.owner)
    endpoint = "buffer" if query.startswith("max_history_size") else "messages"
    response = client.get(f"/api/slots/{slot.pk}/{endpoint}/?{query}")
    assert response.status_code == 400 and (not field or field in response.json())


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (body(timestamp=1), [("timestamp",)]),
        (body(seq=3, foo="x"), [("foo",), ("seq",)]),
        (body(message={**one("user", "x"), "timestamp": 5}), [("message", "timestamp")]),
        (
            body(message=None, messages=[one("user", "a"), {**one("assistant", "b"), "seq": 2}]),
            [("messages", "1", "seq")],
        ),
    ],
)
def test_unknown_fields_are_400_naming_them(
    users: Users, data: dict[str, Any], where: list[tuple[str, ...]]
) -> None:
    response = post(client_for(users.owner), data)
    assert response.status_code == 400
    for path in where:  # every unknown field is named, not only the first
        errors: Any = response.json()
        for key in path:
            errors = errors[key]
        assert "Unknown field" in str(errors)
    assert_nothing_stored()


def _compact(message: dict[str, Any]) -> int:
    return len(json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode())


def test_message_size_is_measured_on_compact_json(users: Users) -> None:
    # Many small numbers: padded JSON (", " and ": ") is half as large again as compact JSON.
    limit = 64 * 1024
    message = {"role": "user", "content": [{"n": [0] * 32000, "text": ""}]}
    message["content"][0]["text"] = "é" * ((limit - _compact(message)) // 2)
    if _compact(message) < limit:
        message["content"][0]["text"] += "x"
    assert _compact(message) == limit and len(json.dumps(message).encode()) > limit * 1.4
    client = client_for(users.owner)
    assert post(client, body(message=message)).status_code == 201
    message["content"][0]["text"] += "x"
    too_big = post(client, body(message=message))
    assert too_big.status_code == 400
    assert f"{limit + 1} bytes of compact JSON" in str(too_big.json()["message"])


INVISIBLE = [
    "\u202a",
    "\u202e",
    "\u2066",
    "\u2069",
    "\u200b",
    "\u200c",
    "\u200d",
    "\u2060",
    "\ufeff",
]


@pytest.mark.parametrize("char", INVISIBLE)
@pytest.mark.parametrize("field", ["session_id", "agent_id"])
def test_ids_with_invisible_characters_are_400(users: Users, field: str, char: str) -> None:
    response = post(client_for(users.owner), body(**{field: f"ticket-{char}4321-gnp.exe"}))
    assert response.status_code == 400 and "zero-width" in str(response.json()[field])
    assert_nothing_stored()


def test_invisible_characters_in_ids_can_be_allowed(users: Users) -> None:
    client = client_for(users.owner)
    with override_settings(SQUAD_MEMORY={"ALLOW_INVISIBLE_IDS": True}):
        assert post(client, body(session_id="ticket-\u202e4321-gnp.exe")).status_code == 201
    history = client.get("/api/sessions/ticket-\u202e4321-gnp.exe/history/")
    assert history.status_code == 400 and "session_id" in history.json()


def test_a_message_the_api_accepts_imports_back_from_its_own_export(
    users: Users, tmp_path: Any
) -> None:
    # 15,000 CJK characters: 45 KB as UTF-8, about 90 KB as ASCII-escaped JSON. The API,
    # the importer and the storage measure a message with the same rule (rules.size_problem).
    text = "中" * 15_000
    assert len(text.encode()) < 65_536 < len(json.dumps(text))
    client = client_for(users.owner)
    assert post(client, body(message=one("user", text))).status_code == 201
    target = tmp_path / "export.jsonl"
    call_command("squad_memory_export", "-o", str(target), stderr=io.StringIO())
    Message.objects.all().delete()
    Slot.objects.all().delete()
    err = io.StringIO()
    call_command("squad_memory_import", str(target), stdout=io.StringIO(), stderr=err)
    assert err.getvalue() == ""
    (stored,) = Message.objects.all()
    assert stored.content == [{"text": text}]


def test_an_oversized_page_size_is_capped_at_the_maximum(users: Users) -> None:
    slot = fill(users.owner, 501)
    client = client_for(users.owner)
    page = client.get(f"/api/slots/{slot.pk}/messages/", {"page_size": 10**6}).json()
    assert len(page["results"]) == 500 and page["next"] is not None

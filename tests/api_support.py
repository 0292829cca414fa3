"""Helpers shared by the API tests (tests/test_api_*.py); fixtures are in api_fixtures."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import Permission, User

import squad_memory
from squad_memory.models import Slot
from tests.conftest import extra, msg

WRITE_PERMS = ("add_message", "change_slot")
#: What a staff user needs to read every user's slots, raw messages and compression errors.
VIEW_PERMS = ("view_slot", "view_message", "view_compression")


@dataclass
class Users:
    owner: User
    other: User
    staff: User  # with the write and the view permissions
    reader: User  # no permissions: may only read their own slots


def make_user(name: str, *, staff: bool = False, perms: tuple[str, ...] = WRITE_PERMS) -> User:
    user = User.objects.create_user(name, is_staff=staff)  # no password: hashing is slow
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="squad_memory", codename__in=perms)
    )
    return User.objects.get(pk=user.pk)  # drop the permission cache


def client_for(user: User | None) -> Any:
    """An API client authenticated by token (anonymous for None)."""
    extra("rest_framework", "api")
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    client = APIClient()
    if user is not None:
        token, _ = Token.objects.get_or_create(user=user)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


#: What the offline summarizer leaves out of a message (it keeps the first sentence).
SECOND_SENTENCE = (
    "A second sentence that the offline summary leaves out, as it keeps only the first "
    "sentence of each message it folds."
)


def text_of(i: int) -> str:
    """The text of the ``i``-th message :func:`fill` stores: two sentences, so that the offline
    summarizer, which keeps the first, makes a compression smaller than what it folds."""
    return f"m{i}. {SECOND_SENTENCE}"


def fill(user: User, count: int, session: str = "s1", agent: str = "a1") -> Slot:
    """A slot of ``user`` with ``count`` alternating messages, stored as a Python caller would."""
    batch = [msg("user" if i % 2 == 0 else "assistant", text_of(i)) for i in range(count)]
    storage = squad_memory.get_storage()
    for start in range(0, max(count, 1), 500):
        storage.save_chat_messages_sync(str(user.pk), session, agent, batch[start : start + 500])
    return Slot.objects.get(user_id=str(user.pk), session_id=session, agent_id=agent)


def one(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "content": [{"text": text}]}


def post(client: Any, body: Any, **kwargs: Any) -> Any:
    return client.post("/api/slots/messages/", body, format="json", **kwargs)


#: The one form of an error id in the API's answers (500, 502, 503).
ERROR_ID = re.compile("[0-9a-f]{12}")


def assert_error_id(body: dict[str, Any], caplog: Any, *logged_with: str) -> None:
    """``body`` carries an error id of the one form, written in the server's log with the
    error (and with each of ``logged_with``)."""
    error_id = body["error_id"]
    assert isinstance(error_id, str) and ERROR_ID.fullmatch(error_id), error_id
    lines = [record.getMessage() for record in caplog.records if error_id in record.getMessage()]
    assert lines, f"error id {error_id} is not in the log"
    assert all(any(text in line for line in lines) for text in logged_with), lines

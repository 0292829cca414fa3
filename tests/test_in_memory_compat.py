"""Where DjangoChatStorage matches agent-squad's InMemoryChatStorage, and where it deliberately differs.

Each difference tested here is listed in the README's storage section.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agent_squad.storage import ChatStorage, InMemoryChatStorage
from agent_squad.types import ConversationMessage, ParticipantRole

from squad_memory.exceptions import InvalidMessage, InvalidSlotKey
from squad_memory.messages import role_value
from squad_memory.models import Message, Slot
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
from tests.conftest import msg, texts

# Transactional: an inline compression runs on commit (transaction.on_commit), as in a
# project's autocommit code; a rolled-back test would never run it.
pytestmark = pytest.mark.django_db(transaction=True)

USER, ASSISTANT = ParticipantRole.USER, ParticipantRole.ASSISTANT
TOOL_USE = {"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": {"city": "Paris"}}}


def dump(messages: list[ConversationMessage]) -> list[tuple[str, Any]]:
    return [(role_value(m.role), m.content) for m in messages]


def summarizing() -> SummarizingChatStorage:
    return SummarizingChatStorage(DjangoChatStorage(), "squad_memory.summarizers.offline.summarize")


# -- string content: refused (InMemory stores the string and returns it unchanged) ------
def test_string_content_is_refused_where_in_memory_returns_the_string_as_given() -> None:
    memory = InMemoryChatStorage()
    asyncio.run(memory.save_chat_message("u", "s", "a", ConversationMessage("user", "Hello")))
    (fetched,) = asyncio.run(memory.fetch_chat("u", "s", "a"))
    assert fetched.content == "Hello"  # not [{"text": "Hello"}]: normalizing would not match
    with pytest.raises(InvalidMessage, match="list of block dicts"):
        DjangoChatStorage().save_chat_message_sync(
            "u", "s", "a", ConversationMessage("user", "Hello")
        )
    assert not Message.objects.exists() and not Slot.objects.exists()


# -- fetch_all_chats: an assistant message whose first block is not text -----------------
@pytest.mark.parametrize(
    "block,shown",
    [
        (TOOL_USE, "[a1] [toolUse: get_weather]"),
        ({"image": {"format": "png", "source": {"bytes": "iVBORw0K"}}}, "[a1] [image]"),
        ({"toolResult": {"toolUseId": "t1", "content": [{"text": "sunny"}]}}, "[a1] [toolResult]"),
        ({"text": "plain"}, "[a1] plain"),
    ],
)
@pytest.mark.parametrize("make", [DjangoChatStorage, summarizing])
def test_fetch_all_chats_names_a_first_block_that_is_not_text(
    make: Any, block: dict[str, Any], shown: str
) -> None:
    store = make()
    store.save_chat_messages_sync(
        "u",
        "s",
        "a1",
        [msg("user", "weather?"), ConversationMessage("assistant", [block, {"text": "after"}])],
    )
    assert texts(store.fetch_all_chats_sync("u", "s")) == ["weather?", shown]


def test_in_memory_fails_on_a_first_block_that_is_not_text() -> None:
    memory = InMemoryChatStorage()
    asyncio.run(
        memory.save_chat_messages(
            "u", "s", "a1", [msg("user", "q"), ConversationMessage("assistant", [TOOL_USE])]
        )
    )
    with pytest.raises(KeyError):
        asyncio.run(memory.fetch_all_chats("u", "s"))


# -- enum roles ---------------------------------------------------------------------------
ENUM_SCRIPT = [
    ConversationMessage(USER, [{"text": "hi"}]),
    ConversationMessage(USER, [{"text": "repeat: skipped"}]),
    ConversationMessage(ASSISTANT, [{"text": "hello"}]),
    ConversationMessage(USER, [{"text": "bye"}]),
]


def play_enum_roles(storage: ChatStorage) -> list[Any]:
    async def go() -> list[Any]:
        seen = [dump(await storage.save_chat_message("u", "s", "a", m)) for m in ENUM_SCRIPT]
        return [*seen, dump(await storage.fetch_chat("u", "s", "a"))]

    return asyncio.run(go())


def test_enum_roles_follow_the_role_rule_as_in_memory() -> None:
    assert play_enum_roles(DjangoChatStorage()) == play_enum_roles(InMemoryChatStorage())


def test_enum_and_string_roles_are_one_role_and_come_back_as_strings() -> None:
    """InMemory compares the values as given: USER then "user" are two roles there."""
    memory, store = InMemoryChatStorage(), DjangoChatStorage()
    for storage in (memory, store):
        asyncio.run(
            storage.save_chat_message("u", "s", "a", ConversationMessage(USER, [{"text": "one"}]))
        )
        asyncio.run(storage.save_chat_message("u", "s", "a", msg("user", "two")))
    assert texts(asyncio.run(memory.fetch_chat("u", "s", "a"))) == ["one", "two"]
    (only,) = store.fetch_chat_sync("u", "s", "a")
    assert texts([only]) == ["one"] and only.role == "user" and isinstance(only.role, str)


def test_enum_assistant_roles_get_the_agent_prefix() -> None:
    """InMemory prefixes only the string "assistant"; the stored role here is always a string."""
    messages = [
        ConversationMessage(USER, [{"text": "q"}]),
        ConversationMessage(ASSISTANT, [{"text": "a"}]),
    ]
    memory, store = InMemoryChatStorage(), DjangoChatStorage()
    asyncio.run(memory.save_chat_messages("u", "s", "a1", messages))
    store.save_chat_messages_sync("u", "s", "a1", messages)
    assert texts(asyncio.run(memory.fetch_all_chats("u", "s"))) == ["q", "a"]
    assert texts(store.fetch_all_chats_sync("u", "s")) == ["q", "[a1] a"]


# -- max_history_size ---------------------------------------------------------------------
def six() -> list[ConversationMessage]:
    return [msg(r, str(i)) for i, r in enumerate(["user", "assistant"] * 3)]


@pytest.mark.parametrize("size", [None, 0, 1, 2, 3, 4])
def test_non_negative_sizes_trim_as_in_memory(size: int | None) -> None:
    def play(storage: ChatStorage) -> list[Any]:
        saved = asyncio.run(storage.save_chat_messages("u", "s", "a", six(), size))
        return [dump(saved), dump(asyncio.run(storage.fetch_chat("u", "s", "a", size)))]

    assert play(DjangoChatStorage()) == play(InMemoryChatStorage())


@pytest.mark.parametrize("size", [-1, -2, -3])
def test_a_negative_size_keeps_everything_where_in_memory_drops_the_oldest(size: int) -> None:
    memory, store = InMemoryChatStorage(), DjangoChatStorage()
    dropped = -size + (-size) % 2  # InMemory: conversation[-(size rounded to even):]
    assert len(asyncio.run(memory.save_chat_messages("u", "s", "a", six(), size))) == 6 - dropped
    assert len(store.save_chat_messages_sync("u", "s", "a", six(), size)) == 6
    assert len(store.fetch_chat_sync("u", "s", "a", size)) == 6


# -- ids: fetch_all_chats validates them as fetch_chat does --------------------------------
BAD_IDS = [("x" * 256, "s"), ("u", "x" * 256), ("", "s"), ("u", None), ("u\x00", "s")]


@pytest.mark.parametrize(
    "make",
    [
        DjangoChatStorage,
        summarizing,
        lambda: SummarizingChatStorage(
            InMemoryChatStorage(), "squad_memory.summarizers.offline.summarize"
        ),
    ],
)
@pytest.mark.parametrize("user_id,session_id", BAD_IDS)
def test_fetch_all_chats_refuses_the_ids_fetch_chat_refuses(
    make: Any, user_id: Any, session_id: Any
) -> None:
    store = make()
    with pytest.raises(InvalidSlotKey):
        store.fetch_chat_sync(user_id, session_id, "a")
    with pytest.raises(InvalidSlotKey):
        store.fetch_all_chats_sync(user_id, session_id)
    with pytest.raises(InvalidSlotKey):
        asyncio.run(store.fetch_all_chats(user_id, session_id))


def test_in_memory_accepts_any_id() -> None:
    assert asyncio.run(InMemoryChatStorage().fetch_all_chats("x" * 256, "s")) == []

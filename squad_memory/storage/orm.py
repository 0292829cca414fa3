"""``DjangoChatStorage``: the agent-squad storage contract on the Django ORM.

The async methods run the synchronous ones through ``sync_to_async``, so they
work from any thread and any event loop, and transactions and row locks behave
the same everywhere.
"""

from __future__ import annotations

import functools
from typing import Any

from agent_squad.storage import ChatStorage
from agent_squad.types import ConversationMessage
from asgiref.sync import sync_to_async

from squad_memory import native
from squad_memory.conf import app_settings
from squad_memory.history import SlotKey
from squad_memory.journal import OrmJournal
from squad_memory.memory import Memory, Saved
from squad_memory.messages import to_messages, trim, validate_key
from squad_memory.models import DJANGO_NAMESPACE


def slot_key(user_id: str, session_id: str, agent_id: str) -> SlotKey:
    """A validated slot key (:class:`InvalidSlotKey` names what is wrong)."""
    limit = app_settings.max_id_length
    if type(user_id) is str and type(session_id) is str and type(agent_id) is str:
        _checked(user_id, session_id, agent_id, limit, app_settings.allow_invisible_ids)
    else:
        validate_key(user_id, session_id, agent_id, limit)
    return (user_id, session_id, agent_id)


@functools.lru_cache(maxsize=4096)
def _checked(user_id: str, session_id: str, agent_id: str, limit: int, invisible: bool) -> None:
    """Keys seen valid with these settings (a turn validates the same key three times)."""
    validate_key(user_id, session_id, agent_id, limit)


def check_session(user_id: str, session_id: str) -> None:
    """Validate the ids of ``fetch_all_chats`` as :func:`slot_key` does (``InvalidSlotKey``)."""
    validate_key(user_id, session_id, "-", app_settings.max_id_length)


def as_list(messages: Any) -> list[Any]:
    return list(messages or [])


class AsyncContract(ChatStorage):  # type: ignore[misc]
    """The four async ChatStorage methods over the ``*_sync`` ones.

    A turn's calls run on the event loop through :mod:`squad_memory.native` where it
    can (no thread hop); everything else runs the synchronous method in a thread.
    """

    memory: Memory

    async def save_chat_message(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_message: ConversationMessage,
        max_history_size: int | None = None,
    ) -> list[ConversationMessage]:
        key = slot_key(user_id, session_id, agent_id)
        saved = await native.save(
            self.memory, key, [new_message], check_role=True, size=max_history_size
        )
        if saved is not None:
            return await self._answer_async(saved)
        return await sync_to_async(self.save_chat_message_sync)(  # type: ignore[no-any-return]
            user_id, session_id, agent_id, new_message, max_history_size
        )

    async def save_chat_messages(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_messages: list[ConversationMessage],
        max_history_size: int | None = None,
    ) -> list[ConversationMessage]:
        key = slot_key(user_id, session_id, agent_id)
        saved = await native.save(
            self.memory, key, as_list(new_messages), check_role=False, size=max_history_size
        )
        if saved is not None:
            return await self._answer_async(saved)
        return await sync_to_async(self.save_chat_messages_sync)(  # type: ignore[no-any-return]
            user_id, session_id, agent_id, new_messages, max_history_size
        )

    async def fetch_chat(
        self, user_id: str, session_id: str, agent_id: str, max_history_size: int | None = None
    ) -> list[ConversationMessage]:
        found = await native.fetch(self.memory, slot_key(user_id, session_id, agent_id))
        if found is not None:
            return trim(to_messages(found, stored=True), max_history_size)
        return await sync_to_async(self.fetch_chat_sync)(
            user_id, session_id, agent_id, max_history_size
        )

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[ConversationMessage]:
        return await sync_to_async(self.fetch_all_chats_sync)(  # type: ignore[no-any-return]
            user_id, session_id
        )

    def fetch_chat_sync(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        max_history_size: int | None = None,
    ) -> list[ConversationMessage]:
        key = slot_key(user_id, session_id, agent_id)
        return trim(to_messages(self.memory.fetch(key)), max_history_size)

    def answer_of(self, saved: Saved) -> list[ConversationMessage]:
        """What a save returns, from what the save did."""
        raise NotImplementedError

    async def _answer_async(self, saved: Saved) -> list[ConversationMessage]:
        found = await native.answer(self.memory, saved, lambda: self.answer_of(saved))
        if found is not None:
            return found
        return await sync_to_async(self.answer_of)(saved)


class DjangoChatStorage(AsyncContract):
    """A ``ChatStorage`` on the Django ORM, behaving like agent-squad's ``InMemoryChatStorage``.

    The one deliberate difference: messages trimmed by ``max_history_size`` vanish
    from ``fetch_chat`` and ``fetch_all_chats`` but stay in the database, marked
    as trimmed. A save never deletes a raw message.
    """

    namespace = DJANGO_NAMESPACE

    def __init__(self) -> None:
        super().__init__()
        self.memory = Memory(OrmJournal())

    def save_chat_message_sync(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_message: ConversationMessage,
        max_history_size: int | None = None,
    ) -> list[ConversationMessage]:
        """Store a message unless it repeats the last role; return the visible conversation."""
        key = slot_key(user_id, session_id, agent_id)
        self.memory.save(key, [new_message], check_role=True, max_history_size=max_history_size)
        return self.fetch_chat_sync(user_id, session_id, agent_id)

    def save_chat_messages_sync(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_messages: list[ConversationMessage],
        max_history_size: int | None = None,
    ) -> list[ConversationMessage]:
        """Store messages (no role rule, as agent-squad); return the visible conversation."""
        key = slot_key(user_id, session_id, agent_id)
        messages = as_list(new_messages)
        self.memory.save(key, messages, check_role=False, max_history_size=max_history_size)
        return self.fetch_chat_sync(user_id, session_id, agent_id)

    def answer_of(self, saved: Saved) -> list[ConversationMessage]:
        return to_messages(self.memory.visible(saved.slot), stored=True)

    def fetch_all_chats_sync(self, user_id: str, session_id: str) -> list[ConversationMessage]:
        """Every agent's messages of a session by time; assistant text gets ``[agent_id]``."""
        check_session(user_id, session_id)
        return self.memory.journal.fetch_all(user_id, session_id)

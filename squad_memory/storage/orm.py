"""``DjangoChatStorage``: the agent-squad storage contract on the Django ORM.

The async methods run the synchronous core through ``sync_to_async``, so they
work from any thread and any event loop, and transactions and row locks behave
the same everywhere.
"""

from __future__ import annotations

from typing import Any

from agent_squad.storage import ChatStorage
from agent_squad.types import ConversationMessage
from asgiref.sync import sync_to_async

from squad_memory import history
from squad_memory.conf import app_settings
from squad_memory.history import AppendResult, SlotKey
from squad_memory.messages import MessageDict, to_dicts, to_messages, trim, validate_key
from squad_memory.models import DJANGO_NAMESPACE


def _key(user_id: str, session_id: str, agent_id: str) -> SlotKey:
    validate_key(user_id, session_id, agent_id, app_settings.max_id_length)
    return (user_id, session_id, agent_id)


def _as_list(messages: Any) -> list[Any]:
    return list(messages or [])


class DjangoChatStorage(ChatStorage):  # type: ignore[misc]
    """A ``ChatStorage`` on the Django ORM, behaving like agent-squad's ``InMemoryChatStorage``.

    The one deliberate difference: messages trimmed by ``max_history_size`` vanish
    from ``fetch_chat`` and ``fetch_all_chats`` but stay in the database, marked
    as trimmed. A save never deletes a raw message.
    """

    namespace = DJANGO_NAMESPACE

    # -- synchronous API ------------------------------------------------------------
    def save_chat_message_sync(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_message: ConversationMessage,
        max_history_size: int | None = None,
    ) -> list[ConversationMessage]:
        """Store a message unless it repeats the last role; return the visible conversation."""
        key = _key(user_id, session_id, agent_id)
        self.append(
            key, to_dicts([new_message]), check_role=True, max_history_size=max_history_size
        )
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
        key = _key(user_id, session_id, agent_id)
        messages = to_dicts(_as_list(new_messages))
        self.append(key, messages, check_role=False, max_history_size=max_history_size)
        return self.fetch_chat_sync(user_id, session_id, agent_id)

    def fetch_chat_sync(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        max_history_size: int | None = None,
    ) -> list[ConversationMessage]:
        key = _key(user_id, session_id, agent_id)
        return trim(to_messages(history.visible(self.namespace, key)), max_history_size)

    def fetch_all_chats_sync(self, user_id: str, session_id: str) -> list[ConversationMessage]:
        """Every agent's messages of a session by time; assistant text gets ``[agent_id]``."""
        rows = history.session_history(self.namespace, user_id, session_id)
        return [_with_agent_prefix(row) for row in rows]

    def append(
        self,
        key: SlotKey,
        messages: list[MessageDict],
        *,
        check_role: bool,
        max_history_size: int | None = None,
        trigger_at: int | None = None,
    ) -> AppendResult:
        """Store validated messages without reading anything back (the wrapper's path)."""
        return history.append(
            self.namespace,
            key,
            messages,
            check_role=check_role,
            max_history_size=max_history_size,
            trigger_at=trigger_at,
            pending_timeout=app_settings.pending_timeout,
        )

    # -- the ChatStorage contract ------------------------------------------------------
    async def save_chat_message(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_message: ConversationMessage,
        max_history_size: int | None = None,
    ) -> list[ConversationMessage]:
        return await sync_to_async(self.save_chat_message_sync)(
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
        return await sync_to_async(self.save_chat_messages_sync)(
            user_id, session_id, agent_id, new_messages, max_history_size
        )

    async def fetch_chat(
        self, user_id: str, session_id: str, agent_id: str, max_history_size: int | None = None
    ) -> list[ConversationMessage]:
        return await sync_to_async(self.fetch_chat_sync)(
            user_id, session_id, agent_id, max_history_size
        )

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[ConversationMessage]:
        return await sync_to_async(self.fetch_all_chats_sync)(user_id, session_id)


def _with_agent_prefix(row: dict[str, Any]) -> ConversationMessage:
    content = row["content"] or []
    if content and row["role"] == "assistant":
        content = [{"text": f"[{row['slot__agent_id']}] {content[0].get('text', '')}"}]
    return to_messages([{"role": row["role"], "content": content}])[0]

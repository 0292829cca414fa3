"""The agent-squad storage contract over a :class:`~squad_memory.storage.memory.Memory`, and
``DjangoChatStorage``: that contract on squad_memory's own tables. Every statement goes
through Django's connections (routers, ``ATOMIC_REQUESTS``, execute wrappers and health
checks apply); the async methods run it on a database thread (``squad_memory.threads``).
"""

from __future__ import annotations

from typing import Any

from agent_squad.storage import ChatStorage
from agent_squad.types import ConversationMessage

from squad_memory.messages import to_messages
from squad_memory.rules import trim, validate_key
from squad_memory.storage.memory import Before, Journal, Memory, Saved
from squad_memory.threads import database


class ChatStorageBase(ChatStorage):  # type: ignore[misc]
    """The four async ChatStorage methods over their ``*_sync`` twins, with the database work
    on a database thread and a summarizer never there (``squad_memory.threads``)."""

    memory: Memory

    async def save_chat_message(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_message: ConversationMessage,
        max_history_size: int | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> list[ConversationMessage]:
        """:meth:`save_chat_message_sync`, from async code. Cancelling the call does not
        cancel a save already running on its database thread (it may still be stored): to
        retry a cancelled or timed-out save, send it again with the same ``idempotency_key``
        (``docs/explanation/data-path.md``)."""
        key = validate_key(user_id, session_id, agent_id)
        rows = await self.memory.asave(
            key,
            [new_message],
            check_role=True,
            max_history_size=max_history_size,
            idempotency_key=idempotency_key,
        )
        return to_messages(rows)

    async def save_chat_messages(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_messages: list[ConversationMessage],
        max_history_size: int | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> list[ConversationMessage]:
        """:meth:`save_chat_messages_sync`, from async code (a retry after a cancel: as
        :meth:`save_chat_message`)."""
        key = validate_key(user_id, session_id, agent_id)
        rows = await self.memory.asave(
            key,
            list(new_messages or []),
            check_role=False,
            max_history_size=max_history_size,
            idempotency_key=idempotency_key,
        )
        return to_messages(rows)

    async def fetch_chat(
        self, user_id: str, session_id: str, agent_id: str, max_history_size: int | None = None
    ) -> list[ConversationMessage]:
        """:meth:`fetch_chat_sync`, from async code."""
        key = validate_key(user_id, session_id, agent_id)
        return trim(to_messages(await self.memory.afetch(key)), max_history_size)

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[ConversationMessage]:
        """:meth:`fetch_all_chats_sync`, from async code."""
        return await database(self.fetch_all_chats_sync, user_id, session_id)

    def save_chat_message_sync(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_message: ConversationMessage,
        max_history_size: int | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> list[ConversationMessage]:
        """Store a message unless it repeats the last role; return the conversation.

        ``idempotency_key`` (a new ``str(uuid.uuid4())`` per save, the same for its
        retries): the save is stored once per key and slot, as the API's
        ``Idempotency-Key``; a retry with the same message stores nothing and returns the
        conversation as it is then (which holds the message once); the same key with
        another message raises :class:`~squad_memory.exceptions.IdempotencyKeyReused`.
        Keys are kept ``IDEMPOTENCY_TTL`` seconds."""
        key = validate_key(user_id, session_id, agent_id)
        saved = self.memory.save(
            key,
            [new_message],
            check_role=True,
            max_history_size=max_history_size,
            idempotency_key=idempotency_key,
        )
        return to_messages(self.memory.answer(saved, key))

    def save_chat_messages_sync(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_messages: list[ConversationMessage],
        max_history_size: int | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> list[ConversationMessage]:
        """Store messages as given (no role rule, as agent-squad); return the conversation.
        ``idempotency_key``: as :meth:`save_chat_message_sync`'s."""
        saved = self.save_messages_detailed(
            user_id,
            session_id,
            agent_id,
            list(new_messages or []),
            check_role=False,
            max_history_size=max_history_size,
            idempotency_key=idempotency_key,
        )
        return to_messages(self.memory.answer(saved, saved.slot.key))

    def save_messages_detailed(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_messages: list[Any],
        *,
        check_role: bool,
        max_history_size: int | None = None,
        read_view: bool = True,
        idempotency_key: str | None = None,
    ) -> Saved:
        """Store messages as ``save_chat_message`` (``check_role=True``: one message, the role
        rule) or ``save_chat_messages`` does, and say what was stored (the API's path);
        ``read_view=False``: the save does not read the conversation for an answer.
        ``idempotency_key``: as :meth:`save_chat_message_sync`'s; a retry returns the first
        save's :class:`Saved` (its rows read back, ``replayed=True``)."""
        key = validate_key(user_id, session_id, agent_id)
        return self.memory.save(
            key,
            new_messages,
            check_role=check_role,
            max_history_size=max_history_size,
            read_view=read_view,
            idempotency_key=idempotency_key,
        )

    def fetch_chat_sync(
        self, user_id: str, session_id: str, agent_id: str, max_history_size: int | None = None
    ) -> list[ConversationMessage]:
        key = validate_key(user_id, session_id, agent_id)
        return trim(to_messages(self.memory.fetch(key)), max_history_size)

    def fetch_all_chats_sync(self, user_id: str, session_id: str) -> list[ConversationMessage]:
        """Every agent's messages of a session by time; assistant text gets ``[agent_id]``."""
        validate_key(user_id, session_id, "-")
        return self.memory.journal.fetch_all(user_id, session_id)

    def history_page_sync(
        self, user_id: str, session_id: str, size: int, before: Before | None = None
    ) -> tuple[list[ConversationMessage], dict[int, int]]:
        """A page of the merged history, newest first: the ``size`` newest messages before
        ``before`` (None: the newest), oldest first, and the position of the page before
        them ({}: none). A walk reads every visible message, whatever ``FETCH_ALL_LIMIT``."""
        validate_key(user_id, session_id, "-")
        return self.memory.journal.history(user_id, session_id, size, before)


class DjangoChatStorage(ChatStorageBase):
    """A ``ChatStorage`` on the Django ORM, behaving like agent-squad's ``InMemoryChatStorage``
    but for one deliberate difference: messages trimmed by ``max_history_size`` vanish from
    ``fetch_chat`` and ``fetch_all_chats`` but stay in the database, marked as trimmed."""

    def __init__(self) -> None:
        super().__init__()
        self.memory = Memory(Journal())

    @property
    def namespace(self) -> str:
        return self.memory.namespace

"""``SummarizingChatStorage``: a compact, persistent summary buffer over any ChatStorage."""

from __future__ import annotations

from typing import Any

from agent_squad.storage import ChatStorage
from agent_squad.types import ConversationMessage

from squad_memory.compression import Result
from squad_memory.conf import app_settings
from squad_memory.journal import ForeignJournal, Journal, OrmJournal
from squad_memory.memory import Memory, Saved
from squad_memory.messages import to_messages
from squad_memory.policy import Policy
from squad_memory.storage.orm import (
    AsyncContract,
    DjangoChatStorage,
    as_list,
    check_session,
    slot_key,
)
from squad_memory.summarizers import Summarizer, SummarizerFunc, resolve


class SummarizingChatStorage(AsyncContract):
    """Wraps any ``ChatStorage``; ``fetch_chat`` returns a compact, persistent summary buffer.

    Raw messages always reach the inner store first and are never modified;
    ``fetch_all_chats`` is never intercepted. The buffer lives in the database, so
    every process and every new instance sees the same one. See the README.

    Args:
        storage: the inner store: :class:`DjangoChatStorage` or any agent-squad store.
        summarizer: ``(history, keep_last) -> list[ConversationMessage]``, sync or async,
            or its dotted path.
        trigger_at: compress when the buffer holds more than this many message pairs.
        keep_last: message pairs the summarizer keeps verbatim.
        mode: ``"inline"`` or ``"celery"``; defaults to ``SQUAD_MEMORY["MODE"]``.
        on_error: ``"record"`` (default) logs a summarizer failure and keeps the save;
            ``"raise"`` makes the save raise :class:`SummarizerError` after storing.
        namespace: for a foreign inner store, the name its slots are kept under
            (defaults to the store's class name).
        max_buffer_pairs: the hard limit: while compressions lag or fail, ``fetch_chat``
            returns the summary plus at most this many newest pairs; defaults to
            ``SQUAD_MEMORY["MAX_BUFFER_PAIRS"]`` (None: 3 x trigger_at).
        trigger_tokens: compress also when the buffer holds more than this many tokens
            (counted by ``SQUAD_MEMORY["TOKEN_COUNTER"]``); defaults to
            ``SQUAD_MEMORY["TRIGGER_TOKENS"]`` (None: pairs only).
        max_buffer_tokens: the hard limit in tokens: ``fetch_chat`` returns the summary
            plus the newest messages that fit; defaults to ``SQUAD_MEMORY["MAX_BUFFER_TOKENS"]``.
    """

    def __init__(
        self,
        storage: ChatStorage,
        summarizer: str | SummarizerFunc | Summarizer,
        trigger_at: int = 20,
        keep_last: int = 2,
        *,
        mode: str | None = None,
        on_error: str | None = None,
        namespace: str | None = None,
        max_buffer_pairs: int | None = None,
        trigger_tokens: int | None = None,
        max_buffer_tokens: int | None = None,
    ) -> None:
        super().__init__()
        self._storage = storage
        self.policy = Policy(
            resolve(summarizer),
            trigger_at,
            keep_last,
            mode=mode or app_settings.mode,
            on_error=on_error or app_settings.on_error,
            max_buffer_pairs=max_buffer_pairs or app_settings.max_buffer_pairs,
            trigger_tokens=trigger_tokens or app_settings.trigger_tokens,
            max_buffer_tokens=max_buffer_tokens or app_settings.max_buffer_tokens,
        )
        journal: Journal = (
            OrmJournal()
            if isinstance(storage, DjangoChatStorage)
            else ForeignJournal(storage, namespace or type(storage).__name__)
        )
        self.memory = Memory(journal, self.policy)

    @property
    def storage(self) -> ChatStorage:
        return self._storage

    @property
    def summarizer(self) -> Summarizer:
        return self.policy.summarizer

    @property
    def trigger_at(self) -> int:
        return self.policy.trigger_at

    @property
    def keep_last(self) -> int:
        return self.policy.keep_last

    @property
    def mode(self) -> str:
        return self.policy.mode

    @property
    def on_error(self) -> str:
        return self.policy.on_error

    @property
    def namespace(self) -> str:
        return self.memory.namespace

    # -- synchronous API ------------------------------------------------------------
    def save_chat_message_sync(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_message: ConversationMessage,
        max_history_size: int | None = None,
    ) -> list[ConversationMessage]:
        saved = self.save_messages_detailed(
            user_id,
            session_id,
            agent_id,
            [new_message],
            check_role=True,
            max_history_size=max_history_size,
        )
        return self.answer_of(saved)

    def save_chat_messages_sync(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_messages: list[ConversationMessage],
        max_history_size: int | None = None,
    ) -> list[ConversationMessage]:
        saved = self.save_messages_detailed(
            user_id,
            session_id,
            agent_id,
            as_list(new_messages),
            check_role=False,
            max_history_size=max_history_size,
        )
        if not saved.appended.accepted and not saved.skipped:  # an empty batch
            return to_messages(self.memory.peek(slot_key(user_id, session_id, agent_id)))
        return self.answer_of(saved)

    def fetch_all_chats_sync(self, user_id: str, session_id: str) -> list[ConversationMessage]:
        check_session(user_id, session_id)
        return self.memory.journal.fetch_all(user_id, session_id)

    def save_messages_detailed(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_messages: list[Any],
        *,
        check_role: bool,
        max_history_size: int | None = None,
    ) -> Saved:
        """Store messages like the save methods and say what was stored (the API's path).

        ``check_role=True`` is ``save_chat_message`` (one message, role rule);
        ``False`` is ``save_chat_messages``.
        """
        key = slot_key(user_id, session_id, agent_id)
        return self.memory.save(
            key, as_list(new_messages), check_role=check_role, max_history_size=max_history_size
        )

    def compress_now(self, user_id: str, session_id: str, agent_id: str) -> Result:
        """Compress a slot's buffer now, whatever its length (admin and API action).

        Activates the buffer if needed. The result's ``outcome`` says what happened:
        applied, failed, stale, skipped (no such slot), queued or not queued (Celery
        mode), already pending, or deferred (it runs when the caller's transaction commits).
        """
        return self.memory.compress_now(slot_key(user_id, session_id, agent_id))

    # -- internals ---------------------------------------------------------------------
    def answer_of(self, saved: Saved) -> list[ConversationMessage]:
        """What a save returns: the buffer as the save left it."""
        result = saved.compression
        if result is not None and result.applied and result.output is not None:
            return to_messages(result.output)
        if saved.inner is not None and not saved.slot.active:
            return as_list(saved.inner) if isinstance(saved.inner, list) else []
        return to_messages(self.memory.current(saved.slot), stored=True)

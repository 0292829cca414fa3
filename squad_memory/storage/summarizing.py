"""``SummarizingChatStorage``: a compact, persistent summary buffer over any ChatStorage."""

from __future__ import annotations

from agent_squad.storage import ChatStorage

from squad_memory.compression import Policy, Result
from squad_memory.conf import app_settings
from squad_memory.models import Limits
from squad_memory.rules import validate_key
from squad_memory.storage.base import ChatStorageBase, DjangoChatStorage
from squad_memory.storage.memory import ForeignJournal, Journal, Memory
from squad_memory.summarizers import Summarizer, SummarizerFunc, resolve


class SummarizingChatStorage(ChatStorageBase):
    """Wraps any ``ChatStorage``; ``fetch_chat`` returns a compact, persistent summary buffer.

    Raw messages always reach the inner store first and are never modified; ``fetch_all_chats`` is
    never intercepted. The buffer lives in the database, so every process and every new instance
    sees the same one. Arguments left None default to their ``SQUAD_MEMORY`` setting.

    Args:
        storage: the inner store: :class:`DjangoChatStorage` or any agent-squad store.
        summarizer: ``(history, keep_last) -> list[ConversationMessage]``, sync or async,
            or its dotted path.
        trigger_at: compress when the buffer holds more than this many message pairs
            (None: ``TRIGGER_AT``).
        keep_last: message pairs the summarizer keeps verbatim (None: ``KEEP_LAST``).
        mode: ``"inline"``, ``"celery"``, ``"tasks"`` or a dispatcher's dotted path.
        on_error: ``"record"`` logs a summarizer failure and keeps the save; ``"raise"``
            makes the save raise :class:`SummarizerError` after storing.
        namespace: for a foreign inner store, the name its slots are kept under
            (defaults to the store's class name).
        max_buffer_pairs: the hard limit: while compressions lag or fail, ``fetch_chat``
            returns the summary plus at most this many newest pairs (None: 3 x trigger_at).
        trigger_tokens: compress also when the buffer holds more than this many tokens
            (counted by ``TOKEN_COUNTER``; None: pairs only).
        max_buffer_tokens: the hard limit in tokens: ``fetch_chat`` returns the summary
            plus the newest messages that fit.
    """

    def __init__(
        self,
        storage: ChatStorage,
        summarizer: str | SummarizerFunc | Summarizer,
        trigger_at: int | None = None,
        keep_last: int | None = None,
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
        limits = Limits(
            app_settings.trigger_at if trigger_at is None else trigger_at,
            app_settings.keep_last if keep_last is None else keep_last,
            max_buffer_pairs or app_settings.max_buffer_pairs,
            trigger_tokens or app_settings.trigger_tokens,
            max_buffer_tokens or app_settings.max_buffer_tokens,
        )
        self.policy = Policy(
            resolve(summarizer),
            limits,
            mode or app_settings.mode,
            on_error or app_settings.on_error,
        )
        journal: Journal = (
            storage.memory.journal
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
        return self.policy.limits.trigger_at

    @property
    def keep_last(self) -> int:
        return self.policy.limits.keep_last

    @property
    def mode(self) -> str:
        return self.policy.mode

    @property
    def on_error(self) -> str:
        return self.policy.on_error

    @property
    def namespace(self) -> str:
        return self.memory.namespace

    def compress_now(self, user_id: str, session_id: str, agent_id: str) -> Result:
        """Compress a slot's buffer now, whatever its length, activating it if needed (the admin's
        and the API's action); ``skipped``: no such slot, ``deferred``: after the commit."""
        return self.memory.compress_now(validate_key(user_id, session_id, agent_id))

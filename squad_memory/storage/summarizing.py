"""``SummarizingChatStorage``: a compact, persistent summary buffer over any ChatStorage."""

from __future__ import annotations

from typing import Any

from agent_squad.storage import ChatStorage
from agent_squad.types import ConversationMessage
from asgiref.sync import async_to_sync, sync_to_async
from django.db import transaction

from squad_memory import buffer, history, sql
from squad_memory.conf import app_settings
from squad_memory.exceptions import ConfigurationError, SummarizerError
from squad_memory.history import AppendResult, SlotKey
from squad_memory.messages import (
    MessageDict,
    effective_keep_last,
    needs_compression,
    to_dicts,
    to_messages,
    trim,
)
from squad_memory.models import Slot
from squad_memory.storage.orm import DjangoChatStorage, _as_list, _key
from squad_memory.summarizers import Summarizer, SummarizerFunc, require_importable, resolve


class SummarizingChatStorage(ChatStorage):  # type: ignore[misc]
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
    ) -> None:
        super().__init__()
        _check_sizes(trigger_at, keep_last)
        self._storage = storage
        self._summarizer = resolve(summarizer)
        self.trigger_at, self.keep_last = trigger_at, keep_last
        self.mode = mode or app_settings.mode
        self.on_error = on_error or app_settings.on_error
        _check_choice("mode", self.mode, ("inline", "celery"))
        _check_choice("on_error", self.on_error, ("record", "raise"))
        if self.mode == "celery":
            require_importable(self._summarizer)
        self._django = isinstance(storage, DjangoChatStorage)
        self.namespace = (
            storage.namespace
            if isinstance(storage, DjangoChatStorage)
            else (namespace or type(storage).__name__)
        )

    @property
    def storage(self) -> ChatStorage:
        return self._storage

    @property
    def summarizer(self) -> Summarizer:
        return self._summarizer

    # -- synchronous API ------------------------------------------------------------
    def save_chat_message_sync(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_message: ConversationMessage,
        max_history_size: int | None = None,
    ) -> list[ConversationMessage]:
        if not self._django:
            return async_to_sync(self.save_chat_message)(
                user_id, session_id, agent_id, new_message, max_history_size
            )
        key = _key(user_id, session_id, agent_id)
        result = self._append(key, to_dicts([new_message]), True, max_history_size)
        return self._after_append(result, None)

    def save_chat_messages_sync(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_messages: list[ConversationMessage],
        max_history_size: int | None = None,
    ) -> list[ConversationMessage]:
        if not self._django:
            return async_to_sync(self.save_chat_messages)(
                user_id, session_id, agent_id, new_messages, max_history_size
            )
        key = _key(user_id, session_id, agent_id)
        result = self._append(key, to_dicts(_as_list(new_messages)), False, max_history_size)
        return self._after_append(result, None)

    def fetch_chat_sync(
        self, user_id: str, session_id: str, agent_id: str, max_history_size: int | None = None
    ) -> list[ConversationMessage]:
        if not self._django:
            return async_to_sync(self.fetch_chat)(user_id, session_id, agent_id, max_history_size)
        key = _key(user_id, session_id, agent_id)
        slot = self._slot(key)
        if slot is None:
            return []
        # Activation judges the whole history, trimmed messages included.
        if not slot.active and needs_compression(slot.last_seq, slot.trigger_at or self.trigger_at):
            return trim(self._activate(slot, None) or [], max_history_size)
        return trim(to_messages(buffer.current(slot)), max_history_size)

    def fetch_all_chats_sync(self, user_id: str, session_id: str) -> list[ConversationMessage]:
        if isinstance(self._storage, DjangoChatStorage):
            return self._storage.fetch_all_chats_sync(user_id, session_id)
        return _as_list(async_to_sync(self._storage.fetch_all_chats)(user_id, session_id))

    def save_messages_detailed(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_messages: list[Any],
        *,
        check_role: bool,
        max_history_size: int | None = None,
    ) -> AppendResult:
        """Store messages like the save methods and say what was stored (the API's path).

        ``check_role=True`` is ``save_chat_message`` (one message, role rule);
        ``False`` is ``save_chat_messages``. Needs a :class:`DjangoChatStorage` inside.
        """
        if not self._django:
            raise ConfigurationError("save_messages_detailed needs a DjangoChatStorage inside.")
        key = _key(user_id, session_id, agent_id)
        result = self._append(key, to_dicts(_as_list(new_messages)), check_role, max_history_size)
        if result.claim:
            self._run_claim(result.slot, result.claim, "save")
        return result

    def compress_now(self, user_id: str, session_id: str, agent_id: str) -> buffer.Outcome | None:
        """Compress a slot's buffer now, whatever its length (admin and API action).

        Activates the buffer if needed. Returns None when the compression was
        enqueued (Celery mode) or another one is already pending.
        """
        key = _key(user_id, session_id, agent_id)
        slot = self._slot(key)
        if slot is None:
            return None
        seed = None
        if not self._django and not slot.active:
            raw = async_to_sync(self._storage.fetch_chat)(user_id, session_id, agent_id)
            seed = to_dicts(_as_list(raw))
        slot, token = buffer.activate(slot.pk, None, app_settings.pending_timeout, seed)
        return self._run_claim(slot, token, "manual") if token else None

    # -- the ChatStorage contract ------------------------------------------------------
    async def save_chat_message(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_message: ConversationMessage,
        max_history_size: int | None = None,
    ) -> list[ConversationMessage]:
        if self._django:
            return await sync_to_async(self.save_chat_message_sync)(
                user_id, session_id, agent_id, new_message, max_history_size
            )
        key, messages = _key(user_id, session_id, agent_id), to_dicts([new_message])
        inner = await self._storage.save_chat_message(
            user_id, session_id, agent_id, new_message, max_history_size
        )
        return await sync_to_async(self._record_foreign)(key, messages, True, inner)

    async def save_chat_messages(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_messages: list[ConversationMessage],
        max_history_size: int | None = None,
    ) -> list[ConversationMessage]:
        if self._django:
            return await sync_to_async(self.save_chat_messages_sync)(
                user_id, session_id, agent_id, new_messages, max_history_size
            )
        key, messages = _key(user_id, session_id, agent_id), to_dicts(_as_list(new_messages))
        if not messages:
            return await self.fetch_chat(user_id, session_id, agent_id)
        inner = await self._storage.save_chat_messages(
            user_id, session_id, agent_id, new_messages, max_history_size
        )
        return await sync_to_async(self._record_foreign)(key, messages, False, inner)

    async def fetch_chat(
        self, user_id: str, session_id: str, agent_id: str, max_history_size: int | None = None
    ) -> list[ConversationMessage]:
        if self._django:
            return await sync_to_async(self.fetch_chat_sync)(
                user_id, session_id, agent_id, max_history_size
            )
        key = _key(user_id, session_id, agent_id)
        slot = await sync_to_async(self._slot)(key)
        if slot is not None and slot.active:
            rows = await sync_to_async(buffer.read)(slot)
            return trim(to_messages(rows), max_history_size)
        # Judge activation on the whole history; foreign stores may take no size argument.
        seen = slot.last_seq if slot is not None else 0
        raw = _as_list(await self._storage.fetch_chat(user_id, session_id, agent_id))
        messages = await sync_to_async(self._activate_foreign)(key, raw, seen)
        return trim(messages, max_history_size)

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[ConversationMessage]:
        return _as_list(await self._storage.fetch_all_chats(user_id, session_id))

    # -- internals ---------------------------------------------------------------------
    def _slot(self, key: SlotKey) -> Slot | None:
        return sql.select_slot(self.namespace, *key)

    def _append(
        self, key: SlotKey, messages: list[MessageDict], single: bool, size: int | None
    ) -> AppendResult:
        assert isinstance(self._storage, DjangoChatStorage)
        return self._storage.append(
            key, messages, check_role=single, max_history_size=size, trigger_at=self.trigger_at
        )

    def _record_foreign(
        self, key: SlotKey, messages: list[MessageDict], single: bool, inner: Any
    ) -> list[ConversationMessage]:
        result = history.append(
            self.namespace,
            key,
            messages,
            check_role=single,
            store_rows=False,
            trigger_at=self.trigger_at,
            pending_timeout=app_settings.pending_timeout,
        )
        return self._after_append(result, inner)

    def _after_append(self, result: AppendResult, inner: Any) -> list[ConversationMessage]:
        slot = result.slot
        if result.claim:
            outcome = self._run_claim(slot, result.claim, "save")
            if outcome is not None and outcome.applied and outcome.output is not None:
                return to_messages(outcome.output)
        if inner is not None and not slot.active:
            return _as_list(inner) if isinstance(inner, list) else []
        return to_messages(buffer.current(slot))

    def _activate(
        self, slot: Slot, seed: list[MessageDict] | None, seen: int | None = None
    ) -> list[ConversationMessage] | None:
        """Activate and compress; None if a save moved the slot past ``seen`` meanwhile."""
        slot, token = buffer.activate(
            slot.pk, self.trigger_at, app_settings.pending_timeout, seed, expect_last_seq=seen
        )
        if not slot.active:
            return None
        if token:
            self._run_claim(slot, token, "activation")
            slot.refresh_from_db()
        return to_messages(buffer.read(slot))

    def _activate_foreign(
        self, key: SlotKey, raw: list[Any], seen: int
    ) -> list[ConversationMessage]:
        slot = self._slot(key)
        trigger = (slot.trigger_at if slot else None) or self.trigger_at
        if not needs_compression(len(raw), trigger):
            return to_messages(to_dicts(raw))
        if slot is None:
            slot, _ = Slot.objects.get_or_create(
                namespace=self.namespace, user_id=key[0], session_id=key[1], agent_id=key[2]
            )
        # A save recorded after ``raw`` was read would be missing from the seed: retry later.
        activated = self._activate(slot, to_dicts(raw), seen)
        return activated if activated is not None else to_messages(to_dicts(raw))

    def _run_claim(self, slot: Slot, token: str, trigger: str) -> buffer.Outcome | None:
        """Compress a claimed slot now (inline) or hand it to a worker (Celery mode).

        Inside a caller's transaction (``ATOMIC_REQUESTS``, an ``atomic()`` block) an
        inline compression waits for the commit: the summarizer never runs while the
        slot's row lock is held.
        """
        keep_last = effective_keep_last(slot, self.trigger_at, self.keep_last)
        if self.mode == "celery":
            from squad_memory import tasks

            path = require_importable(self._summarizer)
            tasks.enqueue_compression(slot.pk, token, path, keep_last, self.trigger_at)
            return None
        if buffer.in_callers_transaction():
            transaction.on_commit(lambda: self._compress(slot, token, keep_last, trigger))
            return None
        return self._compress(slot, token, keep_last, trigger)

    def _compress(self, slot: Slot, token: str, keep_last: int, trigger: str) -> buffer.Outcome:
        outcome = buffer.compress(
            buffer.snapshot(slot), token, self._summarizer, keep_last, trigger=trigger
        )
        if outcome.error is not None and self.on_error == "raise":
            raise SummarizerError(
                f"The summarizer {self._summarizer.label} failed; the message was stored and the "
                f"buffer kept uncompressed: {outcome.error}"
            ) from outcome.error
        return outcome


def _check_sizes(trigger_at: Any, keep_last: Any) -> None:
    if not isinstance(trigger_at, int) or isinstance(trigger_at, bool) or trigger_at < 1:
        raise ConfigurationError(f"trigger_at must be a positive integer, got {trigger_at!r}.")
    if not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 0:
        raise ConfigurationError(f"keep_last must be a non-negative integer, got {keep_last!r}.")
    if keep_last >= trigger_at:
        raise ConfigurationError(
            f"keep_last ({keep_last}) must be smaller than trigger_at ({trigger_at}), "
            f"or a compression could never shorten the buffer."
        )


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigurationError(f"{name} must be one of {', '.join(choices)}; got {value!r}.")

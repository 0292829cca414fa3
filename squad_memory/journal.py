"""Journals: where a slot's raw history and the buffer's tail live.

- :class:`OrmJournal`: the raw rows in the database are both the history and the
  buffer's tail (:class:`~squad_memory.storage.DjangoChatStorage`).
- :class:`ForeignJournal`: an agent-squad store keeps the history; squad_memory keeps
  the slot's counters and, once the buffer is active, its own tail rows. Every
  call into the foreign store's async API is made here, in :meth:`ForeignJournal.call`.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync

from squad_memory import history
from squad_memory.history import SlotKey
from squad_memory.messages import MessageDict, to_dicts, to_messages
from squad_memory.models import DJANGO_NAMESPACE, Slot


class Journal:
    """Where raw messages go before squad_memory records them (nothing, by default)."""

    namespace = DJANGO_NAMESPACE
    #: ``None``: every message is stored as a row; ``False``: only while active.
    store_rows: bool | None = None

    def save(self, key: SlotKey, messages: list[Any], single: bool, size: int | None) -> Any:
        """Hand the raw messages to the store that keeps the history; its answer."""
        return None

    def seed(self, key: SlotKey) -> list[MessageDict] | None:
        """The history a new buffer starts from: None means the slot's own rows."""
        return None

    def visible(self, key: SlotKey, slot: Slot | None) -> list[MessageDict]:
        """What an inactive slot's ``fetch_chat`` shows."""
        return history.visible(self.namespace, key)

    def fetch_all(self, user_id: str, session_id: str) -> list[Any]:
        """Every agent's messages of a session by time; assistant text gets ``[agent_id]``."""
        rows = history.session_history(self.namespace, user_id, session_id)
        return [_with_agent_prefix(row) for row in rows]


class OrmJournal(Journal):
    """The raw rows are the history and the buffer's tail."""


class ForeignJournal(Journal):
    """An agent-squad store keeps the history; this records the buffer beside it."""

    store_rows = False

    def __init__(self, store: Any, namespace: str) -> None:
        self.store = store
        self.namespace = namespace

    def call(self, method: str, *args: Any) -> Any:
        """Call one of the foreign store's async methods from synchronous code."""
        return async_to_sync(getattr(self.store, method))(*args)

    def save(self, key: SlotKey, messages: list[Any], single: bool, size: int | None) -> Any:
        if single:
            return self.call("save_chat_message", *key, messages[0], size)
        return self.call("save_chat_messages", *key, messages, size)

    def seed(self, key: SlotKey) -> list[MessageDict] | None:
        # Foreign stores may take no size argument: the whole history, trimmed by the caller.
        return to_dicts(list(self.call("fetch_chat", *key) or []))

    def visible(self, key: SlotKey, slot: Slot | None) -> list[MessageDict]:
        return self.seed(key) or []

    def fetch_all(self, user_id: str, session_id: str) -> list[Any]:
        return list(self.call("fetch_all_chats", user_id, session_id) or [])


def _with_agent_prefix(row: dict[str, Any]) -> Any:
    content = row["content"] or []
    if content and row["role"] == "assistant":
        content = [{"text": f"[{row['slot__agent_id']}] {block_text(content[0])}"}]
    return to_messages([{"role": row["role"], "content": content, "citations": None}])[0]


def block_text(block: dict[str, Any]) -> str:
    """A content block as one line: its text, or its kind (``[toolUse: get_weather]``)."""
    if isinstance(block.get("text"), str):
        return str(block["text"])
    kind = next(iter(block), "empty")
    value = block.get(kind)
    name = value.get("name") if isinstance(value, dict) else None
    return f"[{kind}: {name}]" if isinstance(name, str) and name else f"[{kind}]"

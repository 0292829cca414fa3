"""The agent-squad storage contract: ``DjangoChatStorage`` and ``SummarizingChatStorage``,
each with the four async ``ChatStorage`` methods and their synchronous twins (``*_sync``).
"""

from __future__ import annotations

from squad_memory.conf import app_settings
from squad_memory.storage.base import ChatStorageBase, DjangoChatStorage
from squad_memory.storage.memory import Memory, Saved
from squad_memory.storage.summarizing import SummarizingChatStorage

__all__ = [
    "ChatStorageBase",
    "DjangoChatStorage",
    "Memory",
    "Saved",
    "SummarizingChatStorage",
    "get_storage",
]


def get_storage() -> SummarizingChatStorage:
    """The storage ``settings.SQUAD_MEMORY`` describes, over :class:`DjangoChatStorage`
    (built from the settings as they are now: cheap, and nothing to reset)."""
    return SummarizingChatStorage(DjangoChatStorage(), app_settings.raw("SUMMARIZER"))

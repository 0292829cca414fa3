"""The agent-squad storage contract: ``DjangoChatStorage`` and ``SummarizingChatStorage``.

Each class has the four async methods of ``agent_squad.storage.ChatStorage`` and
plain synchronous equivalents (``*_sync``) for Django views and Celery tasks.
"""

from __future__ import annotations

import functools

from squad_memory.conf import app_settings
from squad_memory.storage.orm import DjangoChatStorage
from squad_memory.storage.summarizing import SummarizingChatStorage

__all__ = ["DjangoChatStorage", "SummarizingChatStorage", "get_storage"]


@functools.lru_cache(maxsize=1)
def get_storage() -> SummarizingChatStorage:
    """The storage ``settings.SQUAD_MEMORY`` describes, over :class:`DjangoChatStorage`."""
    return SummarizingChatStorage(
        DjangoChatStorage(),
        app_settings.summarizer_path,
        app_settings.trigger_at,
        app_settings.keep_last,
        mode=app_settings.mode,
        on_error=app_settings.on_error,
    )

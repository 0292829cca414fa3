"""The agent-squad storage contract: ``DjangoChatStorage`` and ``SummarizingChatStorage``.

Each class has the four async methods of ``agent_squad.storage.ChatStorage`` and
plain synchronous equivalents (``*_sync``) for Django views and Celery tasks.
"""

from __future__ import annotations

import functools
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver

from squad_memory.conf import SETTING_NAME, app_settings
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


@receiver(setting_changed)
def _reset_storage(*, setting: str, **kwargs: Any) -> None:
    """``override_settings(SQUAD_MEMORY=...)`` gets a storage built from the new values."""
    if setting == SETTING_NAME:
        get_storage.cache_clear()

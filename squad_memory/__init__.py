"""squad_memory: durable, compact conversation memory for Django and agent-squad."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

if TYPE_CHECKING:
    from squad_memory.storage import SummarizingChatStorage

__all__ = ["__version__", "get_storage"]


def get_storage() -> SummarizingChatStorage:
    """The ``SummarizingChatStorage`` ``settings.SQUAD_MEMORY`` describes."""
    from squad_memory.storage import get_storage as build

    return build()


def __getattr__(name: str) -> Any:
    if name in {"DjangoChatStorage", "SummarizingChatStorage"}:
        from squad_memory import storage

        return getattr(storage, name)
    raise AttributeError(name)

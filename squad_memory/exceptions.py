"""Exceptions raised by squad_memory. Each message says what to do."""

from __future__ import annotations


class SquadMemoryError(Exception):
    """Base class of every squad_memory error."""


class InvalidMessage(SquadMemoryError, ValueError):
    """A message given to a save is not a valid conversation message."""


class InvalidSlotKey(SquadMemoryError, ValueError):
    """A user, session or agent id is empty, too long or not a string."""


class InvalidSummarizerOutput(SquadMemoryError, ValueError):
    """The summarizer returned something other than a list of messages."""


class SummarizerError(SquadMemoryError):
    """The summarizer raised; raised from a save only when ``on_error="raise"``."""


class SummarizerNotImportable(SquadMemoryError, ValueError):
    """Celery mode needs a summarizer a worker can import by dotted path."""


class ConfigurationError(SquadMemoryError, ValueError):
    """A storage was built with arguments that cannot work."""

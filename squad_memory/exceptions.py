"""Exceptions raised by squad_memory. Each message says what to do."""

from __future__ import annotations


class SquadMemoryError(Exception):
    """Base class of every squad_memory error."""


class InvalidMessage(SquadMemoryError, ValueError):
    """A message given to a save is not a valid conversation message."""


class InvalidSlotKey(SquadMemoryError, ValueError):
    """A user, session or agent id is empty, too long or not a string."""


class LookalikeSlotKey(InvalidSlotKey):
    """An id would display as another id (invisible characters, a space at either end, text
    not in NFC, compatibility characters, letters of mixed scripts); refused unless
    ``ALLOW_INVISIBLE_IDS``."""


class InvalidSummarizerOutput(SquadMemoryError, ValueError):
    """The summarizer returned something other than a list of messages."""


class SummarizerError(SquadMemoryError):
    """The summarizer raised; raised from a save only when ``on_error="raise"``."""


class SummarizerNotImportable(SquadMemoryError, ValueError):
    """Celery mode needs a summarizer a worker can import by dotted path."""


class ConfigurationError(SquadMemoryError, ValueError):
    """A storage was built with arguments that cannot work."""


class SummarizerTimeout(SummarizerError):
    """The summarizer's backend did not answer in time; the compression is retried later."""


class SummarizerBackendError(SummarizerError):
    """The summarizer's backend failed (unreachable, 5xx, refused the request)."""


class SummarizerRateLimited(SummarizerBackendError):
    """The summarizer's backend answered 429 (rate limit or quota); retry later."""


class SummarizerBadReply(SummarizerError):
    """The summarizer's backend answered, but not with a usable summary text."""


class SearchTimeout(SquadMemoryError):
    """A search of message text ran past ``SEARCH_TIMEOUT`` seconds and was stopped."""


class IdempotencyKeyReused(SquadMemoryError, ValueError):
    """The key was already used for a different request; send a new key for a new request."""


class InvalidIdempotencyKey(SquadMemoryError, ValueError):
    """An idempotency key is not 1 to 255 printable ASCII characters (a UUID is a good key)."""


class ImportFileError(SquadMemoryError, ValueError):
    """A conversation file to import has invalid lines; nothing was stored."""


class SlotLocked(SquadMemoryError):
    """Another session held a slot's row past ``LOCK_TIMEOUT`` seconds; retry the call later."""


class DatabaseCallTimeout(SquadMemoryError):
    """A database call of an async caller ran past ``CALL_TIMEOUT`` seconds; its thread was
    replaced."""

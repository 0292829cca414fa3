"""Errors of the native path: :class:`Unavailable` ("take the thread path"), and a
driver's errors raised as the ORM would raise them."""

from __future__ import annotations

from typing import NoReturn

from django.db import DatabaseError, utils


class Unavailable(Exception):
    """The native path cannot run this call; nothing reached the database."""


def reraise(exc: BaseException) -> NoReturn:
    """Raise ``exc`` as :func:`as_django` names it (chained to the driver's error)."""
    converted = as_django(exc)
    if converted is exc:
        raise exc
    raise converted from exc


def as_django(exc: BaseException) -> BaseException:
    """A driver's error as the ORM would raise it (``django.db.utils.OperationalError``
    ...); SQLite's "database is locked" as :class:`Unavailable` (no write happened: the
    statement that met the lock failed, or its transaction was rolled back)."""
    if isinstance(exc, (Unavailable, DatabaseError)) or not isinstance(exc, Exception):
        return exc
    text = str(exc).lower()
    if type(exc).__module__ == "sqlite3" and ("locked" in text or "busy" in text):
        return Unavailable(str(exc))
    for cls in type(exc).__mro__:
        if cls.__name__ in _ERRORS:
            wrapped: BaseException = getattr(utils, cls.__name__)(*exc.args)
            return wrapped
    return exc


_ERRORS = (
    "DataError",
    "OperationalError",
    "IntegrityError",
    "InternalError",
    "ProgrammingError",
    "NotSupportedError",
    "DatabaseError",
    "InterfaceError",
)

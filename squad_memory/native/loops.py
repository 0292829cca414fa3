"""One native driver per (process, event loop, database alias), opened on first use,
closed with its loop; a parent's connections are forgotten (never closed) after fork."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import weakref
from collections.abc import AsyncIterator
from typing import Any

from django.core.signals import setting_changed
from django.db import connections
from django.dispatch import receiver

from squad_memory.native.drivers import Driver, Postgres, SQLite
from squad_memory.native.errors import Unavailable

logger = logging.getLogger("squad_memory")

_drivers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Driver]] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()
#: The loop, alias and driver of the last call, swapped whole (threads may race on it).
_last: tuple[Any, str, Driver | None] = (None, "", None)
_inherited: list[Any] = []  # a parent's connections after fork: never used, never closed
#: (loop, alias) pairs whose connection is being opened: other tasks take the thread path.
_opening: set[tuple[int, str]] = set()


def _forget_after_fork() -> None:
    global _last, _lock
    _lock = threading.Lock()  # another thread may have held it at fork
    _inherited.append(dict(_drivers))
    _drivers.clear()
    _opening.clear()
    _last = (None, "", None)


os.register_at_fork(after_in_child=_forget_after_fork)


async def driver(alias: str) -> Driver:
    """This loop's driver for ``alias``, opened on first use (again if it broke)."""
    loop = asyncio.get_running_loop()
    global _last
    last_loop, last_alias, last = _last
    if last_loop is loop and last_alias == alias and last is not None and not last.broken:
        return last  # the common case: the same loop and alias as the last call
    mine = _drivers.get(loop)
    found = mine.get(alias) if mine is not None else None
    if found is not None and not found.broken:
        _last = (loop, alias, found)
        return found
    opening = (id(loop), alias)
    with _lock:
        if opening in _opening:
            raise Unavailable("this loop's connection is being opened")
        _opening.add(opening)
        mine = _drivers.setdefault(loop, {})
        _close_dead_loops()
    try:
        if found is not None:
            found.discard()
        opened = await _open(alias)
        opened.keeper = _closed_with_loop(opened)
        await opened.keeper.__anext__()
        mine[alias] = opened
        _last = (loop, alias, opened)
        return opened
    finally:
        _opening.discard(opening)


async def _open(alias: str) -> Driver:
    vendor = connections[alias].vendor
    if vendor == "postgresql":
        return await Postgres.open(alias)
    if vendor == "sqlite":
        return await SQLite.open(alias)
    raise Unavailable(f"no native driver for {vendor}")


async def _closed_with_loop(opened: Driver) -> AsyncIterator[None]:
    """Closes ``opened`` when its loop shuts down: ``asyncio.run`` (and asgiref, uvicorn...)
    finalize a loop's live async generators before closing it (PEP 525)."""
    try:
        yield
    finally:
        opened.discard()


def _close_dead_loops() -> None:
    for loop in [loop for loop in _drivers if loop.is_closed()]:
        for found in _drivers.pop(loop).values():
            try:
                found.discard()
            except Exception:  # a connection already gone
                logger.debug("closing a native connection failed", exc_info=True)


def close_all() -> None:
    """Close every native connection of this process (tests, settings changes)."""
    global _last
    with _lock:
        for mine in list(_drivers.values()):
            for found in mine.values():
                try:
                    found.discard()
                except Exception:
                    logger.debug("closing a native connection failed", exc_info=True)
        _drivers.clear()
        _last = (None, "", None)


@receiver(setting_changed, dispatch_uid="squad_memory.native.loops")
def _setting_changed(*, setting: str, **kwargs: Any) -> None:
    """Connections opened from the old ``DATABASES`` (or time zone) are closed."""
    if setting in ("DATABASES", "TIME_ZONE", "USE_TZ"):
        close_all()

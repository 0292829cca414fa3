"""Django settings of the benchmark processes: the demo project's, without DEBUG (with it
on, Django keeps every query in memory)."""

from __future__ import annotations

from project.settings import *  # noqa: F403

DEBUG = False
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"squad_memory": {"handlers": ["console"], "level": "WARNING"}},
}

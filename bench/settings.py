"""Django settings of the benchmark processes: the demo project's, quieter and without DEBUG.

``DEBUG = False`` matters: with it on, Django keeps every query in memory.
"""

from __future__ import annotations

import os

from project.settings import *  # noqa: F403

DEBUG = False
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"squad_memory": {"handlers": ["console"], "level": "WARNING"}},
}

_DEFAULT = DATABASES["default"]  # noqa: F405
if os.environ.get("BENCH_PGBOUNCER") == "1":  # through PgBouncer in transaction pooling mode
    _DEFAULT["DISABLE_SERVER_SIDE_CURSORS"] = True
elif os.environ.get("BENCH_PREPARED", "1") == "1" and "postgresql" in _DEFAULT["ENGINE"]:
    # Server-side binding and psycopg's prepared statements (its default threshold), as the
    # floor's plain psycopg connection has them; Django leaves both off by default for
    # the sake of transaction-mode poolers (the PgBouncer rounds run without them).
    _DEFAULT.setdefault("OPTIONS", {}).update(server_side_binding=True, prepare_threshold=5)

"""Django settings of the benchmark processes: the demo project's, without DEBUG (with it
on, Django keeps every query in memory), squad_memory logging its warnings only."""

from __future__ import annotations

import os

from project.settings import *  # noqa: F403

DEBUG = False
LOGGING["loggers"]["squad_memory"]["level"] = "WARNING"  # noqa: F405
# Connections outlive a call, as a deployment serving async callers sets CONN_MAX_AGE (the
# async API's database threads honour it); Django's pool lends one per call instead.
DATABASES["default"]["CONN_MAX_AGE"] = 0 if os.environ.get("BENCH_POOL") == "1" else None  # noqa: F405
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":  # noqa: F405
    OPTIONS = DATABASES["default"].setdefault("OPTIONS", {})  # noqa: F405
    # The name the concurrency workload counts this process's server connections by.
    OPTIONS["application_name"] = os.environ.get("BENCH_APPLICATION_NAME", "squad-memory-bench")
    if os.environ.get("BENCH_POOL") == "1":  # Django's connection pool (psycopg_pool)
        OPTIONS["pool"] = True
    if os.environ.get("BENCH_PREPARED") == "1":  # as the PostgreSQL how-to shows
        OPTIONS |= {"server_side_binding": True, "prepare_threshold": 5}

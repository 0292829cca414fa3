"""A description of the machine and the software versions of the run."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from typing import Any


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gb() -> float:
    try:
        with open("/proc/meminfo") as info:
            return int(info.readline().split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _postgres(url: str | None) -> str:
    if not url:
        return "not available"
    import psycopg

    try:
        with psycopg.connect(
            url.replace("postgres://", "postgresql://", 1), connect_timeout=3
        ) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            return str(row[0]) if row else "unknown"
    except psycopg.Error:
        return "not available"


def describe(postgres_url: str | None) -> dict[str, Any]:
    import sqlite3

    return {
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory_gb": round(_memory_gb(), 1),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "django": _version("django"),
        "postgresql": _postgres(postgres_url),
        "sqlite": sqlite3.sqlite_version,
        "agent-squad": _version("agent-squad"),
        "langchain-classic": _version("langchain-classic"),
        "langchain-community": _version("langchain-community"),
        "celery": _version("celery"),
        "redis-server": _redis_version(),
        "load_average": os.getloadavg(),
    }


def _redis_version() -> str:
    import redis

    from bench.services import REDIS_URL

    try:
        return str(
            redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).info()["redis_version"]
        )
    except redis.RedisError:
        return "not available"

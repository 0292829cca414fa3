"""Celery fixtures shared by the task and admin tests: settings, an eager app, a broker
that refuses, and a real Redis broker with a queue of the tests' own."""

from __future__ import annotations

import base64
import json
import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import extra, require

FOLD = "tests.celery_summarizers.fold"
#: The Redis database the tests' queues live in (TEST_REDIS_URL picks another): a number no
#: project uses by accident. The tests never flush it; each process has queues of its own.
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/13")
#: The Redis database a test may flush whole (Celery's ``unacked`` hash is per database).
FLUSHED_REDIS_URL = os.environ.get("TEST_FLUSHED_REDIS_URL", "redis://127.0.0.1:6379/14")


@pytest.fixture
def celery_settings(settings: Any) -> Any:
    extra("celery", "celery")
    settings.SQUAD_MEMORY = {
        "SUMMARIZER": FOLD,
        "TRIGGER_AT": 2,
        "KEEP_LAST": 1,
        "MODE": "celery",
        "RETRIES": 2,
        "RETRY_BACKOFF": 0,
    }
    return settings


@pytest.fixture
def eager(celery_settings: Any) -> Iterator[Any]:
    """The project's Celery app running tasks in-process (``task_always_eager``)."""
    from celery import current_app

    app = current_app._get_current_object()
    saved = {k: app.conf[k] for k in ("task_always_eager", "task_eager_propagates")}
    app.conf.update(task_always_eager=True, task_eager_propagates=False)
    yield app
    app.conf.update(saved)


def _use_broker(url: str) -> Iterator[Any]:
    from celery import Celery, current_app

    previous = current_app._get_current_object()
    app = Celery("squad-memory-tests", broker=url, set_as_current=False)
    app.conf.update(broker_connection_timeout=2, task_ignore_result=True)
    app.set_current()
    try:
        yield app
    finally:
        previous.set_current()
        app.close()


@pytest.fixture
def broker_down(celery_settings: Any) -> Iterator[Any]:
    """A Celery app whose broker is a local port where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    yield from _use_broker(f"redis://127.0.0.1:{port}/0")


@pytest.fixture
def redis_queue(celery_settings: Any) -> Iterator[Any]:
    """A real Redis broker (``TEST_REDIS_URL``) and a queue of this process's own; yields
    the Redis client."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.RedisError as exc:
        require(False, f"needs Redis at {REDIS_URL} as the Celery broker ({exc})")
    queue = f"squad-memory-unit-tests-{os.getpid()}"
    celery_settings.SQUAD_MEMORY = {**celery_settings.SQUAD_MEMORY, "CELERY_QUEUE": queue}
    client.delete(queue)
    client.queue_name = queue
    for _ in _use_broker(REDIS_URL):
        yield client
    client.delete(queue)


def queued_args(client: Any) -> list[list[Any]]:
    """Arguments of the summarize_slot tasks waiting in the test queue, oldest first."""
    found = []
    for raw in reversed(client.lrange(client.queue_name, 0, -1)):
        message = json.loads(raw)
        assert message["headers"]["task"] == "squad_memory.tasks.summarize_slot"
        found.append(json.loads(base64.b64decode(message["body"]))[0])
    return found

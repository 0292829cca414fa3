"""What the tests of tasks mode share: the Tasks framework of this Django (``django.tasks``
on 6, the backport on 5.2), and backends that fail or hang as a task queue can."""

from __future__ import annotations

import importlib.util
import threading
from typing import Any

from tests.conftest import extra

#: ``django.tasks`` (Django 6) or ``django_tasks`` (the backport, on Django 5.2).
FRAMEWORK = "django.tasks" if importlib.util.find_spec("django.tasks") else "django_tasks"
extra(FRAMEWORK, "tasks")
base = extra(f"{FRAMEWORK}.backends.base", "tasks")

IMMEDIATE = {"default": {"BACKEND": f"{FRAMEWORK}.backends.immediate.ImmediateBackend"}}
DATABASE = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": []}}
#: Released at the end of each test that uses :class:`HangingBackend`.
RELEASE = threading.Event()


class HangingBackend(base.BaseTaskBackend):  # type: ignore[misc,name-defined]
    """Accepts the task and never answers (until :data:`RELEASE` is set)."""

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        RELEASE.wait(60)
        raise ConnectionError("the queue stopped answering")


class FailingBackend(base.BaseTaskBackend):  # type: ignore[misc,name-defined]
    """Refuses every task at once, as a queue that is down does."""

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        raise ConnectionRefusedError("the queue refused the connection")

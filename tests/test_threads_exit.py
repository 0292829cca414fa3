"""A process exits whatever its summarizer does: the threads of ``squad_memory.threads``
never keep it alive (a process of its own, on an in-memory SQLite database)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.own_database

SCRIPT = """
import asyncio, threading
import django
from django.conf import settings
settings.configure(
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "squad_memory"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
    SQUAD_MEMORY={"SUMMARIZER_TIMEOUT": 0.5},
)
django.setup()
from django.test import override_settings
from squad_memory.exceptions import SummarizerTimeout
from squad_memory.summarizers import acall_summarizer

def hangs(history, keep_last):
    threading.Event().wait()

try:
    asyncio.run(acall_summarizer(hangs, [], 1))
except SummarizerTimeout:
    print("abandoned")
with override_settings(SQUAD_MEMORY={"SUMMARIZER_TIMEOUT": None}):
    try:  # no bound of squad_memory's: the caller gives up, the summary hangs on
        asyncio.run(asyncio.wait_for(acall_summarizer(hangs, [], 1), 0.5))
    except TimeoutError:
        print("gave up")
"""


def test_a_process_whose_summary_hangs_exits() -> None:
    root = Path(__file__).resolve().parent.parent
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["abandoned", "gave", "up"]

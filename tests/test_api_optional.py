"""Django REST Framework is an optional extra: squad_memory works without it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys
for name in ("rest_framework", "drf_spectacular"):
    sys.modules[name] = None  # any import of them now raises ImportError
import django
from django.conf import settings
settings.configure(
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "squad_memory"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
)
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
call_command("check")
import squad_memory
from squad_memory.api.access import default_user_id, user_id_for
from agent_squad.types import ConversationMessage
storage = squad_memory.get_storage()
hello = ConversationMessage(role="user", content=[{"text": "hi"}])
storage.save_chat_message_sync("u", "s", "a", hello)
assert [m.content for m in storage.fetch_chat_sync("u", "s", "a")] == [[{"text": "hi"}]]
class U: pk = 7
assert user_id_for(U()) == "7" == default_user_id(U())
try:
    import squad_memory.api.views
except ImportError:
    print("OK")
"""


def test_squad_memory_works_without_rest_framework() -> None:
    root = Path(__file__).resolve().parent.parent
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("OK")

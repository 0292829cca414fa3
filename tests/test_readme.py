"""Every Python snippet of the README runs as written, in a configured Django project.

- A snippet whose first line names a file in a package (``# myapp/summaries.py``) is
  written to that path in a temporary directory on ``sys.path`` and imported, so the
  README's other snippets use it (``"SUMMARIZER": "myapp.summaries.summarize"``).
- Any other snippet runs in its own namespace. A settings fragment (``SQUAD_MEMORY =
  ...``, ``INSTALLED_APPS += ...``) runs there too, seeded with the demo project's
  ``INSTALLED_APPS`` and an empty ``urlpatterns``; what it defines is then tried for
  real: the system checks and the storage for ``SQUAD_MEMORY``, requests for
  ``urlpatterns``, ``REST_FRAMEWORK`` and ``SPECTACULAR_SETTINGS``.
- Names the README calls yours (``my_classifier``, ``support_agent``,
  ``my_bedrock_agent``) are offline agent-squad objects: the demo's keyword classifier
  and scripted agents.
"""

from __future__ import annotations

import asyncio
import importlib
import re
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import extra

extra("rest_framework", "api")  # the README's snippets mount the API and configure Celery
extra("celery", "celery")

from agent_squad.orchestrator import AgentSquad
from asgiref.sync import sync_to_async
from celery.app import defaults as celery_defaults
from django.conf import settings
from django.contrib.auth.models import User
from django.core import checks
from django.db import connections
from django.test import Client, override_settings
from django.utils.module_loading import import_string
from drf_spectacular.settings import patched_settings

import squad_memory
from project.demo.agents import KeywordClassifier, ScriptedAgent
from squad_memory.models import Compression, Message, Slot
from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage
from squad_memory.summarizers import is_summary
from tests.browser_support import COSMETIC_HOSTS
from tests.conftest import msg

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
FILE_LINE = re.compile(r"^# ((?:\w+/)+\w+\.py)\n")

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass(frozen=True)
class Snippet:
    line: int
    code: str

    @property
    def path(self) -> str | None:
        """``myapp/summaries.py`` for a whole-file snippet, None for a fragment."""
        match = FILE_LINE.match(self.code)
        return match.group(1) if match else None

    @property
    def module(self) -> str:
        assert self.path
        return self.path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def readme_snippets() -> list[Snippet]:
    text = (ROOT / "README.md").read_text()
    return [Snippet(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in FENCE.finditer(text)]


SNIPPETS = readme_snippets()
FILES = [s for s in SNIPPETS if s.path]
FRAGMENTS = [s for s in SNIPPETS if not s.path]


def test_the_readme_has_the_snippets_this_test_expects() -> None:
    paths = {s.path for s in FILES}
    assert {"myapp/summaries.py", "yourproject/urls.py", "yourproject/celery.py"} <= paths
    assert "yourproject/__init__.py" in paths
    assert len(FRAGMENTS) >= 8


@pytest.fixture(scope="module")
def readme_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The README's whole-file snippets, importable."""
    root = tmp_path_factory.mktemp("readme")
    for snippet in FILES:
        assert snippet.path
        target = root / snippet.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(snippet.code)
    for folder in {(root / s.path).parent for s in FILES if s.path}:
        (folder / "__init__.py").touch(exist_ok=True)
    sys.path.insert(0, str(root))
    try:
        yield root
    finally:
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n.split(".")[0] in {"myapp", "yourproject"}]:
            del sys.modules[name]
        from project.celery import app

        app.set_current()


@pytest.fixture(autouse=True)
def close_worker_connections() -> Iterator[None]:
    """Close the connection the async storage methods opened in their worker thread."""
    yield
    asyncio.run(sync_to_async(connections.close_all)())


def offline_names() -> dict[str, Any]:
    support = ScriptedAgent("Support agent", "Routers and networks.", {})
    return {
        "my_classifier": KeywordClassifier({support.id: ["router"]}),
        "support_agent": support,
        "my_bedrock_agent": ScriptedAgent("Summary agent", "Summarizes.", {}),
    }


@pytest.mark.parametrize("snippet", FILES, ids=lambda s: f"line{s.line}-{s.path}")
def test_file_snippet_works(snippet: Snippet, readme_files: Path) -> None:
    module = importlib.import_module(snippet.module)
    if hasattr(module, "summarize"):
        check_summarizer(f"{snippet.module}.summarize")
    if hasattr(module, "urlpatterns"):
        check_urls(snippet.module, admin=True)
    if snippet.module.endswith(".celery"):
        app = module.app
        assert app.main == "yourproject"
        assert app.conf.broker_url == settings.CELERY_BROKER_URL  # the CELERY_* settings
        app.loader.import_default_modules()
        assert "squad_memory.tasks.summarize_slot" in app.tasks


@pytest.mark.parametrize("snippet", FRAGMENTS, ids=lambda s: f"line{s.line}")
def test_fragment_runs_as_written(
    snippet: Snippet, readme_files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-readme-test")  # read by a settings fragment
    seeded = {
        "INSTALLED_APPS": list(settings.INSTALLED_APPS),
        "MIDDLEWARE": [m for m in settings.MIDDLEWARE if "JSONErrors" not in m],
        "urlpatterns": [],
    }
    namespace: dict[str, Any] = {"__name__": "readme_snippet", **seeded, **offline_names()}
    exec(compile(snippet.code, f"README.md:{snippet.line}", "exec"), namespace)
    if "SQUAD_MEMORY" in namespace:
        check_squad_memory_settings(namespace["SQUAD_MEMORY"])
    if namespace["INSTALLED_APPS"] != seeded["INSTALLED_APPS"]:
        check_installed_apps(namespace["INSTALLED_APPS"])
    for path in namespace["MIDDLEWARE"]:
        import_string(path)  # every middleware a fragment names exists
    if namespace["urlpatterns"]:
        sys.modules["readme_urls"] = types.ModuleType("readme_urls")
        sys.modules["readme_urls"].urlpatterns = namespace["urlpatterns"]  # type: ignore[attr-defined]
        try:
            check_urls("readme_urls", admin=False)
        finally:
            del sys.modules["readme_urls"]
    if "REST_FRAMEWORK" in namespace:
        check_rest_framework(namespace["REST_FRAMEWORK"])
    if "SPECTACULAR_SETTINGS" in namespace:
        check_docs_offline(namespace["SPECTACULAR_SETTINGS"])
    check_celery_settings({k: v for k, v in namespace.items() if k.startswith("CELERY_")})
    for name in ("storage", "orchestrator"):
        if name in namespace:
            wanted = SummarizingChatStorage if name == "storage" else AgentSquad
            assert isinstance(namespace[name], wanted)
    if "response" in namespace:
        slot = Slot.objects.get(user_id="user-1", session_id="session-1")
        assert Message.objects.filter(slot=slot).count() == 2
        assert namespace["response"].output.role == "assistant"


def check_squad_memory_settings(value: dict[str, Any]) -> None:
    with override_settings(SQUAD_MEMORY=value):
        problems = [m for m in checks.run_checks() if m.id and m.id.startswith("squad_memory")]
        assert not [p for p in problems if p.level >= checks.ERROR], problems
        storage = squad_memory.get_storage()
        assert storage.mode == value.get("MODE", "inline")


def check_celery_settings(values: dict[str, Any]) -> None:
    """Each CELERY_* name is a Celery setting (config_from_object's CELERY namespace)."""
    for name, value in values.items():
        option = celery_defaults.find(name.removeprefix("CELERY_").lower())
        assert option.key, name
        if name == "CELERY_BEAT_SCHEDULE":
            tasks = {entry["task"] for entry in value.values()}
            assert tasks <= {"squad_memory.tasks.sweep", "squad_memory.tasks.summarize_slot"}


def check_installed_apps(apps: list[str]) -> None:
    assert set(apps) <= set(settings.INSTALLED_APPS), set(apps) - set(settings.INSTALLED_APPS)
    if "django.contrib.admin" in apps:
        assert apps.index("django.contrib.admin") < apps.index("squad_memory")


def check_urls(urlconf: str, *, admin: bool) -> None:
    with override_settings(ROOT_URLCONF=urlconf):
        client = Client()
        assert client.get("/api/schema/").status_code == 200
        for docs in ("/api/docs/", "/api/redoc/"):
            reply = client.get(docs)
            if reply.status_code == 404 and docs == "/api/redoc/" and not admin:
                continue  # the API section's short snippet mounts Swagger UI only
            assert reply.status_code == 200, docs
        assert client.get("/api/slots/", HTTP_ACCEPT="application/json").status_code == 401
        if admin:
            assert client.get("/admin/").status_code == 302  # to the login page


def check_rest_framework(value: dict[str, Any]) -> None:
    user = User.objects.create_user("reader")
    with override_settings(REST_FRAMEWORK=value):
        assert Client().get("/api/slots/").status_code == 401  # token first: 401, not 403
        client = Client()
        client.force_login(user)
        assert client.get("/api/slots/").json()["results"] == []


def check_docs_offline(value: dict[str, Any]) -> None:
    # The schema view's SERVE_INCLUDE_SCHEMA is read once, at import; the rest is patchable.
    with patched_settings({k: v for k, v in value.items() if k != "SERVE_INCLUDE_SCHEMA"}):
        for page in ("/api/docs/", "/api/redoc/"):
            html = Client().get(page).content.decode()
            assert "/static/drf_spectacular_sidecar/" in html, page
            assert not re.search(r"""src=["']?(https?:)?//""", html), page  # no script from afar
            links = re.findall(r"""href=["']?(?:https?:)?//([^/"']+)""", html)
            assert set(links) <= COSMETIC_HOSTS, (page, links)  # ReDoc's web fonts


def check_summarizer(path: str) -> None:
    """The README's summarizer, through the storage: it compresses, twice, and alternates."""
    storage = SummarizingChatStorage(DjangoChatStorage(), path, trigger_at=3, keep_last=1)
    for i in range(20):
        role = "user" if i % 2 == 0 else "assistant"
        storage.save_chat_message_sync("u", "s", "a", msg(role, f"m{i}"))
        if i == 9:  # the first fetch over the threshold activates the buffer
            assert is_summary(storage.fetch_chat_sync("u", "s", "a")[0])
    buffer = asyncio.run(storage.fetch_chat("u", "s", "a"))
    assert is_summary(buffer[0]), buffer[0]
    roles = [m.role for m in buffer]
    assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"] * (len(roles) % 2), roles
    assert buffer[-1].content == [{"text": "m19"}]
    outcomes = list(Compression.objects.values_list("outcome", flat=True))
    assert len(outcomes) >= 2 and set(outcomes) == {"applied"}, outcomes

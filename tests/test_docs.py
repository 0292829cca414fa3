"""Every code sample of the README and of docs/ runs as written, in a configured Django project.

- A Python snippet whose first line names a file in a package (``# myapp/summaries.py``)
  is written to that path in a temporary directory on ``sys.path``, with the other
  whole-file snippets of the same document, and imported, so the document's other
  snippets use it (``"SUMMARIZER": "myapp.summaries.summarize"``). What it defines is
  tried: a summarizer through ten compressions, ``urlpatterns`` by requests, a Celery
  app, a dispatcher, a router, a conversation.
- Any other Python snippet runs in its own namespace, in a working directory holding the
  document's JSON Lines examples as ``conversations.jsonl``. A settings fragment
  (``SQUAD_MEMORY = ...``, ``INSTALLED_APPS += ...``) runs there too, seeded with the demo
  project's ``INSTALLED_APPS`` and an empty ``urlpatterns``; what it defines is then tried
  for real: the system checks and the storage for ``SQUAD_MEMORY``, requests for
  ``urlpatterns`` and ``REST_FRAMEWORK``, a fresh process for ``LOGGING``.
- Names the docs call yours (``my_classifier``, ``support_agent``, ``my_bedrock_agent``)
  are offline agent-squad objects: the demo's keyword classifier and scripted agents.
- Shell snippets: every ``make`` target exists, every ``manage.py`` command exists with
  the options shown, every ``pip install`` extra exists, every ``python -m`` module
  imports, and every API path a ``curl`` line names is a route of the API.
- The tutorial's settings block, ``urls.py`` and conversation run in a fresh
  ``startproject`` in a process of their own, as a new user would paste them.
"""

from __future__ import annotations

import asyncio
import configparser
import importlib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import tomllib
import types
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import extra

extra("rest_framework", "api")  # the snippets mount the API and configure Celery
extra("celery", "celery")

from agent_squad.orchestrator import AgentSquad
from asgiref.sync import sync_to_async
from celery.app import defaults as celery_defaults
from django.conf import settings
from django.contrib.auth.models import User
from django.core import checks
from django.core.cache import cache
from django.core.management import get_commands, load_command_class
from django.db import connections
from django.test import Client, override_settings
from django.urls import Resolver404, resolve
from django.utils.module_loading import import_string

import squad_memory
from project.demo.agents import KeywordClassifier, ScriptedAgent
from squad_memory.compression import Dispatcher, dispatcher_class
from squad_memory.models import Compression, Message, Slot
from squad_memory.storage import SummarizingChatStorage
from tests import summarizers

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\S*)\n(?P<code>.*?)^(?P=indent)```", re.M | re.S)
#: MyST directives (``{toctree}``, ``{eval-rst}``, ``{include}``) are the site's, not samples.
DIRECTIVE = "{"
FILE_LINE = re.compile(r"^# ((?:\w+/)+\w+\.py)\n")
SHELL = {"bash", "sh", "shell", "console"}

# Transactional: the samples save as a project does, in autocommit, and their inline
# compressions run on commit (transaction.on_commit).
pytestmark = pytest.mark.django_db(transaction=True)


@dataclass(frozen=True)
class Snippet:
    doc: str
    line: int
    lang: str
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

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}"


def snippets(path: Path) -> list[Snippet]:
    text = path.read_text()
    doc = str(path.relative_to(ROOT))
    return [
        Snippet(
            doc,
            text.count("\n", 0, m.start()) + 1,
            m.group("lang"),
            textwrap.dedent(m.group("code")),
        )
        for m in FENCE.finditer(text)
        if not m.group("lang").startswith(DIRECTIVE)
    ]


ALL = [s for path in DOCUMENTS for s in snippets(path)]
PYTHON = [s for s in ALL if s.lang == "python"]
FILES = [s for s in PYTHON if s.path]
FRAGMENTS = [s for s in PYTHON if not s.path]
SHELL_SNIPPETS = [s for s in ALL if s.lang in SHELL]


def test_how_tos_add_to_the_tutorials_settings_instead_of_replacing_them() -> None:
    for path in sorted((ROOT / "docs/howto").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        assert "\nSQUAD_MEMORY = " not in text, path.name


def test_the_docs_have_the_snippets_this_test_expects() -> None:
    paths = {(s.doc, s.path) for s in FILES}
    assert ("docs/howto/summarizer.md", "myapp/summaries.py") in paths
    assert ("docs/tutorial.md", "mysite/urls.py") in paths
    assert ("docs/howto/celery.md", "mysite/celery.py") in paths
    assert ("docs/howto/choosing-a-mode.md", "myapp/dispatchers.py") in paths
    assert len(FRAGMENTS) >= 20 and len(SHELL_SNIPPETS) >= 20
    assert {s.lang for s in ALL} <= {"python", "bash", "text", "json", "ini"}, {s.lang for s in ALL}
    assert ("docs/howto/tasks.md", "ini") in {(s.doc, s.lang) for s in ALL}


# -- Python ----------------------------------------------------------------------------
@pytest.fixture
def doc_files(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """The whole-file snippets of the snippet's document, importable, and the document's
    JSON Lines examples as ``conversations.jsonl`` in the working directory."""
    snippet: Snippet = request.node.callspec.params["snippet"]
    files = [s for s in FILES if s.doc == snippet.doc]
    for each in files:
        assert each.path
        target = tmp_path / each.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(each.code)
    for folder in {(tmp_path / s.path).parent for s in files if s.path}:
        (folder / "__init__.py").touch(exist_ok=True)
    jsonl = [s.code for s in ALL if s.doc == snippet.doc and s.lang == "json"]
    (tmp_path / "conversations.jsonl").write_text("".join(jsonl))
    packages = {s.path.split("/")[0] for s in files if s.path}
    sys.path.insert(0, str(tmp_path))
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(cwd)
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n.split(".")[0] in packages]:
            del sys.modules[name]
        from project.celery import app

        app.set_current()


@pytest.fixture(autouse=True)
def close_worker_connections() -> Iterator[None]:
    """Close the connection the async storage methods opened in their worker thread; start
    with no throttle counts (they live in the cache, and the snippets make requests)."""
    cache.clear()
    yield
    asyncio.run(sync_to_async(connections.close_all)())


def offline_names() -> dict[str, Any]:
    support = ScriptedAgent("Support agent", "Routers and networks.", {})
    return {
        "my_classifier": KeywordClassifier({support.id: ["router"]}),
        "support_agent": support,
        "my_bedrock_agent": ScriptedAgent("Summary agent", "Summarizes.", {}),
    }


@pytest.mark.parametrize("snippet", FILES, ids=str)
def test_file_snippet_works(
    snippet: Snippet, doc_files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = importlib.import_module(snippet.module)
    if hasattr(module, "summarize"):
        check_summarizer(f"{snippet.module}.summarize")
    if hasattr(module, "urlpatterns"):
        check_urls(snippet.module)
    if snippet.module.endswith(".celery"):
        app = module.app
        assert app.main == snippet.module.split(".")[0]
        assert app.conf.broker_url == settings.CELERY_BROKER_URL  # the CELERY_* settings
        # Celery's Django fixup runs the project's checks first, which on Django 6 ask every
        # database (the test's "memory" one too) about JSON support: not this snippet's part.
        monkeypatch.setenv("CELERY_SKIP_CHECKS", "1")
        app.loader.import_default_modules()
        assert "squad_memory.tasks.summarize_slot" in app.tasks
    for name, value in vars(module).items():
        if isinstance(value, type) and value.__module__ == module.__name__:
            check_class(f"{snippet.module}.{name}", value)
    if hasattr(module, "orchestrator"):  # the tutorial's conversation ran at import
        check_conversation()
    if hasattr(module, "user_id_for"):
        assert module.user_id_for(User(username="alice")) == "alice"


def check_class(path: str, cls: type) -> None:
    if issubclass(cls, Dispatcher):
        assert dispatcher_class(path) is cls
    if hasattr(cls, "db_for_write"):  # a database router
        router = cls()
        for method in ("db_for_read", "db_for_write"):
            alias = getattr(router, method)(Slot)
            assert alias is None or alias in {"default", "replica", "memory"}, (method, alias)


def check_conversation() -> None:
    """The tutorial's 25 turns: stored whole, and the buffer compressed once past 20 pairs."""
    slot = Slot.objects.get(user_id="alice", session_id="first", agent_id="support")
    assert Message.objects.filter(slot=slot).count() == 50
    assert slot.active and Compression.objects.filter(slot=slot, outcome="applied").exists()


@pytest.mark.parametrize("snippet", FRAGMENTS, ids=str)
def test_fragment_runs_as_written(
    snippet: Snippet, doc_files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-docs-test")  # read by a settings fragment
    seeded = {
        "BASE_DIR": doc_files,  # startproject's, which the SQLite snippets build on
        "INSTALLED_APPS": list(settings.INSTALLED_APPS),
        "MIDDLEWARE": list(settings.MIDDLEWARE),  # startproject's, which a how-to adds to
        "urlpatterns": [],
        "SQUAD_MEMORY": {},  # the tutorial's block, which a how-to's adds keys to
    }
    namespace: dict[str, Any] = {"__name__": "docs_snippet", **seeded, **offline_names()}
    exec(compile(snippet.code, str(snippet), "exec"), namespace)
    if namespace["SQUAD_MEMORY"]:
        check_squad_memory_settings(namespace["SQUAD_MEMORY"])
    if namespace["INSTALLED_APPS"] != seeded["INSTALLED_APPS"]:
        check_installed_apps(namespace["INSTALLED_APPS"])
    if namespace["urlpatterns"]:
        sys.modules["docs_urls"] = types.ModuleType("docs_urls")
        sys.modules["docs_urls"].urlpatterns = namespace["urlpatterns"]  # type: ignore[attr-defined]
        try:
            check_urls("docs_urls")
        finally:
            del sys.modules["docs_urls"]
    if "LOGGING" in namespace:
        check_logging(namespace["LOGGING"])
    if "DATABASES" in namespace:
        check_databases(namespace["DATABASES"], doc_files)
    for path in namespace.get("DATABASE_ROUTERS", []):
        check_class(path, import_string(path))
    if "REST_FRAMEWORK" in namespace:
        check_rest_framework(namespace["REST_FRAMEWORK"])
    if "TASKS" in namespace:
        for backend in namespace["TASKS"].values():
            import_string(backend["BACKEND"])
    for check_id in namespace.get("SILENCED_SYSTEM_CHECKS", []):
        assert check_id in CHECK_IDS, check_id
    check_celery_settings({k: v for k, v in namespace.items() if k.startswith("CELERY_")})
    for name, wanted in (("storage", SummarizingChatStorage), ("orchestrator", AgentSquad)):
        if name in namespace:
            assert isinstance(namespace[name], wanted)
    if "response" in namespace:  # a turn through the orchestrator: both messages stored
        slot = Slot.objects.get(user_id="user-1", session_id="session-1")
        assert Message.objects.filter(slot=slot).count() == 2
        assert namespace["response"].output.role == "assistant"


CHECK_IDS = set(
    re.findall(r"squad_memory\.[EW]\d{3}", (ROOT / "docs/reference/checks.md").read_text())
)


def check_squad_memory_settings(value: dict[str, Any]) -> None:
    with override_settings(SQUAD_MEMORY=value):
        problems = [
            m for m in checks.run_checks(databases=[]) if (m.id or "").startswith("squad_memory")
        ]
        assert not [p for p in problems if p.level >= checks.ERROR], problems
        assert not [p for p in problems if p.id == "squad_memory.W001"], problems  # no typo
        storage = squad_memory.get_storage()
        assert storage.mode == value.get("MODE", "inline")


LOGGING_PROBE = """
import json, logging, sys
import django
from django.conf import settings
config = json.loads(sys.argv[1])
settings.configure(DEBUG=True, **({"LOGGING": config} if config else {}))
django.setup()
import agent_squad.orchestrator  # calls logging.basicConfig(level=INFO)
logging.getLogger("django.request").warning("Not Found: /x/")
logging.getLogger("agent_squad.orchestrator").info("agent-squad chatter")
logging.getLogger("squad_memory").warning("compression failed")
"""


def check_logging(value: dict[str, Any]) -> None:
    """In a fresh process that imports agent-squad: each line once, agent-squad's INFO quiet."""

    def stderr(config: dict[str, Any] | None) -> str:
        args = [sys.executable, "-c", LOGGING_PROBE, json.dumps(config)]
        return subprocess.run(args, capture_output=True, text=True, check=True).stderr

    assert stderr(None).count("Not Found: /x/") == 2  # what the docs warn of
    assert stderr(value).splitlines() == ["Not Found: /x/", "compression failed"]


def check_databases(value: dict[str, Any], base_dir: Path) -> None:
    """A SQLite file sits under BASE_DIR whatever the working directory, and W002 is
    satisfied; any other engine is one Django has."""
    from squad_memory.checks import check_sqlite

    default = value["default"]
    if default["ENGINE"] != "django.db.backends.sqlite3":
        importlib.import_module(f"{default['ENGINE']}.base")
        return
    assert Path(default["NAME"]).parent == base_dir
    databases = {**settings.DATABASES, "default": default}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding setting DATABASES": only read here
        with override_settings(DATABASES=databases):
            assert not check_sqlite()


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


def check_urls(urlconf: str) -> None:
    """The API, its schema and docs pages, and its JSON 404; the admin where it is mounted."""
    with override_settings(ROOT_URLCONF=urlconf):
        client = Client()
        for page in ("/api/", "/api/schema/", "/api/docs/", "/api/redoc/"):
            assert client.get(page).status_code == 200, page
        assert client.get("/api/slots/", HTTP_ACCEPT="application/json").status_code == 401
        missing = client.get("/api/no-such-thing/")
        assert missing.status_code == 404 and missing.json() == {"detail": "Not found."}
        if any("admin" in str(p.pattern) for p in import_string(f"{urlconf}.urlpatterns")):
            assert client.get("/admin/").status_code == 302  # to the login page


def check_rest_framework(value: dict[str, Any]) -> None:
    user = User.objects.create_user("reader")
    with override_settings(REST_FRAMEWORK=value):
        assert Client().get("/api/slots/").status_code == 401  # token first: 401, not 403
        client = Client()
        client.force_login(user)
        assert client.get("/api/slots/").json()["results"] == []


def check_summarizer(path: str) -> None:
    """A documented summarizer, through the storage: ten compressions of long messages in
    a row, each applied (none refused as too large), and a buffer that alternates."""
    buffer = summarizers.compress_many_times(path, times=10)
    roles = [m.role for m in buffer]
    assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"] * (len(roles) % 2), roles


# -- shell -----------------------------------------------------------------------------
def commands(code: str) -> Iterator[list[str]]:
    """The commands of a shell snippet as words: continued lines joined, quotes spanning
    lines kept together, comments and ``VAR=value`` prefixes left out."""
    pending = ""
    for line in code.replace("\\\n", " ").splitlines():
        pending = f"{pending}\n{line}" if pending else line
        try:
            words = shlex.split(pending, comments=True)
        except ValueError:  # a quote closes on a later line
            continue
        pending = ""
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
            words.pop(0)
        if words:
            yield words


MAKE_TARGETS = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
EXTRAS = set(
    tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
)


def options_of(command: str) -> set[str]:
    app = get_commands()[command]
    parser = load_command_class(app, command).create_parser("manage.py", command)
    return {option for action in parser._actions for option in action.option_strings}


def check_command(words: list[str]) -> None:
    if words[0] == "make":
        targets = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        assert set(targets) <= MAKE_TARGETS, set(targets) - MAKE_TARGETS
    if "manage.py" in words or words[0] == "django-admin":
        at = words.index("manage.py") if "manage.py" in words else 0
        name = words[at + 1]
        assert name in get_commands(), f"no management command {name!r}"
        known = options_of(name)
        for word in words[at + 2 :]:
            option = word.strip("[]").split("=")[0]
            if option.startswith("--") or re.fullmatch(r"-\w", option):
                assert option in known, f"{name} has no option {option}"
    if words[:2] == ["pip", "install"]:
        for word in words[2:]:
            if match := re.search(r"squad[-_]memory[^\[]*\[([\w,]+)\]", word):
                assert set(match.group(1).split(",")) <= EXTRAS, word
    if "-m" in words and words[0].endswith("python"):
        module = words[words.index("-m") + 1]
        assert importlib.util.find_spec(module) is not None, module
    if words[0] == "curl":
        for word in words:
            if match := re.search(r"(?:\$API|https?://[\w.:]+/api)(/[^?\s]*)", word):
                path = "/api" + re.sub(r"\{\w+\}", "1", match.group(1))
                try:
                    found = resolve(path, "project.urls")
                except Resolver404:
                    pytest.fail(f"no API route for {path}")
                assert found.url_name, f"{path} reaches only the JSON 404"


@pytest.mark.parametrize("snippet", SHELL_SNIPPETS, ids=str)
def test_shell_snippet_names_what_exists(snippet: Snippet) -> None:
    for words in commands(snippet.code):
        check_command(words)


@pytest.mark.parametrize("snippet", [s for s in ALL if s.lang == "ini"], ids=str)
def test_a_unit_file_restarts_a_command_that_exists(snippet: Snippet) -> None:
    """A systemd unit: it restarts its command, and the command exists with its options."""
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string(snippet.code)
    assert unit["Service"]["Restart"] == "always"
    check_command(shlex.split(unit["Service"]["ExecStart"]))


# -- the tutorial in a fresh project ---------------------------------------------------
TUTORIAL = [s for s in PYTHON if s.doc == "docs/tutorial.md"]

API_TRY = """
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.authtoken.models import Token

client = Client(SERVER_NAME="localhost")
auth = {"HTTP_AUTHORIZATION": "Token " + Token.objects.create(user=User.objects.get(username="alice")).key}
body = '{"session_id": "first", "agent_id": "support", "message": {"role": "user", "content": [{"text": "Are you still there?"}]}}'
print("post", client.post("/api/slots/messages/", body, content_type="application/json", **auth).status_code)
print("slots", [s["user_id"] for s in client.get("/api/slots/", **auth).json()["results"]])
login = client.get("/api/").json()["login"]  # the root's link to DRF's login page
browser = Client(SERVER_NAME="localhost")
done = browser.post(login, {"username": "alice", "password": "a long passphrase of alice's"})
print("login", done.status_code, done["Location"])
print("browsable", browser.get("/api/slots/", HTTP_ACCEPT="text/html").status_code)
"""


@pytest.mark.django_db(transaction=False)
def test_the_tutorial_in_a_fresh_startproject(tmp_path: Path) -> None:
    """What a new user pastes: startproject, the settings block at the end of
    settings.py, the URLs, migrate, check, the conversation, the permission, the API."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(ROOT)  # this checkout's squad_memory, wherever the venv's points

    def run(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            args, cwd=tmp_path, env=env, input=stdin, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout + done.stderr

    run(sys.executable, "-m", "django", "startproject", "mysite", ".")
    (block,) = [s.code for s in TUTORIAL if not s.path and "INSTALLED_APPS = [" in s.code]
    with (tmp_path / "mysite" / "settings.py").open("a") as out:
        out.write("\n" + block)
    for snippet in TUTORIAL:
        if snippet.path:
            (tmp_path / snippet.path).write_text(snippet.code)
    manage = (sys.executable, "manage.py")
    assert "no issues" in run(*manage, "check")  # W003 waits for the server
    run(*manage, "migrate", "-v0")
    talk = run(*manage, "shell", stdin=(tmp_path / "mysite" / "talk.py").read_text())
    for line in ("21 I was given 40 messages", "22 I was given 6 messages", "23 I was given 8"):
        assert line in talk, talk
    (grant,) = [s.code for s in TUTORIAL if "add_message" in s.code and not s.path]
    run(*manage, "shell", stdin=grant)
    answers = run(*manage, "shell", stdin=API_TRY)
    assert "post 201" in answers and "slots ['alice']" in answers, answers
    # alice, who is not staff, logs in to the browsable API, as the tutorial says
    assert "login 302 /api/" in answers and "browsable 200" in answers, answers


# -- the API reference ------------------------------------------------------------------
API_REFERENCE = ROOT / "docs/reference/api.md"


def api_section(title: str) -> str:
    text = API_REFERENCE.read_text()
    start = text.index(f"\n### {title}\n")
    return text[start : text.index("\n### ", start + 1)]


def test_the_api_reference_names_every_field_of_the_buffers_answer() -> None:
    """A frontend reads the buffer from the reference: its example has every field of the
    answer and of each message, and the text says what each is."""
    from squad_memory.api.serializers import BufferSerializer, ContentMessageSerializer

    section = api_section("GET /api/slots/{id}/buffer/")
    (example,) = [s.code for s in snippets(API_REFERENCE) if s.lang == "json" and s.code in section]
    answer = json.loads(example)
    fields = set(BufferSerializer().fields)
    assert set(answer) == fields
    message_fields = set(ContentMessageSerializer().fields)
    assert all(set(message) == message_fields for message in answer["messages"])
    for name in fields | message_fields:
        assert f"- `{name}`:" in section or f"`{name}` (" in section, name


#: The comment above a post of the examples, and its body.
POSTS = re.compile(
    r"((?:^# [^\n]*\n)+)curl -s -X POST \"\$API/slots/messages/\"[^']*-d '([^']*)'", re.M
)


def test_the_api_references_posts_answer_as_its_examples_say() -> None:
    """The examples' posts, in order, as a user with the posting permission: a turn is two
    posts (201 each), and the one whose comment says "skipped": true stores nothing."""
    from django.contrib.auth.models import Permission

    user = User.objects.create_user("frontend")
    user.user_permissions.add(Permission.objects.get(codename="add_message"))
    client = Client()
    client.force_login(user)
    (examples,) = [s.code for s in snippets(API_REFERENCE) if s.lang == "bash" and "$API" in s.code]
    posts = POSTS.findall(examples)
    assert len(posts) >= 3
    for comment, body in posts:
        answer = client.post("/api/slots/messages/", body, content_type="application/json")
        if '"skipped": true' in comment:
            assert answer.status_code == 200, answer.content
            assert answer.json()["skipped"] is True and answer.json()["stored"] == []
        else:
            assert answer.status_code == 201, answer.content
            assert answer.json()["skipped"] is False

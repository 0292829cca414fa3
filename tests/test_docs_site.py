"""The documentation says what the code does, all of it, and the site stands alone.

- The reference documents every ``SQUAD_MEMORY`` setting with its default (and nothing
  else), every management command with its options, every URL name and operation of the
  API with its status codes, and every system check id.
- The site builds offline with warnings as errors, holds the Python API from the
  docstrings, and its pages load no script, font, stylesheet or image from another host.
- The README stays short, links into each part of the docs, and quotes the benchmark
  figures of the results page as they stand; every relative link resolves.
- The version is written once.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from django.core.management import get_commands, load_command_class
from django.urls import URLPattern, URLResolver

import squad_memory
from squad_memory.conf import DEFAULTS
from tests.conftest import extra

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference"


def section(text: str, heading: str) -> str:
    """The text under ``heading`` (a Markdown heading line) up to the next heading of its
    level or above."""
    level = len(heading) - len(heading.lstrip("#"))
    start = text.index(heading + "\n")
    stop = re.compile(rf"^#{{1,{level}}} ", re.M).search(text, start + len(heading) + 1)
    return text[start : stop.start() if stop else len(text)]


# -- settings ---------------------------------------------------------------------------
SETTING_ROW = re.compile(r'^\| `([A-Z_]+)(?:\["([A-Z_]+)"\])?` \| (.*?) \| (.*?) \| (.*) \|$', re.M)


def documented_settings() -> dict[tuple[str, str | None], tuple[str, str, str]]:
    text = (REFERENCE / "settings.md").read_text()
    return {(m[1], m[2]): (m[3], m[4], m[5]) for m in SETTING_ROW.finditer(text)}


def test_every_setting_is_documented_with_its_type_default_and_effect() -> None:
    rows = documented_settings()
    top = {name for name, key in rows if key is None}
    assert top == set(DEFAULTS), (set(DEFAULTS) - top, top - set(DEFAULTS))
    llm = {key for name, key in rows if name == "LLM" and key is not None}
    assert llm == set(DEFAULTS["LLM"]), set(DEFAULTS["LLM"]) ^ llm
    for (name, key), (kind, default, effect) in rows.items():
        value = DEFAULTS[name] if key is None else DEFAULTS[name][key]
        assert kind and len(effect) > 10, (name, key)
        if isinstance(value, dict):
            continue
        literal = re.fullmatch(r"`([^`]+)`", default)
        assert literal, (name, key, default)
        assert ast.literal_eval(literal.group(1)) == value, (name, key, default, value)


# -- management commands ---------------------------------------------------------------
OWN_COMMANDS = sorted(c for c, app in get_commands().items() if app == "squad_memory")
COMMON = {
    "-h",
    "--help",
    "--version",
    "-v",
    "--verbosity",
    "--settings",
    "--pythonpath",
    "--traceback",
    "--no-color",
    "--force-color",
    "--skip-checks",
}


def test_the_commands_are_found() -> None:
    assert len(OWN_COMMANDS) >= 5 and "squad_memory_sweep" in OWN_COMMANDS


@pytest.mark.parametrize("command", OWN_COMMANDS)
def test_every_command_is_documented_with_its_options(command: str) -> None:
    text = section((REFERENCE / "commands.md").read_text(), f"## {command}")
    parser = load_command_class("squad_memory", command).create_parser("manage.py", command)
    for action in parser._actions:
        names = set(action.option_strings) - COMMON
        if action.option_strings and not names:
            continue  # Django's common options, listed once at the top
        shown = names or {action.dest}  # a positional argument by its name
        for name in shown:
            assert f"`{name}`" in text, f"{command}: {name} is not in its table"
    assert f"python manage.py {command}" in text  # its synopsis


# -- the API ---------------------------------------------------------------------------
def url_names() -> set[str]:
    extra("rest_framework", "api")
    from squad_memory.api import urls

    def walk(patterns: list[Any]) -> Iterator[str]:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns)
            elif isinstance(pattern, URLPattern) and pattern.name:
                yield pattern.name

    return {f"{urls.app_name}:{name}" for name in walk(urls.urlpatterns)}


def test_every_url_name_of_the_api_is_documented() -> None:
    text = (REFERENCE / "api.md").read_text()
    named = set(re.findall(r"`(squad_memory_api:[\w-]+)`", text))
    assert named == url_names(), (url_names() - named, named - url_names())


def schema_operations() -> dict[tuple[str, str], set[int]]:
    extra("drf_spectacular", "api")
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator(urlconf="project.urls").get_schema(request=None, public=True)
    return {
        (method.upper(), path): {int(code) for code in operation["responses"]}
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
    }


def test_every_api_operation_is_documented_with_its_status_codes() -> None:
    text = (REFERENCE / "api.md").read_text()
    documented = {}
    for heading in re.findall(r"^### ((?:GET|POST|DELETE|PUT|PATCH) /api/\S+)$", text, re.M):
        method, path = heading.split(" ")
        codes = re.findall(r"^\| (\d{3}) \|", section(text, f"### {heading}"), re.M)
        documented[(method, path)] = {int(code) for code in codes}
    operations = schema_operations()
    assert set(documented) == set(operations), set(documented) ^ set(operations)
    for operation, codes in operations.items():
        assert documented[operation] == codes, (operation, codes ^ documented[operation])


# -- system checks ---------------------------------------------------------------------
def check_ids_in_code() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "squad_memory").rglob("*.py"):
        for match in re.findall(r"""["'](?:squad_memory\.)?([EW]\d{3})["']""", path.read_text()):
            found.add(f"squad_memory.{match}")
    return found


def test_every_system_check_id_is_documented() -> None:
    text = (REFERENCE / "checks.md").read_text()
    rows = set(re.findall(r"^\| `(squad_memory\.[EW]\d{3})` \|", text, re.M))
    code = check_ids_in_code()
    assert len(code) >= 15
    assert rows == code, (code - rows, rows - code)


# -- the built site --------------------------------------------------------------------
@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as ``make docs`` builds it: offline, warnings as errors."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            str(DOCS),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return out


class Loads(HTMLParser):
    """What a page makes a browser fetch: scripts, stylesheets, icons, images, frames."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline_css: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag in {"script", "img", "iframe", "source", "audio", "video", "embed"}:
            self.urls.append(values.get("src") or "")
        if tag == "link":
            self.urls.append(values.get("href") or "")
        if tag == "object":
            self.urls.append(values.get("data") or "")
        if values.get("style"):
            self.inline_css.append(values["style"] or "")


FOREIGN = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.I)
CSS_URL = re.compile(r"""(?:url\(\s*["']?|@import\s+["'])([^"')\s]+)""")


def foreign_in_css(css: str) -> list[str]:
    return [url for url in CSS_URL.findall(css) if FOREIGN.match(url)]


def test_the_site_loads_nothing_from_another_host(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) >= 25
    for page in pages:
        parser = Loads()
        parser.feed(page.read_text())
        outside = [url for url in parser.urls if FOREIGN.match(url)]
        outside += [url for css in parser.inline_css for url in foreign_in_css(css)]
        assert outside == [], (page.relative_to(site), outside)
        for block in re.findall(r"<style[^>]*>(.*?)</style>", page.read_text(), re.S):
            assert foreign_in_css(block) == [], page
    for asset in [*site.rglob("*.css"), *site.rglob("*.js")]:
        assert foreign_in_css(asset.read_text()) == [], asset.relative_to(site)


def test_the_site_holds_the_python_api_from_the_docstrings(site: Path) -> None:
    html = (site / "reference" / "python.html").read_text()
    for name in (
        "squad_memory.get_storage",
        "squad_memory.storage.DjangoChatStorage",
        "squad_memory.storage.SummarizingChatStorage",
        "squad_memory.models.Slot",
        "squad_memory.models.Message",
        "squad_memory.summarizers.llm.LLMSummarizer",
        "squad_memory.compression.Dispatcher",
        "squad_memory.compression.run",
        "squad_memory.exceptions.SummarizerError",
    ):
        assert f'id="{name}"' in html, name


def test_the_site_shows_the_version_and_the_changelog(site: Path) -> None:
    assert f"squad_memory {squad_memory.__version__}" in (site / "index.html").read_text()
    assert f"[{squad_memory.__version__}]" in (site / "changelog.html").read_text()


# -- the README and the links ----------------------------------------------------------
README = (ROOT / "README.md").read_text()
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_readme_links_into_each_part_of_the_docs() -> None:
    links = set(LINK.findall(README))
    for part in ("docs/tutorial.md", "docs/howto/", "docs/reference/", "docs/explanation/"):
        assert any(link.startswith(part) for link in links), part
    assert "make docs" in README and "build/docs/index.html" in README
    assert "make demo" in README and "make test" in README and ".ci/run" in README


@pytest.mark.parametrize("path", [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))], ids=str)
def test_relative_links_resolve(path: Path) -> None:
    for link in LINK.findall(path.read_text()):
        if re.match(r"^[a-z]+:", link) or link.startswith("#"):
            continue
        target, _, anchor = link.partition("#")
        assert (path.parent / target).resolve().exists(), (path.name, link)
        if anchor and target.endswith(".md"):
            headings = re.findall(r"^#+ (.+)$", (path.parent / target).read_text(), re.M)
            slugs = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}
            assert anchor in slugs, (path.name, link, sorted(slugs))


def test_the_readme_at_a_glance_quotes_the_results_page_as_it_stands() -> None:
    results = (ROOT / "bench" / "results" / "README.md").read_text()
    glance = section(README, "## At a glance")
    taken = re.search(r"Taken in one run on (\d{4}-\d{2}-\d{2})", results)
    assert taken and taken.group(1) in glance, "the section names the run it quotes"
    table = [line for line in glance.splitlines() if line.startswith("| ") and "---" not in line]
    figures = re.findall(r"\d[\d,]*\.?\d*", "\n".join(table[1:]))
    assert len(figures) >= 15
    for figure in figures:
        assert re.search(rf"(?<![\d.]){re.escape(figure)}(?![\d])", results), figure
    for line in table[1:]:
        system = line.split("|")[1].strip()
        assert f"| {system} |" in results, system  # a row of the results page


# -- the version -----------------------------------------------------------------------
def test_the_version_is_written_once() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "squad_memory.__version__"}
    changelog = (ROOT / "CHANGELOG.md").read_text()
    (newest,) = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", changelog, re.M)[:1]
    assert newest == squad_memory.__version__
    for path in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        for named in re.findall(r"squad_memory-(\d+\.\d+\.\d+)-py3", path.read_text()):
            assert named == squad_memory.__version__, path
        for named in re.findall(r"[Tt]his is version (\d+\.\d+\.\d+)", path.read_text()):
            assert named == squad_memory.__version__, path


# -- names -----------------------------------------------------------------------------
DOTTED = re.compile(r"(?<![\w.])(squad_memory(?:\.\w+)+)")
NOT_PYTHON = re.compile(r"squad_memory\.(?:[EW]\d{3}|(?:add|change|delete|view)_\w+)$")


def resolves(name: str) -> bool:
    """Whether ``name`` is a module, or an attribute of one, of this checkout."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                found = getattr(found, attr)
        except AttributeError:
            return False
        return True
    return False


@pytest.mark.parametrize("path", [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))], ids=str)
def test_every_python_name_the_docs_give_exists(path: Path) -> None:
    """A module, class or function the docs name by dotted path exists (the changelog,
    which names what was removed, is not checked)."""
    if path.name == "changelog.md":
        return
    names = {n for n in DOTTED.findall(path.read_text()) if not NOT_PYTHON.match(n)}
    missing = sorted(n for n in names if not resolves(n))
    assert missing == [], missing

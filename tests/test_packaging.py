"""The app builds as an installable, typed wheel with its migrations and templates, and
as an sdist that holds the app and no partial test suite."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

import squad_memory
from tests.conftest import require

ROOT = Path(__file__).resolve().parent.parent
LOCAL = (
    ".git",
    ".venv*",
    "var",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    "test-artifacts",
)


@dataclass(frozen=True)
class Built:
    """What ``python -m build`` made of a copy of the checkout, as a release is built: the
    sdist, and the wheel built from that sdist."""

    sdist: Path
    wheel: Path

    def sdist_names(self) -> list[str]:
        with tarfile.open(self.sdist) as archive:
            return [name.split("/", 1)[1] for name in archive.getnames() if "/" in name]

    def wheel_text(self, suffix: str) -> str:
        wheel = zipfile.ZipFile(self.wheel)
        return wheel.read(next(n for n in wheel.namelist() if n.endswith(suffix))).decode()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Built once for the module, from a copy of the checkout: setuptools writes build/ and
    *.egg-info into the tree it builds, and the checkout must not keep them (make clean is
    for yours)."""
    before = sorted(p.name for p in ROOT.iterdir())
    copy, out = tmp_path_factory.mktemp("src") / "src", tmp_path_factory.mktemp("dist")
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(*LOCAL), symlinks=True)
    subprocess.run(
        [sys.executable, "-m", "build", "-o", str(out), str(copy)], check=True, capture_output=True
    )
    assert sorted(p.name for p in ROOT.iterdir()) == before
    return Built(next(out.glob("squad_memory-*.tar.gz")), next(out.glob("squad_memory-*.whl")))


def test_wheel_contains_the_app_typed(built: Built) -> None:
    names = set(zipfile.ZipFile(built.wheel).namelist())
    assert "squad_memory/py.typed" in names
    assert "squad_memory/migrations/0001_initial.py" in names
    assert any(n.startswith("squad_memory/templates/") for n in names)
    assert not any(n.startswith(("tests/", "project/", "bench/")) for n in names)
    text = built.wheel_text("METADATA")
    assert "Requires-Dist: Django>=5.2" in text and "Requires-Dist: agent-squad>=1.1.4" in text
    # The version is written once, in squad_memory/__init__.py; the metadata reads it there.
    assert f"\nVersion: {squad_memory.__version__}\n" in text


def test_sdist_ships_the_app_and_no_partial_test_suite(built: Built) -> None:
    names = set(built.sdist_names())
    # No test module without its helpers (conftest, support modules): none at all.
    assert not any(n.startswith("tests") for n in names), sorted(names)
    assert {"LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml", "PKG-INFO"} <= names
    app = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "squad_memory").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert app <= names, sorted(app - names)
    assert not any(n.startswith(("project/", "bench/", "scripts/")) for n in names)


def test_the_wheel_from_the_sdist_has_the_license_and_classifiers(built: Built) -> None:
    names = set(zipfile.ZipFile(built.wheel).namelist())
    assert any(n.endswith("/licenses/LICENSE") for n in names)
    text = built.wheel_text("METADATA")
    assert "License-Expression: MIT" in text
    assert "Classifier: Framework :: Django :: 5.2" in text
    assert "Classifier: Framework :: Django :: 6.1" in text
    assert "Classifier: Development Status :: 4 - Beta" in text
    assert "Keywords: " in text and "agent-squad" in text


LEFTOVERS = (
    ".venv/bin",
    ".venv-django6",
    "build/lib",
    "squad_memory.egg-info",
    "var",
    "bench/.work/quick",
)


def make_clean(checkout: Path, bench_url: str) -> subprocess.CompletedProcess[str]:
    """``make clean`` in a scratch checkout (never this one: it removes .venv)."""
    shutil.copy(ROOT / "Makefile", checkout)
    return subprocess.run(
        ["make", "-s", "clean", f"BENCH_DATABASE_URL={bench_url}"],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_make_clean_removes_builds_environments_and_work_files(tmp_path: Path) -> None:
    for name in LEFTOVERS:
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "squad_memory").mkdir()
    done = make_clean(tmp_path, "postgres://postgres@127.0.0.1:9/sm_nowhere")  # nothing answers
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Makefile", "bench", "squad_memory"]
    assert not (tmp_path / "bench" / ".work").exists()
    if shutil.which("psql"):
        assert "could not drop sm_nowhere" in done.stdout  # and make clean still succeeds


@pytest.mark.postgres
def test_make_clean_drops_the_bench_database(tmp_path: Path) -> None:
    import psycopg

    require(shutil.which("psql") is not None, "needs psql (apt-get install postgresql-client)")
    server, name = os.environ["DATABASE_URL"].rsplit("/", 1)
    bench = f"{name}_bench_clean"  # this run's own, never another checkout's sm_bench
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{bench}"')
        admin.execute(f'CREATE DATABASE "{bench}"')
        make_clean(tmp_path, f"{server}/{bench}")
        found = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [bench]).fetchone()
    assert found is None

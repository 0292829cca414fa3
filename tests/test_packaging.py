"""The app builds as an installable, typed wheel with its migrations and templates, and
as an sdist that holds the app and no partial test suite."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
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


@pytest.fixture
def source(tmp_path: Path) -> Iterator[Path]:
    """A copy of the checkout to build from: setuptools writes build/ and *.egg-info into
    the tree it builds, and the checkout must not keep them (make clean is for yours)."""
    before = sorted(p.name for p in ROOT.iterdir())
    copy = tmp_path / "src"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(*LOCAL), symlinks=True)
    yield copy
    assert sorted(p.name for p in ROOT.iterdir()) == before


def test_wheel_contains_the_app_typed(tmp_path: Path, source: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)],
        check=True,
        capture_output=True,
    )
    wheel = next(tmp_path.glob("squad_memory-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "squad_memory/py.typed" in names
    assert "squad_memory/migrations/0001_initial.py" in names
    assert any(n.startswith("squad_memory/templates/") for n in names)
    assert not any(n.startswith(("tests/", "project/", "bench/")) for n in names)
    metadata = next(n for n in names if n.endswith("METADATA"))
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "Requires-Dist: Django>=5.2" in text and "Requires-Dist: agent-squad>=1.1.4" in text
    # The version is written once, in squad_memory/__init__.py; the metadata reads it there.
    assert f"\nVersion: {squad_memory.__version__}\n" in text


def sdist_names(tmp_path: Path, source: Path) -> list[str]:
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "-o", str(tmp_path), str(source)],
        check=True,
        capture_output=True,
    )
    sdist = next(tmp_path.glob("squad_memory-*.tar.gz"))
    with tarfile.open(sdist) as archive:
        return [name.split("/", 1)[1] for name in archive.getnames() if "/" in name]


def test_sdist_ships_the_app_and_no_partial_test_suite(tmp_path: Path, source: Path) -> None:
    names = set(sdist_names(tmp_path, source))
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


def test_sdist_builds_the_same_wheel_with_license_and_classifiers(
    tmp_path: Path, source: Path
) -> None:
    sdist_names(tmp_path, source)
    sdist = next(tmp_path.glob("squad_memory-*.tar.gz"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(sdist)],
        check=True,
        capture_output=True,
    )
    wheel = zipfile.ZipFile(next(tmp_path.glob("squad_memory-*.whl")))
    names = set(wheel.namelist())
    assert "squad_memory/migrations/0001_initial.py" in names and "squad_memory/py.typed" in names
    assert any(n.endswith("/licenses/LICENSE") for n in names)
    text = wheel.read(next(n for n in names if n.endswith("METADATA"))).decode()
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

"""The app builds as an installable, typed wheel with its migrations and templates, and
as an sdist that holds the app and no partial test suite."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_contains_the_app_typed(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
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


def sdist_names(tmp_path: Path) -> list[str]:
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "-o", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    sdist = next(tmp_path.glob("squad_memory-*.tar.gz"))
    with tarfile.open(sdist) as archive:
        return [name.split("/", 1)[1] for name in archive.getnames() if "/" in name]


def test_sdist_ships_the_app_and_no_partial_test_suite(tmp_path: Path) -> None:
    names = set(sdist_names(tmp_path))
    # No test module without its helpers (conftest, support modules): none at all.
    assert not any(n.startswith("tests") for n in names), sorted(names)
    assert {"LICENSE", "README.md", "pyproject.toml", "PKG-INFO"} <= names
    app = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "squad_memory").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert app <= names, sorted(app - names)
    assert not any(n.startswith(("project/", "bench/", "scripts/")) for n in names)


def test_sdist_builds_the_same_wheel_with_license_and_classifiers(tmp_path: Path) -> None:
    sdist_names(tmp_path)
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

"""The app builds as an installable, typed wheel with its migrations and templates."""

from __future__ import annotations

import subprocess
import sys
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

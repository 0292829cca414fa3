"""The package's shape: small modules, and layers that only import downward."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "squad_memory"


def test_every_module_stays_under_300_lines() -> None:
    sizes = {
        str(path.relative_to(PACKAGE)): len(path.read_text().splitlines())
        for path in PACKAGE.rglob("*.py")
        if "migrations" not in path.parts
    }
    assert {name: n for name, n in sizes.items() if n > 300} == {}


def test_the_import_layers_hold() -> None:
    linter = Path(sys.executable).with_name("lint-imports")
    if not linter.exists():
        pytest.skip("import-linter is not installed (requirements-dev.txt)")
    done = subprocess.run(
        [str(linter)],
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(PACKAGE.parent), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stdout + done.stderr

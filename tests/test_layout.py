"""The package's shape: a few subpackages grouped by concept, layers that only import
downward, short import chains, and a size a newcomer can hold."""

from __future__ import annotations

import functools
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "squad_memory"
#: Not concepts of their own: Django's app config, data files, migrations.
_NOT_UNITS = {"__init__.py", "apps.py", "migrations", "templates", "static", "__pycache__"}


def units() -> list[str]:
    """The package's top-level modules and subpackages."""
    return sorted(
        path.stem
        for path in PACKAGE.iterdir()
        if path.name not in _NOT_UNITS and (path.suffix == ".py" or path.is_dir())
    )


def test_at_most_20_top_level_modules_and_subpackages() -> None:
    assert len(units()) <= 20, units()


def test_the_package_outside_migrations_is_at_most_8000_lines() -> None:
    lines = sum(
        len(path.read_text().splitlines())
        for path in PACKAGE.rglob("*.py")
        if "migrations" not in path.parts
    )
    assert lines <= 8000


def test_the_import_contract_has_at_most_8_layers() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = config["tool"]["importlinter"]["contracts"]
    assert contract["type"] == "layers" and len(contract["layers"]) <= 8


@functools.cache
def unit_graph() -> dict[str, set[str]]:
    """Which top-level units import which (any module of one imports any of the other)."""
    grimp = pytest.importorskip("grimp", reason="import-linter is not installed")
    sys.path.insert(0, str(ROOT))
    graph = grimp.build_graph("squad_memory", exclude_type_checking_imports=True)
    edges: dict[str, set[str]] = {unit: set() for unit in units()}
    for module in graph.modules:
        source = _unit(module)
        for imported in graph.find_modules_directly_imported_by(module):
            target = _unit(imported)
            if source in edges and target in edges and source != target:
                edges[source].add(target)
    return edges


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_import_chain_passes_through_more_than_8_units() -> None:
    edges = unit_graph()

    @functools.cache
    def longest(unit: str, seen: frozenset[str] = frozenset()) -> int:
        assert unit not in seen, f"units import each other in a cycle through {unit}"
        return 1 + max((longest(n, seen | {unit}) for n in edges[unit]), default=0)

    assert max(longest(unit) for unit in edges) <= 8


def test_the_import_layers_hold() -> None:
    linter = Path(sys.executable).with_name("lint-imports")
    if not linter.exists():
        pytest.skip("import-linter is not installed (requirements-dev.txt)")
    done = subprocess.run(
        [str(linter)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stdout + done.stderr

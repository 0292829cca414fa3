"""The package's shape: a few subpackages grouped by concept, a few layers and short import
chains. That the layers only import downward is import-linter's contract (pyproject.toml),
which the lint pass checks (``make lint``)."""

from __future__ import annotations

import functools
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

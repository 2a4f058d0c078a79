"""The folder layout is the architecture: a layer imports only from the layers below it."""

from __future__ import annotations

import ast
from pathlib import Path

import composer_lab

PACKAGE = Path(composer_lab.__file__).parent
LAYERS = {
    0: {"core", "chunks", "figures"},
    1: {"algorithms", "data", "models", "functional"},
    2: {"trainer", "tracking"},
    3: {"explore"},
    4: {"lab"},
    5: {"cli", "notebook_check", "__main__", "__init__"},
}
RANK = {name: rank for rank, names in LAYERS.items() for name in names}


def _imports(path: Path) -> list[str]:
    """Every composer_lab module ``path`` imports, also inside functions (lazy imports count)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return [name for name in found if name.startswith("composer_lab.")]


def test_every_module_is_in_a_layer():
    tops = {path.relative_to(PACKAGE).with_suffix("").parts[0] for path in PACKAGE.rglob("*.py")}
    assert tops <= set(RANK), f"place {sorted(tops - set(RANK))} in LAYERS"


def test_no_module_imports_from_a_layer_above_its_own():
    upward = []
    for path in PACKAGE.rglob("*.py"):
        own = path.relative_to(PACKAGE).with_suffix("").parts[0]
        for name in _imports(path):
            if RANK[name.split(".")[1]] > RANK[own]:
                upward.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert not upward, upward

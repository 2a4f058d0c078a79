"""composer_lab declares every package it imports (issue 28): an import at a module's top level
needs the distribution in pyproject's ``dependencies``; one inside a function or a ``try`` (an
optional feature) needs it there or in an extra."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "composer_lab"
KNOWN = {"PIL": "pillow", "IPython": "ipython", "sklearn": "scikit-learn", "distributed": "dask", "apex": "apex"}
"""Import names whose distribution is named otherwise, for when it is not installed to ask."""


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(requirements: list[str]) -> set[str]:
    """The distributions a list of requirements names: each one, and the extras in its brackets
    ('dask[distributed]' brings the distribution 'distributed')."""
    names = set()
    for requirement in requirements:
        name, extras = re.match(r"([A-Za-z0-9_.\-]+)(?:\[([^\]]*)\])?", requirement).groups()
        names |= {normalised(n) for n in [name, *(extras or "").split(",")] if n.strip()}
    return names


def declared() -> tuple[set[str], set[str]]:
    """The distributions of ``dependencies``, and of every extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = set().union(*map(requirement_names, project["optional-dependencies"].values()))
    return requirement_names(project["dependencies"]), extras


@functools.cache
def _provided_by() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def distributions(module: str) -> set[str]:
    """The distributions that provide ``module`` (several: mlflow and mlflow-skinny both give mlflow)."""
    installed = _provided_by().get(module)
    return {normalised(name) for name in installed} if installed else {normalised(KNOWN.get(module, module))}


def imports(tree: ast.Module) -> list[tuple[str, bool]]:
    """``(top-level name, at module level)`` of each absolute import of a module."""
    found = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend((alias.name.split(".")[0], top) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module.split(".")[0], top))
            nested = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Try, ast.If))
            visit(child, top and not nested)

    visit(tree, True)
    return found


def third_party_imports() -> dict[str, tuple[bool, str]]:
    """Each third-party module imported: (imported at some module's top level, where first seen)."""
    seen: dict[str, tuple[bool, str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for module, top in imports(ast.parse(path.read_text(), str(path))):
            if module in sys.stdlib_module_names or module == "composer_lab" or module.startswith("__"):
                continue
            was_top, where = seen.get(module, (False, ""))
            seen[module] = (was_top or top, where if was_top else str(path.relative_to(ROOT)))
    return seen


def test_every_imported_package_is_declared():
    required, extras = declared()
    missing = []
    for module, (top, where) in third_party_imports().items():
        names = distributions(module)
        if top and not names & required:
            missing.append(f"{module} ({', '.join(sorted(names))}, imported at the top of {where}): add it to "
                           f"dependencies")
        elif not names & (required | extras):
            missing.append(f"{module} ({', '.join(sorted(names))}, imported in {where}): add it to dependencies "
                           f"or an extra")
    assert not missing, "pyproject.toml does not declare: " + "; ".join(missing)


def test_the_check_sees_an_undeclared_import():
    tree = ast.parse("import numpy\nfrom PIL import Image\ndef f():\n    import mlflow\n")
    assert imports(tree) == [("numpy", True), ("PIL", True), ("mlflow", False)]
    assert distributions("PIL") == {"pillow"} and distributions("sklearn") == {"scikit-learn"}
    assert requirement_names(["dask[distributed]>=2024.1", "torch>=2.4"]) == {"dask", "distributed", "torch"}
    required, _ = declared()
    assert {"numpy", "pillow", "ipython"} <= required

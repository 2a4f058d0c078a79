"""The codebase as a reader needs it: short modules, small functions, imports down the layers.

The limits are the project's (issue 48): no module over 400 lines; no function over a
cyclomatic complexity of 12 (radon's count, which also counts boolean operators), 10 in the
core. ``ruff check`` and ``lint-imports`` (the layers contract in pyproject.toml) run beside
this file in scripts/test.sh.
"""

from __future__ import annotations

from pathlib import Path

from radon.complexity import cc_visit

import composer_lab

PACKAGE = Path(composer_lab.__file__).parent
MAX_LINES = 400
MAX_COMPLEXITY = 12
MAX_CORE_COMPLEXITY = 10


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _limit(path: Path) -> int:
    return MAX_CORE_COMPLEXITY if "core" in path.relative_to(PACKAGE).parts[:1] else MAX_COMPLEXITY


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split a concept out of these modules (lines): {long}"


def test_no_function_is_over_the_complexity_limit():
    complex_ = [f"{path.relative_to(PACKAGE)}:{block.lineno} {block.fullname} ({block.complexity} > {_limit(path)})"
                for path in _modules() for block in cc_visit(path.read_text())
                if block.complexity > _limit(path)]
    assert not complex_, complex_


def test_the_limits_catch_what_they_claim():
    branchy = "def f(x):\n" + "".join(f"    if x == {i}:\n        return {i}\n" for i in range(13)) + "    return -1\n"
    assert max(block.complexity for block in cc_visit(branchy)) > MAX_COMPLEXITY

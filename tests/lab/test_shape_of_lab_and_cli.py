"""The lab and the command line within the project's limits (issue 48), checked on their own so a
module elsewhere over a limit does not hide one here: no module over 400 lines, no function over
a complexity of 12, ``ruff check`` clean, and one background-run handle."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from radon.complexity import cc_visit

from tests.test_code_shape import MAX_COMPLEXITY, MAX_LINES, PACKAGE

OURS = sorted([*(PACKAGE / "lab").rglob("*.py"), *(PACKAGE / "cli").rglob("*.py"), PACKAGE / "__main__.py"])


def test_no_module_of_the_lab_or_the_command_line_is_over_400_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in OURS if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_no_function_of_the_lab_or_the_command_line_is_over_the_complexity_limit():
    complex_ = [f"{p.relative_to(PACKAGE)}:{b.lineno} {b.fullname} ({b.complexity})"
                for p in OURS for b in cc_visit(p.read_text()) if b.complexity > MAX_COMPLEXITY]
    assert not complex_, complex_


def test_ruff_finds_nothing_in_the_lab_or_the_command_line():
    ruff = Path(sys.executable).parent / "ruff"
    result = subprocess.run([str(ruff), "check", "--no-cache", *map(str, OURS)], capture_output=True, text=True,
                            cwd=PACKAGE.parent)
    assert result.returncode == 0, result.stdout + result.stderr


def test_one_background_run_handle_and_no_copies_of_it():
    sources = {p.name: p.read_text() for p in (PACKAGE / "lab").glob("*.py")}
    threads = [name for name, text in sources.items() if "threading.Thread(" in text]
    assert "background_run.py" in threads
    assert not [name for name, text in sources.items() if "def wait_paused" in text or "def __await__" in text
                if name != "background_run.py"], "panels use BackgroundRun, not a handle of their own"

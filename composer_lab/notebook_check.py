"""Validate executed notebooks with nbval and the sanitize rules composer_lab ships.

nbval re-runs each notebook and compares every output with the stored one. Float results move
in their last digits from one CPU to the next (PyTorch picks its kernels by instruction set), so
a notebook that passes here can fail elsewhere. Checking it on two sets of kernels, the ones this
CPU runs and the scalar ones (``ATEN_CPU_CAPABILITY=default``), shows that before anyone else
does: an output that passes both is a fact of the program, not of the machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import Union

__all__ = ["SANITIZE_RULES", "KERNELS", "nbval_command", "check_notebooks"]

SANITIZE_RULES = Path(__file__).with_name("nbval_sanitize.cfg")
KERNELS = ("native", "default")  # this CPU's own kernels, then the scalar ones


def nbval_command(paths: Sequence[Union[str, Path]], pytest_args: Sequence[str] = ()) -> list[str]:
    """The pytest command line that validates ``paths`` in strict mode with the shipped rules."""
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--nbval", "--nbval-current-env",
            "--nbval-sanitize-with", str(SANITIZE_RULES), *pytest_args, *map(str, paths)]


def _environment(kernels: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("ATEN_CPU_CAPABILITY", None)
    if kernels != "native":
        env["ATEN_CPU_CAPABILITY"] = kernels
    return env


def _check_paths(paths: Sequence[Union[str, Path]]) -> None:
    if not paths:
        raise ValueError("no notebooks to check; pass notebook files or folders, e.g. "
                         "composer-lab check-notebooks notebooks/")
    missing = [str(p) for p in paths if not Path(p).exists()]
    if missing:
        raise FileNotFoundError(f"no notebook or folder at {', '.join(missing)}; pass existing .ipynb files "
                                f"or folders that hold them")
    if find_spec("nbval") is None:
        raise ModuleNotFoundError("checking notebooks needs nbval; install it with pip install nbval "
                                  "(or pip install 'composer_lab[test]')")


def check_notebooks(paths: Sequence[Union[str, Path]], kernels: Sequence[str] = KERNELS,
                    pytest_args: Sequence[str] = ()) -> int:
    """Validate ``paths`` once per entry of ``kernels`` ('native' or an ``ATEN_CPU_CAPABILITY`` value
    such as 'default' or 'avx2'); returns 0 when every pass succeeds, else the first failing exit code."""
    _check_paths(paths)
    unknown = [k for k in kernels if k not in ("native", "default", "avx2", "avx512")]
    if not kernels or unknown:
        raise ValueError(f"kernels must be among native, default, avx2, avx512; got {list(kernels)}")
    failed = 0
    for name in kernels:
        print(f"== nbval, {name} CPU kernels", flush=True)
        code = subprocess.call(nbval_command(paths, pytest_args), env=_environment(name))
        failed = failed or code
    return failed

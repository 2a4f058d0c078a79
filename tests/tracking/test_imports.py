"""The trackers are optional extras: importing composer_lab, or composer_lab.tracking, imports
neither MLflow nor TensorBoard (they cost seconds); a logger imports its own when built."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

TRACKERS = ("mlflow", "tensorboard", "torch.utils.tensorboard")


def imported_after(code: str) -> list[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps([m for m in {TRACKERS!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def test_importing_composer_lab_and_its_trackers_imports_no_tracker_package():
    assert imported_after("import composer_lab, composer_lab.tracking, composer_lab.explore") == []


def test_a_logger_imports_its_package_when_built(tmp_path):
    pytest.importorskip("tensorboard", reason="the tensorboard extra: pip install 'composer_lab[tensorboard]'")
    assert "tensorboard" in imported_after(f"from composer_lab.tracking import TensorBoardLogger\n"
                                           f"TensorBoardLogger({str(tmp_path / 'tb')!r})")

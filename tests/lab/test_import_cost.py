"""``import composer_lab`` leaves the heavy optional parts for where they are first used."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torchmetrics", "torchvision", "matplotlib", "ipywidgets", "scipy")


def test_importing_composer_lab_imports_none_of_the_heavy_optional_parts():
    code = f"import sys, json, composer_lab; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.splitlines()[-1]) == []

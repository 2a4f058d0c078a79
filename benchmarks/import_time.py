"""How much longer ``import composer_lab`` takes than ``import torch`` (its one heavy need).

Each is imported in a fresh interpreter under ``python -X importtime``, alternately, several
times; the cumulative time of the top-level module is read from the report, and the fastest
of each is compared (the issue's target: at most 1 s more than torch). Also lists which of the
heavy optional modules (torchmetrics, torchvision, matplotlib, ipywidgets, scipy) the import
loads: none, they are imported where first used. Writes benchmarks/results/import_time.json.

    python benchmarks/import_time.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

HEAVY = ("torchmetrics", "torchvision", "matplotlib", "ipywidgets", "scipy")


def import_seconds(module: str) -> tuple[float, list[str]]:
    """Seconds ``import module`` took (its cumulative -X importtime figure) and the heavy
    modules it loaded."""
    code = f"import sys, {module}; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                          check=True)
    cumulative = [int(m.group(1)) for m in re.finditer(rf"\|\s*(\d+) \| {re.escape(module)}$", done.stderr, re.M)]
    return cumulative[-1] / 1e6, [m for m in done.stdout.strip().split(",") if m]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"torch": [], "composer_lab": []}
    loaded: list[str] = []
    for _ in range(args.repeats):
        for module in times:
            seconds, heavy = import_seconds(module)
            times[module].append(seconds)
            loaded = heavy if module == "composer_lab" else loaded
    best = {module: min(values) for module, values in times.items()}
    extra = best["composer_lab"] - best["torch"]
    print(f"import torch {best['torch']:.2f} s, import composer_lab {best['composer_lab']:.2f} s (best of "
          f"{args.repeats}): {extra:+.2f} s; heavy optional modules loaded: {loaded or 'none'}")
    results = {"seconds": times, "extra_seconds_best": extra, "heavy_loaded": loaded,
               "machine": platform.platform(), "load_average": list(os.getloadavg())}
    (Path(__file__).parent / "results" / "import_time.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""A trainer's checkpoint in a long run (issue 21): its time and size, before and after.

A real Trainer (a linear layer on 16 x 8 inputs, SGD, one torch thread, trace 'all', no
algorithms, ``save_interval='1000ba'``) trains 2,000 and 20,000 batches, and 20,000 batches
with synthetic metric rows (two per step, 'synthetic/loss' and 'synthetic/lr', logged before
the first batch) up to the metric row count of a 200,000-step run: 200,000 steps do not fit
this 2-core shared machine, and only the metrics' row count matters to the metrics' part of a
checkpoint (the trace's part at 200,000 steps: benchmarks/trace_scale.py). The time of the
last checkpoint (at the last batch: the saver's payload and ``torch.save``, as the trainer
writes it), its file size and the bytes of its metrics are reported, beside the first
checkpoint's time and size (at batch 1,000).

Both trees run side by side, each in a subprocess: this tree, and the tree before (``--before``,
default /tmp/before, with PYTHONPATH pointing at it), where every checkpoint carries the whole
metrics frame and trace frames. Writes benchmarks/results/checkpoint_scale.json.

    python benchmarks/checkpoint_scale.py [--before /tmp/before]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
RUNS = [(2_000, 0), (20_000, 0), (20_000, 200_000)]
"""(batches trained, steps whose metric rows are logged: 0 for the batches themselves)."""


def worker(batches: int, metric_steps: int) -> dict:
    """Train ``batches`` batches (with synthetic metric rows up to ``metric_steps`` steps' worth)
    and time each checkpoint the saver writes."""
    from torch.utils.data import DataLoader, TensorDataset

    import composer_lab
    from composer_lab import Trainer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(16 * 100, 8), torch.randint(0, 2, (16 * 100,)))
    with tempfile.TemporaryDirectory() as folder:
        trainer = Trainer(torch.nn.Linear(8, 2), DataLoader(data, batch_size=16), f"{batches}ba",
                          loss_fn=torch.nn.functional.cross_entropy, save_folder=folder,
                          save_interval="1000ba", progress_bar=False)
        extra = max(metric_steps - batches, 0)
        trainer.logger._rows.extend(row for step in range(extra) for row in (
            (step, 0, "fit", "synthetic/loss", 0.5), (step, 0, "fit", "synthetic/lr", 0.1)))
        saver, times = trainer.checkpoint_saver, []
        write = saver._save

        def timed(state) -> None:
            t0 = time.perf_counter()
            write(state)
            times.append(time.perf_counter() - t0)

        saver._save = timed
        t0 = time.perf_counter()
        trainer.fit()
        train_s = time.perf_counter() - t0
        sizes = [path.stat().st_size for path in saver.saved]
        metrics = torch.load(saver.saved[-1], weights_only=True)["metrics"]  # (before: the frame's bytes)
        return {"tree": str(Path(composer_lab.__file__).parents[1]), "batches": batches,
                "metric_rows": len(trainer.metrics), "train_s": round(train_s, 1),
                "checkpoints": len(times), "first_checkpoint_s": round(times[0], 4),
                "first_checkpoint_bytes": sizes[0], "last_checkpoint_s": round(times[-1], 4),
                "last_checkpoint_bytes": sizes[-1], "last_checkpoint_metrics_bytes": saved_bytes(metrics)}


def saved_bytes(value) -> int:
    """Bytes ``value`` takes in a checkpoint (``torch.save``)."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return len(buffer.getvalue())


def measure(tree: Path, batches: int, metric_steps: int) -> dict:
    """:func:`worker` run in a subprocess importing composer_lab from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(batches), str(metric_steps)]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True, cwd=tree)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="/tmp/before")
    parser.add_argument("--worker", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return
    results = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}",
               "setup": __doc__.split("\n\n")[1].replace("\n", " "), "runs": []}
    for batches, metric_steps in RUNS:
        row = {"batches": batches, "metric_rows_of_steps": metric_steps or batches,
               **{tree: measure(path, batches, metric_steps) for tree, path in (("before", Path(args.before)),
                                                                               ("after", ROOT))}}
        print(json.dumps(row), flush=True)
        results["runs"].append(row)
    out = ROOT / "benchmarks" / "results" / "checkpoint_scale.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

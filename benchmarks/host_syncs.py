"""Host syncs per training batch, and the cost of a ``metrics`` read, before and after issue 21.

A host sync is counted on CPU where it would stall a GPU's launch queue
(``benchmarks/syncs.py``'s ``SyncCounter``, a ``TorchFunctionMode`` counting ``.item()``,
``.tolist()``, ``.cpu()``, ``.numpy()``, ``bool()`` / ``float()`` / ``int()`` / ``index()`` of a
tensor and ``.nonzero()``) over whole ``fit`` calls of a small MLP,
one epoch of 200 and of 1000 batches, with the default settings, with Selective Backprop and with
the trace off. A plain PyTorch loop that prints its loss every 25 steps is the reference.

A metrics read: a Logger holding N rows (tensor values, as the trainer logs them) gets 100 new
rows, then ``metrics`` is read and timed (min of 7), for N = 10,000 and 100,000: a read that
costs time in proportion to the new rows costs about the same at both.

Each source tree is measured in its own process, side by side: this one, and the tree before the
change (``--before``, a checkout of 162ef45). Writes benchmarks/results/host_syncs.json.

    python benchmarks/host_syncs.py [--before /tmp/before]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ROOT = Path(__file__).resolve().parents[1]
BATCH = 32
NEW_ROWS, REPEATS = 100, 7


def _this_trees_sync_counter() -> type:
    """benchmarks/syncs.py's SyncCounter of this tree, loaded from its file, so the tree
    before the change (which has none) is counted by the same counter."""
    spec = importlib.util.spec_from_file_location("syncs", ROOT / "benchmarks" / "syncs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SyncCounter


SyncCounter = _this_trees_sync_counter()


def make_data(batches: int) -> DataLoader:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batches * BATCH, 32, generator=gen)
    return DataLoader(TensorDataset(x, torch.randint(0, 10, (batches * BATCH,), generator=gen)), batch_size=BATCH)


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))


def plain_loop_syncs(batches: int) -> int:
    """A plain loop printing its loss every 25 steps, as a progress bar would."""
    model, data = make_model(), make_data(batches)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with SyncCounter() as counter:
        for step, (x, y) in enumerate(data):
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            if step % 25 == 0:
                f"{float(loss):.4f}"
    return counter.count


def fit_syncs(batches: int, setting: str) -> int:
    from composer_lab import Trainer
    from composer_lab.algorithms import SelectiveBackprop

    extra = {"default": {}, "trace_off": {"trace": "off"},
             "selective_backprop": {"algorithms": [SelectiveBackprop(start=0, end=1, scale_factor=1, interrupt=0)]}}
    trainer = Trainer(make_model(), make_data(batches), "1ep", loss_fn=nn.functional.cross_entropy, device="cpu",
                      **extra[setting])
    with SyncCounter() as counter:
        trainer.fit()
    return counter.count


def metrics_read_ms(rows: int) -> float:
    """The min time of a ``metrics`` read after ``NEW_ROWS`` new rows, the logger holding ``rows``."""
    from composer_lab.core.logger import Logger

    logger = Logger()
    for i in range(rows // 2):
        logger.log_metrics({"loss/train": torch.tensor(float(i)), "lr": 0.05})
    logger.metrics
    times = []
    for _ in range(REPEATS):
        for i in range(NEW_ROWS // 2):
            logger.log_metrics({"loss/train": torch.tensor(float(i)), "lr": 0.05})
        start = time.perf_counter()
        logger.metrics
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def measure() -> dict:
    """This process's tree: syncs per fit and per batch, and the metrics read times."""
    torch.set_num_threads(1)
    import composer_lab
    out = {"tree": str(Path(composer_lab.__file__).parents[1]), "syncs": {}, "metrics_read_ms": {}}
    for batches in (200, 1000):
        out["syncs"][f"plain_loop_{batches}"] = plain_loop_syncs(batches)
        for setting in ("default", "selective_backprop", "trace_off"):
            out["syncs"][f"{setting}_{batches}"] = fit_syncs(batches, setting)
    for rows in (10_000, 100_000):
        out["metrics_read_ms"][str(rows)] = round(metrics_read_ms(rows), 3)
    return out


def run_tree(tree: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, __file__, "--child"], env=env, check=True, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="/tmp/before", help="a checkout of the tree before the change")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure()))
        return
    trees = {"before": run_tree(Path(args.before)), "after": run_tree(ROOT)}
    per_batch = {when: {key: round(count / int(key.rsplit("_", 1)[1]), 4) for key, count in tree["syncs"].items()}
                 for when, tree in trees.items()}
    for key in per_batch["after"]:
        print(f"{key:>26}: syncs per batch {per_batch['before'][key]:.3f} -> {per_batch['after'][key]:.3f}")
    for rows in ("10000", "100000"):
        print(f"metrics read after {rows:>6} rows (+{NEW_ROWS} new): {trees['before']['metrics_read_ms'][rows]:8.2f}"
              f" -> {trees['after']['metrics_read_ms'][rows]:6.2f} ms")
    results = {"trees": trees, "syncs_per_batch": per_batch, "new_rows_per_read": NEW_ROWS,
               "machine": {"python": platform.python_version(), "torch": torch.__version__,
                           "processor": platform.processor() or platform.machine(), "cpus": os.cpu_count()}}
    out = ROOT / "benchmarks" / "results" / "host_syncs.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

"""Sweep throughput: runs per minute with 1 and 2 local workers and with a 2-worker Dask LocalCluster.

The same small runs everywhere (the digits, a narrow CNN, 4 epochs, CutOut and MixUp in both
orders), one process driving all three executors. Each executor is started and warmed with one
run first (worker processes import torch once), then times whole sweeps on fresh folders; the
rounds alternate between executors and the best round of each counts, so a burst of load from
elsewhere on the machine hurts one round, not one executor. Targets: 2 workers at least 1.7x
one worker on 2 cores; Dask within 10% of the local pool.

    python benchmarks/sweep.py            # 16 runs per sweep, 2 rounds
    python benchmarks/sweep.py --seeds 4 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from composer_lab.algorithms import CutOut, MixUp
from composer_lab.data import digits_dataloaders
from composer_lab.explore import Sweep, local_pool
from composer_lab.models import SmallCNN
from composer_lab.trainer import Trainer
from composer_lab.trainer.rng import seed_all

RESULTS = Path(__file__).resolve().parent / "results" / "sweep.json"


def make_trainer(algorithms: list, seed: int) -> Trainer:
    """One small run: a narrow CNN on the digits for 4 epochs (about a second on one core)."""
    seed_all(seed)
    train, test = digits_dataloaders(batch_size=64)
    return Trainer(SmallCNN(num_classes=10, width=16), train, "4ep", loss_fn=F.cross_entropy, eval_dataloader=test,
                   algorithms=algorithms, seed=seed, progress_bar=False, device="cpu", trace="ran")


def runs_per_minute(executor: object, seeds: int) -> float:
    """Train 2 orders x ``seeds`` seeds on ``executor`` into a fresh folder; runs per minute."""
    with tempfile.TemporaryDirectory() as folder:
        sweep = Sweep(make_trainer, [CutOut(), MixUp()], seeds=range(seeds), executor=executor, folder=folder)
        start = time.perf_counter()
        results = sweep.run()
        seconds = time.perf_counter() - start
    assert len(results) == 2 * seeds
    return len(results) / seconds * 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8, help="seeds per order (2 orders)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    load_at_start = os.getloadavg()  # other work on the machine: the ratios mean little when it exceeds the cores
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address=None)
    executors = {"local, 1 worker": local_pool(1), "local, 2 workers": local_pool(2),
                 "dask LocalCluster, 2 workers": Client(cluster)}
    try:
        for executor in executors.values():
            runs_per_minute(executor, 1)  # warm: the workers import torch and composer_lab once
        rates: dict[str, list[float]] = {name: [] for name in executors}
        for _ in range(args.rounds):
            for name, executor in executors.items():
                rates[name].append(runs_per_minute(executor, args.seeds))
    finally:
        for executor in executors.values():
            if hasattr(executor, "scheduler"):
                executor.close()  # a Dask Client
            else:
                executor.shutdown()
        cluster.close()
    best = {name: max(values) for name, values in rates.items()}
    one, two, dask = best.values()
    for name, rate in best.items():
        print(f"{name:>30}: {rate:6.1f} runs/min (rounds: {', '.join(f'{r:.1f}' for r in rates[name])})")
    print(f"2 local workers / 1 local worker: {two / one:.2f}x (target >= 1.7x on 2 cores)")
    print(f"dask / local pool, 2 workers each: {dask / two:.2f}x (target within 10%: >= 0.90x)")
    print(f"load average (1 min) at start {load_at_start[0]:.1f}, at end {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({
        "runs_per_sweep": 2 * args.seeds, "rounds": args.rounds, "runs_per_minute": best,
        "rounds_runs_per_minute": rates,
        "speedup_2_workers": two / one, "dask_vs_local": dask / two, "cpu_count": os.cpu_count(),
        "load_average_at_start": load_at_start, "load_average_at_end": os.getloadavg()}, indent=2))
    print(f"saved to {RESULTS}")


if __name__ == "__main__":
    main()

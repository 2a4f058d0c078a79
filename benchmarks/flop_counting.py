"""What counting FLOPs costs a run, and how close the sampled count is to counting every batch.

The digits experiment of notebook 11 (a small CNN, batches of 128), baseline and Selective
Backprop, trained three ways in one process after a warm-up run: without a meter, with the
frontier's :class:`~composer_lab.explore.cost.CostMeter` (the first batch and each recurring kind
counted once), and counting every batch;
the three interleaved in each repeat, so that a change in the machine's load hits them alike.
Prints the whole fit's time (start-up and evaluation in it too) of each, the meter's cost as the
median over repeats of (fit with the meter / fit without - 1), the meter's own
``counting_overhead`` estimate and the sampled FLOPs' error against the exact count.

    python benchmarks/flop_counting.py [--batches 96] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from composer_lab.algorithms import SelectiveBackprop
from composer_lab.data import digits_datasets
from composer_lab.explore.cost import CostMeter
from composer_lab.models import SmallCNN
from composer_lab.trainer import Trainer


def fit(train_set, batches: int, algorithms: list, every) -> tuple[float, dict]:
    torch.manual_seed(0)
    trainer = Trainer(SmallCNN(in_channels=1, num_classes=10, width=8), DataLoader(train_set, batch_size=128,
                                                                                   shuffle=True), f"{batches}ba",
                      loss_fn=F.cross_entropy, algorithms=algorithms, progress_bar=False, trace="off")
    meter = CostMeter.attach(trainer, every if every != "off" else None)
    if every == "off":
        trainer.state.callbacks.remove(meter)
        meter = CostMeter()  # timing without the meter: the whole fit
    start = time.perf_counter()
    trainer.fit()
    seconds = time.perf_counter() - start
    return seconds, meter.row() if meter.seconds else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    train_set, _ = digits_datasets()
    fit(train_set, 12, [], "off")  # warm-up
    for name, make in (("baseline", list), ("SelectiveBackprop", lambda: [SelectiveBackprop(scale_factor=1.0)])):
        found: dict = {"off": [], None: [], 1: []}
        for _ in range(args.repeats):
            for mode in found:
                found[mode].append(fit(train_set, args.batches, make(), mode))
        plain = statistics.median(s for s, _ in found["off"])
        metered = statistics.median(s for s, _ in found[None])
        cost = statistics.median(m / p - 1 for (m, _), (p, _) in zip(found[None], found["off"]))
        exact = found[1][0][1]["flops"]
        rows = [row for _, row in found[None]]
        print(f"{name}: fit {plain:.2f} s without a meter, {metered:.2f} s with it (paired {cost:+.1%}), "
              f"{statistics.median(s for s, _ in found[1]):.2f} s counting every batch; meter's counting_overhead "
              f"{statistics.median(r['counting_overhead'] for r in rows):.1%}, batches counted "
              f"{rows[0]['flops_counted']} of {rows[0]['batches']}; sampled FLOPs vs every batch "
              f"{max(abs(r['flops'] / exact - 1) for r in rows):.2%} off at most")


if __name__ == "__main__":
    main()

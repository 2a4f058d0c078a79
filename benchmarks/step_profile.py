"""Where the microseconds of a training step go: a profile by parts, each part the difference
between two configurations of the same fit, measured side by side.

The workload of ``trainer_overhead.py`` (MLP 784-256-10, batch 64, one thread, SGD with
momentum), steps timed by a clock read as each batch is taken, the 10th percentile over every
repeat; configurations are run in rounds whose order rotates. The parts, each the step time of a
configuration less the one before it:

- the trainer's loop: ``Trainer.fit`` with no algorithm, trace off, no progress bar, over the plain loop;
- events and calls: 10 no-op algorithms, one per event of the step, trace off;
- the trace: the same algorithms declaring ``writes = frozenset()`` (rows, timings, the O(1) field check), trace 'all';
- watching the model: the algorithms undeclared (each call watched for writes to the model);
- the progress bar: the default callback on.

Writes benchmarks/results/step_profile.json.

    python benchmarks/step_profile.py [--repeats 5] [--steps 600]
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch
from torch import nn

from composer_lab import Trainer
from trainer_overhead import (STEP_EVENTS, Stamped, Touch, make_batches, make_model, make_optimizer, p10,
                              plain_loop, processor)


class DeclaredTouch(Touch):
    writes = frozenset()


CONFIGURATIONS = {  # name: (algorithm class or None, trace, progress bar)
    "trainer loop": (None, "off", False), "events and calls": (Touch, "off", False),
    "trace 'all'": (DeclaredTouch, "all", False), "watching the model": (Touch, "all", False),
    "progress bar": (Touch, "all", True)}


def fit_steps(batches: list, algorithm: type, trace: str, progress_bar: bool) -> list[float]:
    model, data = make_model(0), Stamped(batches)
    algorithms = [algorithm(e) for e in STEP_EVENTS] if algorithm else []
    Trainer(model, data, f"{len(batches)}ba", loss_fn=nn.functional.cross_entropy, optimizers=make_optimizer(model),
            algorithms=algorithms, device="cpu", trace=trace, progress_bar=progress_bar).fit()
    return [b - a for a, b in zip(data.stamps, data.stamps[1:])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=600)
    args = parser.parse_args()
    torch.set_num_threads(1)
    batches = make_batches(args.steps)
    runs = {"plain loop": lambda: plain_loop(batches)[1],
            **{name: (lambda c=config: fit_steps(batches, *c)) for name, config in CONFIGURATIONS.items()}}
    for run in runs.values():
        run()  # warm up
    steps: dict[str, list] = {name: [] for name in runs}
    names = list(runs)
    for i in range(args.repeats):
        for name in names[i % len(names):] + names[:i % len(names)]:
            steps[name].extend(runs[name]())
    p10s = {name: p10(times) * 1e6 for name, times in steps.items()}
    parts = {name: p10s[name] - p10s[before] for before, name in zip(names, names[1:])}
    result = {"benchmark": "step_profile", "steps": args.steps, "repeats": args.repeats, "step_p10_us": p10s,
              "parts_us": parts, "torch": torch.__version__, "python": platform.python_version(),
              "processor": processor()}
    out = Path(__file__).parent / "results" / "step_profile.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"{result['processor']}; torch {torch.__version__}, one thread; step p10 over {args.repeats} x {args.steps} steps")
    print(f"{'plain loop':22} {p10s['plain loop']:7.1f} us")
    for name, part in parts.items():
        print(f"{'+ ' + name:22} {part:+7.1f} us  (step {p10s[name]:.1f} us, {p10s[name] / p10s['plain loop']:.3f}x)")
    print(f"saved to {out}")


if __name__ == "__main__":
    main()

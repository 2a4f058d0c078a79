"""Where the microseconds of a training step go: a profile by parts, each part the difference
between two configurations of the same fit, measured side by side.

The workload of ``trainer_overhead.py`` (MLP 784-256-10, batch 64, one thread, SGD with
momentum), steps timed by a clock read as each batch is taken; configurations are run in rounds
whose order rotates. The parts, each the step time of a configuration less the one before it:
the 10th percentile of a round's steps less the other's in the same round, the median over the
rounds (a slow stretch of a shared machine falls within a round or two, on all of its
configurations, and drops out of the median):

- the trainer's loop: ``Trainer.fit`` with no algorithm, trace off, no progress bar, over the plain loop;
- events and calls: 10 no-op algorithms, one per event of the step, trace off;
- the trace: the same algorithms declaring ``writes = frozenset()`` (rows, timings, the O(1) field check), trace 'all';
- watching the model: the algorithms undeclared (each call watched for writes to the model);
- the progress bar: the default callback on.

``--torch-calls`` also times torch's own calls in every configuration (``zero_grad``, the model's
forward, the loss, ``backward`` and the optimizer's ``step``, each wrapped where both loops find
it) and splits each part into what those calls took longer and the rest, the lab's own Python: on
a real model the loop's work between torch's calls makes those calls slower (the caches they
find), a cost no count of the lab's bytecodes shows. The wrappers cost the same in every
configuration.

``--workload tiny`` runs the same profile on ``nn.Linear(3, 2)`` with batches of 4 (3,000 steps):
the trainer's Python is the same, torch's work a tenth, and so is the noise it brings: a part is
told to about half a microsecond, against several on the MLP. Use it to decide between two
versions of the loop's Python; the MLP says what a part is worth on a real step. Writes
benchmarks/results/step_profile.json (``step_profile_tiny.json``).

    python benchmarks/step_profile.py [--repeats 7] [--steps 600] [--workload mlp|tiny] [--torch-calls]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Callable, Iterator

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


def make_tiny_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Linear(3, 2)


WORKLOADS = {"mlp": (make_batches, make_model, 600),
             "tiny": (partial(make_batches, size=4, features=3, classes=2), make_tiny_model, 3000)}
"""Each workload's batches, model and default number of steps."""


def fit_steps(batches: list, algorithm: type, trace: str, progress_bar: bool,
              model_fn: Callable[[int], nn.Module] = make_model) -> list[float]:
    model, data = model_fn(0), Stamped(batches)
    algorithms = [algorithm(e) for e in STEP_EVENTS] if algorithm else []
    Trainer(model, data, f"{len(batches)}ba", loss_fn=nn.functional.cross_entropy, optimizers=make_optimizer(model),
            algorithms=algorithms, device="cpu", trace=trace, progress_bar=progress_bar).fit()
    return [b - a for a, b in zip(data.stamps, data.stamps[1:])]


TORCH_CALLS = 5
"""Torch's calls in a step of every configuration: zero_grad, forward, loss, backward, step."""


@contextmanager
def timed_torch_calls(model_type: type) -> Iterator[list]:
    """For the duration, the durations of torch's own calls in a step, in the order they end:
    ``SGD.zero_grad`` and ``.step``, ``model_type.forward``, ``nn.functional.cross_entropy`` and
    ``torch.autograd.backward`` wrapped (both loops look each up when they call it). Each is its
    own time, less the timed calls made inside it: the trainer's optimizer steps through a closure
    that runs the forward, loss and backward (and the events between them) inside ``step``."""
    durations: list[float] = []
    inner: list[float] = []  # per timed call under way, the time of the timed calls made inside it
    now, record = time.perf_counter, durations.append

    def timed(call: Callable) -> Callable:
        def timed_call(*args, **kwargs):
            inner.append(0.0)
            start = now()
            try:
                return call(*args, **kwargs)
            finally:
                elapsed = now() - start
                record(elapsed - inner.pop())
                if inner:
                    inner[-1] += elapsed
        return timed_call

    places = [(torch.optim.SGD, "zero_grad"), (torch.optim.SGD, "step"), (model_type, "forward"),
              (nn.functional, "cross_entropy"), (torch.autograd, "backward")]
    saved = [(owner, name, owner.__dict__.get(name)) for owner, name in places]  # (None: inherited)
    for owner, name in places:
        setattr(owner, name, timed(getattr(owner, name)))
    try:
        yield durations
    finally:
        for owner, name, value in saved:
            if value is None:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


def torch_p10(run: Callable[[], list], model_type: type, batches: int) -> tuple[list[float], float]:
    """``run``'s step times, and the 10th percentile of its steps' time inside torch's calls."""
    with timed_torch_calls(model_type) as durations:
        steps = run()
    if len(durations) != TORCH_CALLS * batches:
        raise RuntimeError(f"expected {TORCH_CALLS} timed torch calls for each of {batches} batches, got "
                           f"{len(durations)}")
    per_step = [sum(durations[i:i + TORCH_CALLS]) for i in range(0, len(durations), TORCH_CALLS)]
    return steps, p10(per_step)


def differences(rounds: dict[str, list]) -> dict[str, float]:
    """Each configuration's part: the median over the rounds of its figure less the one before it's."""
    names = list(rounds)
    return {name: statistics.median(b - a for a, b in zip(rounds[before], rounds[name]))
            for before, name in zip(names, names[1:])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=None, help="default: 600 (mlp), 3000 (tiny)")
    parser.add_argument("--workload", choices=list(WORKLOADS), default="mlp")
    parser.add_argument("--torch-calls", action="store_true", help="also time torch's own calls in each step")
    args = parser.parse_args()
    torch.set_num_threads(1)
    batches_fn, model_fn, steps = WORKLOADS[args.workload]
    args.steps = args.steps or steps
    batches = batches_fn(args.steps)
    runs = {"plain loop": lambda: plain_loop(batches, model_fn)[1],
            **{name: (lambda c=config: fit_steps(batches, *c, model_fn)) for name, config in CONFIGURATIONS.items()}}
    model_type = type(model_fn(0))
    measure = ((lambda run: torch_p10(run, model_type, len(batches))) if args.torch_calls
               else (lambda run: (run(), None)))
    for run in runs.values():
        measure(run)  # warm up
    rounds: dict[str, list] = {name: [] for name in runs}  # each round's step p10, us
    torch_rounds: dict[str, list] = {name: [] for name in runs}  # each round's p10 of the steps' torch calls, us
    names = list(runs)
    for i in range(args.repeats):
        for name in names[i % len(names):] + names[:i % len(names)]:
            steps, in_torch = measure(runs[name])
            rounds[name].append(p10(steps) * 1e6)
            if in_torch is not None:
                torch_rounds[name].append(in_torch * 1e6)
    parts = differences(rounds)
    torch_parts = differences(torch_rounds) if args.torch_calls else None
    p10s = {"plain loop": statistics.median(rounds["plain loop"])}
    for before, name in zip(names, names[1:]):
        p10s[name] = p10s[before] + parts[name]  # (the plain loop's median step plus the parts up to here)
    result = {"benchmark": "step_profile", "workload": args.workload, "steps": args.steps, "repeats": args.repeats,
              "step_p10_us": p10s, "parts_us": parts, "rounds_step_p10_us": rounds,
              "torch_calls_parts_us": torch_parts,
              "rounds_torch_calls_p10_us": torch_rounds if args.torch_calls else None, "torch": torch.__version__,
              "python": platform.python_version(), "processor": processor()}
    name = "step_profile" if args.workload == "mlp" else f"step_profile_{args.workload}"
    out = Path(__file__).parent / "results" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"{result['processor']}; torch {torch.__version__}, one thread; {args.workload}: {args.repeats} rounds of "
          f"{args.steps} steps, median over the rounds of each round's step p10 differences")
    print(f"{'plain loop':22} {p10s['plain loop']:7.1f} us")
    for name, part in parts.items():
        split = (f"; torch's calls {torch_parts[name]:+.1f} us, the rest {part - torch_parts[name]:+.1f}"
                 if torch_parts else "")
        print(f"{'+ ' + name:22} {part:+7.1f} us  (step {p10s[name]:.1f} us, "
              f"{p10s[name] / p10s['plain loop']:.3f}x{split})")
    print(f"saved to {out}")


if __name__ == "__main__":
    main()

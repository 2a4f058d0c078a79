"""Overhead of Trainer.fit over a plain PyTorch loop, with the trace 'all' and with it off.

The same MLP (784-256-10), data (pre-batched, 64 per batch), optimizer (SGD, momentum 0.9) and
600 steps on one torch thread: as a plain loop, and as ``Trainer.fit`` with 10 algorithms that
each match one event of the step (no ``writes`` declared: each call is watched for changes),
once with the full trace ('all') and once with it off. Runs are interleaved in one process, in
rounds of three whose order rotates from round to round, so a slow stretch of the machine weighs
on all alike. The ratio is the minimum of the fits over the minimum of the plain loops; the
median of the rounds' own ratios is printed beside it, as a check on noise.

Whole-run times move by several percent on a shared machine, more than the overhead measured, so
the step times are compared too: the plain loop stamps each step, and so does the fit's data (a
clock read as each batch is taken), and the 10th percentile of several thousand steps is far
steadier than a minimum of seven runs. Each round's 10th percentile is also divided by that
round's plain loop's: the mean of those paired ratios, with its 95% t-interval, says how sure
the comparison is (a target inside the interval is not told apart from the measured ratio;
``step_profile.py`` splits the step into its parts). The trace also tells how much of a step is
spent inside the engine's events (running, timing and recording the algorithms). Writes
benchmarks/results/trainer_overhead.json.

    python benchmarks/trainer_overhead.py [--repeats 7] [--steps 600]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from composer_lab import Algorithm, Event, Trainer
from composer_lab.explore.stats import paired

STEP_EVENTS = (Event.BATCH_START, Event.BEFORE_TRAIN_BATCH, Event.BEFORE_FORWARD, Event.AFTER_FORWARD,
               Event.BEFORE_LOSS, Event.AFTER_LOSS, Event.BEFORE_BACKWARD, Event.AFTER_BACKWARD,
               Event.AFTER_TRAIN_BATCH, Event.BATCH_END)


class Touch(Algorithm):
    """Matches one event; applying it does nothing (the cost measured is the machinery's)."""

    def __init__(self, event: Event) -> None:
        self.event = event
        self.events = frozenset({event})  # as library algorithms do: match is asked only here

    def match(self, event, state) -> bool:
        return event is self.event

    def apply(self, event, state, logger) -> None:
        return None


TRACES = ("all", "off")
"""The trace levels each round fits the trainer with."""


def make_batches(steps: int, size: int = 64, features: int = 784, classes: int = 10) -> list:
    """``steps`` batches of ``size`` random inputs of ``features`` values and their labels among
    ``classes``, the same each run."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(steps * size, features, generator=gen)
    y = torch.randint(0, classes, (steps * size,), generator=gen)
    return list(zip(x.split(size), y.split(size)))


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def make_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def plain_loop(batches: list, model_fn: Callable[[int], nn.Module] = make_model) -> tuple[float, list]:
    """The run's time and each step's time (a clock read per step: about 50 ns of 1 ms), training ``model_fn(0)``."""
    model = model_fn(0)
    optimizer = make_optimizer(model)
    loss_fn = nn.functional.cross_entropy
    stamps = [time.perf_counter()]
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        stamps.append(time.perf_counter())
    return stamps[-1] - stamps[0], [b - a for a, b in zip(stamps, stamps[1:])]


class Stamped:
    """The batches, each stamped with the clock as the trainer takes it (as the plain loop stamps its steps)."""

    def __init__(self, batches: list) -> None:
        self.batches, self.stamps = batches, []

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        stamp = self.stamps.append
        for batch in self.batches:
            stamp(time.perf_counter())
            yield batch


def make_trainer(batches: Any, trace: str = "all") -> Trainer:
    model = make_model(0)
    return Trainer(model, batches, f"{len(batches)}ba", loss_fn=nn.functional.cross_entropy,
                   optimizers=make_optimizer(model), algorithms=[Touch(e) for e in STEP_EVENTS],
                   device="cpu", trace=trace, progress_bar=False)


def trainer_fit(batches: list, trace: str = "all") -> tuple[float, list, list]:
    """The run's time, each step's time (from one batch taken to the next) and, with the trace
    on, each step's time inside the engine's events (a step's events run from one
    BEFORE_DATALOADER to the next)."""
    data = Stamped(batches)
    trainer = make_trainer(data, trace)
    start = time.perf_counter()
    trainer.fit()
    elapsed = time.perf_counter() - start
    steps = [b - a for a, b in zip(data.stamps, data.stamps[1:])]
    if trace == "off":
        return elapsed, steps, []
    calls = trainer.trace.invocations
    assert calls["matched"].sum() == 10 * len(batches), "every algorithm must run once per step"
    events = trainer.trace.events
    step = (events["event"] == "before_dataloader").cumsum()
    in_events = events.groupby(step)["duration"].sum().tolist()[1:-1]  # (before the first step: fit_start...)
    return elapsed, steps, in_events


def p10(values: list) -> float:
    return statistics.quantiles(values, n=10)[0]


def bytecodes_per_step(run, batches: list) -> float:
    """Python bytecodes executed per step by ``run``, counted with an opcode tracer over 50 and
    100 steps (the difference leaves out set-up): a figure that machine noise cannot move
    (torch's C++ work is not in it; its Python is). A proxy, not a cost: bytecodes differ in
    price (a specialised attribute read is cheap, a call into C that looks names up is not), so
    confirm a change that lowers it with timings or an instruction count."""
    counts = []
    for steps in (50, 100):
        count = 0

        def tracer(frame, event, arg):
            nonlocal count
            frame.f_trace_opcodes = True
            if event == "opcode":
                count += 1
            return tracer

        sys.settrace(tracer)
        try:
            run(batches[:steps])
        finally:
            sys.settrace(None)
        counts.append(count)
    return (counts[1] - counts[0]) / 50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=600)
    args = parser.parse_args()
    torch.set_num_threads(1)
    batches = make_batches(args.steps)
    runs = {"plain": lambda b=batches: plain_loop(b) + ([],),
            **{trace: lambda b=batches, t=trace: trainer_fit(b, t) for trace in TRACES}}
    for run in runs.values():
        run(batches[:50])  # warm up every path
    times, steps, in_events, round_p10 = ({name: [] for name in runs} for _ in range(4))
    for i in range(args.repeats):
        order = list(runs)[i % len(runs):] + list(runs)[:i % len(runs)]
        for name in order:
            elapsed, step_times, inside = runs[name]()
            times[name].append(elapsed), steps[name].extend(step_times), in_events[name].extend(inside)
            round_p10[name].append(p10(step_times))
    counted = (batches * (100 // len(batches) + 1))[:100]
    bytecodes = {"plain": bytecodes_per_step(plain_loop, counted),
                 **{trace: bytecodes_per_step(lambda b, t=trace: make_trainer(b, t).fit(), counted)
                    for trace in TRACES}}
    plain_p10 = p10(steps["plain"])
    result = {"benchmark": "trainer_overhead", "steps": args.steps, "repeats": args.repeats,
              "plain_s": times["plain"], "plain_min_s": min(times["plain"]), "plain_step_p10_us": plain_p10 * 1e6,
              "plain_bytecodes_per_step": bytecodes["plain"]}
    for trace in TRACES:
        ratios = paired([f / p - 1 for f, p in zip(round_p10[trace], round_p10["plain"])])
        result[f"trace_{trace}"] = {
            "trainer_s": times[trace], "trainer_min_s": min(times[trace]),
            "ratio": min(times[trace]) / min(times["plain"]),
            "median_round_ratio": statistics.median(f / p for f, p in zip(times[trace], times["plain"])),
            "per_step_overhead_us": (min(times[trace]) - min(times["plain"])) / args.steps * 1e6,
            "trainer_step_p10_us": p10(steps[trace]) * 1e6, "step_p10_ratio": p10(steps[trace]) / plain_p10,
            "paired_p10_ratio": 1 + ratios.mean, "paired_p10_ratio_ci95": [1 + ratios.ci_low, 1 + ratios.ci_high],
            "in_events_p10_us": p10(in_events[trace]) * 1e6 if in_events[trace] else None,
            "trainer_bytecodes_per_step": bytecodes[trace]}
    result.update(torch=torch.__version__, python=platform.python_version(), machine=platform.machine(),
                  processor=processor())
    out = Path(__file__).parent / "results" / "trainer_overhead.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"{result['processor']}; torch {torch.__version__}, one thread; {args.steps} steps x {args.repeats}")
    print(f"plain loop   {min(times['plain']) * 1e3:8.1f} ms  (min of {args.repeats}), "
          f"step p10 {plain_p10 * 1e6:.1f} us,"
          f" {bytecodes['plain']:.0f} bytecodes per step")
    for trace in TRACES:
        r = result[f"trace_{trace}"]
        inside = f"; inside the engine's events {r['in_events_p10_us']:.1f} us" if r["in_events_p10_us"] else ""
        low, high = r["paired_p10_ratio_ci95"]
        print(f"trace {trace:3}    {r['trainer_min_s'] * 1e3:8.1f} ms: {r['ratio']:.3f}x by minima "
              f"({r['per_step_overhead_us']:.1f} us per step; rounds' median {r['median_round_ratio']:.3f}x), "
              f"step p10 {r['trainer_step_p10_us']:.1f} us: {r['step_p10_ratio']:.3f}x (paired by round "
              f"{r['paired_p10_ratio']:.3f}x, 95% CI {low:.3f}-{high:.3f}){inside}; "
              f"{r['trainer_bytecodes_per_step']:.0f} bytecodes per step "
              f"(+{r['trainer_bytecodes_per_step'] - bytecodes['plain']:.0f})")
    print(f"saved to {out}")


def processor() -> str:
    """The CPU's model name (Linux), else the platform's word for it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    main()

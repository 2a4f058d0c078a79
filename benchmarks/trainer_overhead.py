"""Overhead of Trainer.fit over a plain PyTorch loop.

The same MLP (784-256-10), data (pre-batched, 64 per batch), optimizer (SGD, momentum 0.9) and
600 steps on one torch thread: once as a plain loop, once as ``Trainer.fit`` with 10 algorithms
that each match one event of the step and the full trace ('all'). Runs are interleaved in one
process, in pairs (a plain loop and a fit, the order alternating from pair to pair, so a slow
stretch of the machine weighs on both alike). The ratio is the minimum of the fits over the
minimum of the plain loops; the median of the pairs' own ratios is printed beside it, as a check
on noise.

Whole-run times move by several percent on a shared machine, more than the overhead measured, so
the step times are compared too: the plain loop stamps each step, the fit's trace has its own
(each step starts at BEFORE_DATALOADER), and the 10th percentile of several thousand steps is
far steadier than a minimum of seven runs. The trace also tells how much of a step is spent
inside the engine's events (running, timing and recording the algorithms). Writes
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

import torch
from torch import nn

from composer_lab import Algorithm, Event, Trainer

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


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def make_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def plain_loop(batches: list) -> tuple[float, list]:
    """The run's time and each step's time (a clock read per step: about 50 ns of 1 ms)."""
    model = make_model(0)
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


def make_trainer(batches: list) -> Trainer:
    model = make_model(0)
    return Trainer(model, batches, f"{len(batches)}ba", loss_fn=nn.functional.cross_entropy,
                   optimizers=make_optimizer(model), algorithms=[Touch(e) for e in STEP_EVENTS],
                   device="cpu", trace="all", progress_bar=False)


def trainer_fit(batches: list) -> tuple[float, list, list]:
    """The run's time, each step's time and each step's time inside the engine's events (both
    from the trace: a step runs from one BEFORE_DATALOADER to the next)."""
    trainer = make_trainer(batches)
    start = time.perf_counter()
    trainer.fit()
    elapsed = time.perf_counter() - start
    calls = trainer.trace.invocations
    assert calls["matched"].sum() == 10 * len(batches), "every algorithm must run once per step"
    events = trainer.trace.events
    step = (events["event"] == "before_dataloader").cumsum()
    starts = events["t_start"][events["event"] == "before_dataloader"].tolist()
    in_events = events.groupby(step)["duration"].sum().tolist()[1:-1]  # (before the first step: fit_start...)
    return elapsed, [b - a for a, b in zip(starts, starts[1:])], in_events


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
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(args.steps * 64, 784, generator=gen)
    y = torch.randint(0, 10, (args.steps * 64,), generator=gen)
    batches = list(zip(x.split(64), y.split(64)))
    plain_loop(batches[:50]), trainer_fit(batches[:50])  # warm up both paths
    plain, fit, plain_steps, fit_steps, in_events = [], [], [], [], []

    def run_plain() -> None:
        elapsed, steps = plain_loop(batches)
        plain.append(elapsed), plain_steps.extend(steps)

    def run_fit() -> None:
        elapsed, steps, inside = trainer_fit(batches)
        fit.append(elapsed), fit_steps.extend(steps), in_events.extend(inside)

    for i in range(args.repeats):
        for run in (run_plain, run_fit) if i % 2 == 0 else (run_fit, run_plain):
            run()
    ratio = min(fit) / min(plain)
    step_ratio = p10(fit_steps) / p10(plain_steps)
    counted = (batches * (100 // len(batches) + 1))[:100]
    plain_ops = bytecodes_per_step(plain_loop, counted)
    fit_ops = bytecodes_per_step(lambda steps: make_trainer(steps).fit(), counted)
    pair_ratios = [f / p for f, p in zip(fit, plain)]
    result = {"benchmark": "trainer_overhead", "steps": args.steps, "repeats": args.repeats,
              "plain_s": plain, "trainer_s": fit, "plain_min_s": min(plain), "trainer_min_s": min(fit),
              "ratio": ratio, "median_pair_ratio": statistics.median(pair_ratios),
              "per_step_overhead_us": (min(fit) - min(plain)) / args.steps * 1e6,
              "plain_step_p10_us": p10(plain_steps) * 1e6, "trainer_step_p10_us": p10(fit_steps) * 1e6,
              "step_p10_ratio": step_ratio, "in_events_p10_us": p10(in_events) * 1e6,
              "plain_bytecodes_per_step": plain_ops, "trainer_bytecodes_per_step": fit_ops,
              "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine()}
    out = Path(__file__).parent / "results" / "trainer_overhead.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"plain loop   {min(plain) * 1e3:8.1f} ms  (min of {args.repeats}: {[round(t * 1e3, 1) for t in plain]})")
    print(f"Trainer.fit  {min(fit) * 1e3:8.1f} ms  (min of {args.repeats}: {[round(t * 1e3, 1) for t in fit]})")
    print(f"ratio {ratio:.3f}x  ({result['per_step_overhead_us']:.1f} us per step; median of the pairs' ratios "
          f"{result['median_pair_ratio']:.3f}x); saved to {out}")
    print(f"per step (10th percentile of {len(plain_steps)} steps each): plain loop {p10(plain_steps) * 1e6:.1f} us, "
          f"Trainer.fit {p10(fit_steps) * 1e6:.1f} us: {step_ratio:.3f}x; inside the engine's events "
          f"{p10(in_events) * 1e6:.1f} us of the step")
    print(f"Python bytecodes per step (noise-free): plain loop {plain_ops:.0f}, "
          f"Trainer.fit {fit_ops:.0f} (+{fit_ops - plain_ops:.0f})")


if __name__ == "__main__":
    main()

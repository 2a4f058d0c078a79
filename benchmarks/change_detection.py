"""What the trace's change detection costs per step, against the model's size, before and after.

For MLPs of 6, 162 and 322 parameter tensors (Linear layers 16 wide, on 3x8x8 images pooled to
4x4), ``Trainer.fit`` with trace 'all' and the default callbacks (progress bar on) runs, in turn:

- ``user undeclared``: 10 trivial algorithms, one per event of the step, with no ``writes``;
- ``user declared``: the same with ``writes = frozenset()``;
- ``library``: 10 library algorithms that each run every step (Selective Backprop, RandomSubset,
  LabelSmoothing, MixUp, CutMix, CutOut twice, GradientClipping, ProgressiveResizing, EMA);

and a plain PyTorch loop on the same model and data. Two figures per run:

- ``engine``: the engine's own time per step, from the trace: the events' durations minus the
  bodies of the calls in them (median over the steps);
- ``extra``: a step's time over the plain loop's (10th percentiles of the step times); for
  ``library`` it includes the algorithms' own work (the batch is halved twice, for one).

And a control, ``control declared``: the plain loop on the model of each size, with, at each
point where the trainer fires an event, an engine whose State holds the 4-tensor model (the
``user declared`` algorithms, the progress bar) fire it. Its work is the same at every size, so
what its time grows by is what the machine charges any code run right after a model-sized
forward, backward or optimizer step (caches), not the engine's cost growing with the model. Both
``user`` rows' growth is also printed over the control's: the growth that is the engine's.

Each tree runs in a subprocess of its own, its directory first on PYTHONPATH (``--after``: the tree
this file is in by default; ``--before``: ``/tmp/before``), the trees alternating repeat by
repeat so that a slow stretch of the shared machine weighs on both; the figure kept is the median
over the repeats. In the old tree ``writes`` means nothing: both ``user`` rows are undeclared there.
Writes benchmarks/results/change_detection.json.

    python benchmarks/change_detection.py [--before /tmp/before] [--repeats 5] [--steps 150]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

TENSORS = (6, 162, 322)
KINDS = ("user undeclared", "user declared", "library", "control declared")
HERE = Path(__file__).resolve().parent


# -- the worker: one tree, every size and kind once -------------------------------------------------
def worker(steps: int) -> list[dict]:
    """Run the plain loop and the three kinds for each size in this process's tree; one row each."""
    import torch
    from torch import nn

    from composer_lab import Algorithm, Engine, Event, State, Trainer
    from composer_lab import algorithms as lib
    from composer_lab.trainer.progress import ProgressBar

    torch.set_num_threads(1)
    step_events = (Event.BATCH_START, Event.BEFORE_TRAIN_BATCH, Event.BEFORE_FORWARD, Event.AFTER_FORWARD,
                   Event.BEFORE_LOSS, Event.AFTER_LOSS, Event.BEFORE_BACKWARD, Event.AFTER_BACKWARD,
                   Event.AFTER_TRAIN_BATCH, Event.BATCH_END)

    class Touch(Algorithm):
        """Runs at one event and does nothing (the cost measured is the machinery's)."""

        def __init__(self, event: Event) -> None:
            self.events = frozenset({event})

        def apply(self, event, state, logger) -> None:
            return None

    class DeclaredTouch(Touch):
        writes = frozenset()

    def library() -> list:
        always = dict(start=0.0, end=1.0, interrupt=0)
        return [lib.SelectiveBackprop(**always, scale_factor=0.5), lib.RandomSubset(**always),
                lib.LabelSmoothing(), lib.MixUp(num_classes=4), lib.CutMix(num_classes=4), lib.CutOut(),
                lib.CutOut(), lib.GradientClipping(), lib.EMA(half_life="10ba"),
                lib.ProgressiveResizing(delay_fraction=0.0, finetune_fraction=0.0, size_increment=2)]

    algorithms = {"user undeclared": lambda: [Touch(e) for e in step_events],
                  "user declared": lambda: [DeclaredTouch(e) for e in step_events], "library": library}

    def mlp(tensors: int) -> nn.Module:
        torch.manual_seed(0)
        hidden = [nn.Linear(16, 16) for _ in range(tensors // 2 - 2)]
        return nn.Sequential(nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(48, 16), *hidden, nn.Linear(16, 4))

    gen = torch.Generator().manual_seed(0)
    batches = list(zip(torch.rand(steps * 32, 3, 8, 8, generator=gen).split(32),
                       torch.randint(0, 4, (steps * 32,), generator=gen).split(32)))

    def plain(tensors: int) -> list[float]:
        model = mlp(tensors)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        stamps = [time.perf_counter()]
        for x, y in batches:
            optimizer.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            stamps.append(time.perf_counter())
        return [b - a for a, b in zip(stamps, stamps[1:])]

    def fit(tensors: int, kind: str) -> tuple[list[float], list[float]]:
        return control(tensors) if kind == "control declared" else train(tensors, kind)

    def train(tensors: int, kind: str) -> tuple[list[float], list[float]]:
        model = mlp(tensors)
        trainer = Trainer(model, batches, f"{steps}ba", loss_fn=nn.functional.cross_entropy,
                          optimizers=torch.optim.SGD(model.parameters(), lr=0.01), algorithms=algorithms[kind](),
                          device="cpu", trace="all", seed=0)
        trainer.fit()
        return per_step(trainer.trace)

    def control(tensors: int) -> tuple[list[float], list[float]]:
        """The plain loop on this size's model, an engine on a 4-tensor State firing the trainer's events."""
        model, small = mlp(tensors), mlp(4)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        state = State(small, f"{steps}ba", optimizers=torch.optim.SGD(small.parameters(), lr=0.01),
                      algorithms=algorithms["user declared"](), callbacks=[ProgressBar()])
        engine = Engine(state)
        run, E = engine.run_event, Event
        with getattr(engine, "watching", getattr(engine, "running", contextlib.nullcontext))():  # (older trees)
            run(E.INIT), run(E.FIT_START)
            for x, y in batches:
                run(E.BEFORE_DATALOADER)
                state.batch = (x, y)
                run(E.AFTER_DATALOADER), run(E.BATCH_START), run(E.BEFORE_TRAIN_BATCH)
                optimizer.zero_grad(set_to_none=True)
                run(E.BEFORE_FORWARD)
                state.outputs = model(x)
                run(E.AFTER_FORWARD), run(E.BEFORE_LOSS)
                state.loss = nn.functional.cross_entropy(state.outputs, y)
                run(E.AFTER_LOSS), run(E.BEFORE_BACKWARD)
                state.loss.backward()
                run(E.AFTER_BACKWARD), run(E.AFTER_TRAIN_BATCH)
                optimizer.step()
                state.timestamp = state.timestamp.to_next_batch(len(x))
                run(E.BATCH_END), run(E.BATCH_CHECKPOINT)
            run(E.FIT_END)
        engine.close()
        return per_step(engine.trace)

    return measure(plain, fit)


def per_step(trace: Any) -> tuple[list[float], list[float]]:
    """The engine's own time in each step (events minus call bodies) and the steps' times."""
    events, calls = trace.events, trace.invocations
    step = (events["event"] == "before_dataloader").cumsum()
    bodies = calls.groupby("seq")["duration"].sum()
    own = events["duration"] - events["seq"].map(bodies).fillna(0.0)
    engine = own.groupby(step).sum().tolist()[1:-1]  # (before the first step: init, fit_start...)
    starts = events["t_start"][events["event"] == "before_dataloader"].tolist()
    return engine, [b - a for a, b in zip(starts, starts[1:])]


def measure(plain: Any, fit: Any) -> list[dict]:
    """Each size: the plain loop's step p10, then each kind's engine time and extra time a step."""
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # two mixers at one event
        for tensors in TENSORS:
            fit(tensors, "library")  # warm up
            plain_p10 = p10(plain(tensors))
            for kind in KINDS:
                engine, steps_s = fit(tensors, kind)
                rows.append({"tensors": tensors, "kind": kind, "engine_us": statistics.median(engine) * 1e6,
                             "extra_us": (p10(steps_s) - plain_p10) * 1e6, "plain_us": plain_p10 * 1e6})
    return rows


def p10(values: list) -> float:
    return statistics.quantiles(values, n=10)[0]


# -- the driver: trees alternating, repeat by repeat -------------------------------------------------
def run_tree(tree: Path, steps: int) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, __file__, "--worker", "--steps", str(steps)], env=env, cwd=tree,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="/tmp/before", help="the old tree (a checkout of the repository)")
    parser.add_argument("--after", default=str(HERE.parent), help="the new tree (default: this one)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.steps)))
        return
    trees = {"before": Path(args.before), "after": Path(args.after)}
    runs: dict[str, list] = {name: [] for name in trees}
    for i in range(args.repeats):
        for name in (("before", "after") if i % 2 == 0 else ("after", "before")):
            runs[name].append(run_tree(trees[name], args.steps))
    table = []
    for j, row in enumerate(runs["after"][0]):
        entry = {"tensors": row["tensors"], "kind": row["kind"]}
        for name in trees:
            for figure in ("engine_us", "extra_us", "plain_us"):
                entry[f"{figure}_{name}"] = statistics.median(run[j][figure] for run in runs[name])
        table.append(entry)
    print(f"{'kind':16} {'tensors':>7}  {'engine us/step':>22}  {'extra us/step over plain':>26}")
    print(f"{'':16} {'':>7}  {'before':>10} {'after':>11}  {'before':>12} {'after':>13}")
    for e in table:
        print(f"{e['kind']:16} {e['tensors']:7d}  {e['engine_us_before']:10.0f} {e['engine_us_after']:11.0f}  "
              f"{e['extra_us_before']:12.0f} {e['extra_us_after']:13.0f}")
    ratios = {}
    for kind in KINDS:
        engine = [e["engine_us_after"] for e in table if e["kind"] == kind]
        ratios[kind] = engine[-1] / engine[0]
        print(f"after, {kind}: engine time at {TENSORS[-1]} over {TENSORS[0]} tensors: {ratios[kind]:.2f}x")
    over_control = {kind: ratios[kind] / ratios["control declared"] for kind in ("user undeclared", "user declared")}
    for kind, ratio in over_control.items():
        print(f"after, {kind} over the control (the growth that is the engine's, not the machine's): {ratio:.2f}x")
    import torch
    result = {"benchmark": "change_detection", "trees": {k: str(v) for k, v in trees.items()},
              "steps": args.steps, "repeats": args.repeats, "rows": table, "ratios_after": ratios,
              "over_control_after": over_control,
              "runs": runs, "torch": torch.__version__, "python": platform.python_version(),
              "machine": platform.machine()}
    out = HERE / "results" / "change_detection.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"saved to {out}")


if __name__ == "__main__":
    main()

"""Instructions per training step, counted by valgrind's callgrind: a figure that machine noise cannot move.

The workload of ``trainer_overhead.py`` (MLP 784-256-10, batch 64, SGD with momentum, one thread) as
the plain loop and in the configurations of ``step_profile.py``: ``Trainer.fit`` with no algorithm,
trace off (the trainer's loop); with the 10 no-op algorithms, trace off (events and calls); the
same declaring ``writes = frozenset()``, trace 'all' (the trace); undeclared (watching the model).
Each runs in a process of its own under ``valgrind --tool=callgrind``, which counts only inside two
fits, of 50 and of 150 steps, built beforehand (the count is switched on inside
``operator.methodcaller`` and ``functools.reduce`` calls wrapped around them, whose inclusive
counts callgrind reports); the difference over 100 steps leaves out each fit's start and end. The
garbage collector's old objects are frozen first, so a full collection that falls in one fit and
not the other does not count. The parts of the step are the differences between successive
configurations: ``step_profile.py``'s profile, counted exactly. The progress bar is left out: it
redraws by the wall clock (tqdm, every 0.1 s), and under valgrind a step takes 50 times as long,
so its count here would be many times its share of a real step.

Instructions are not time: an instruction of torch's kernels takes a fraction of a cycle, one of
the interpreter's more, and a cache miss costs no instruction at all. The counts decide whether a
change of the Python on the hot path does less work where a timed A/B cannot tell 1%, down to the
count's own spread: two counts of one tree differ by 1,000-3,000 instructions a step (0.04%), so
a smaller cut needs several counts. ``trainer_overhead.py`` says what a cut is worth in time.
(Counting bytecodes, as ``trainer_overhead.py`` also does, misleads for C calls:
``all(map(operator.is_, ...))`` is fewer bytecodes than five ``is`` tests and three times the
instructions.) Needs valgrind; about seven minutes a configuration, two at a time. Writes
benchmarks/results/instructions.json.

    python benchmarks/instructions.py [--jobs 2] [--configs plain trainer off declared all]
"""

from __future__ import annotations

import argparse
import gc
import json
import operator
import platform
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from functools import reduce
from pathlib import Path

import torch
from torch import nn

CONFIGS = {"plain": "plain loop", "trainer": "trainer loop", "off": "events and calls", "declared": "trace 'all'",
           "all": "watching the model"}
"""Each configuration's short name and its name in ``step_profile.CONFIGURATIONS`` (the profile's parts, in order)."""
STEPS = (50, 150)
HERE = Path(__file__).resolve().parent


def worker(config: str) -> None:
    """Build the two fits of ``config``, then run them inside the two counted calls."""
    sys.path.insert(0, str(HERE))
    from step_profile import CONFIGURATIONS
    from trainer_overhead import STEP_EVENTS, make_batches, make_model, make_optimizer

    from composer_lab import Trainer

    torch.set_num_threads(1)
    batches = make_batches(max(STEPS))

    def prepare(steps: int):
        model, data = make_model(0), batches[:steps]
        optimizer = make_optimizer(model)
        if config == "plain":
            return lambda: _plain_loop(data, model, optimizer)
        algorithm, trace, progress_bar = CONFIGURATIONS[CONFIGS[config]]
        trainer = Trainer(model, data, f"{steps}ba", loss_fn=nn.functional.cross_entropy, optimizers=optimizer,
                          algorithms=[algorithm(e) for e in STEP_EVENTS] if algorithm else [], device="cpu",
                          trace=trace, progress_bar=progress_bar)
        return trainer.fit

    prepare(20)()  # every path warmed once
    short, long = prepare(STEPS[0]), prepare(STEPS[1])
    gc.collect()
    gc.freeze()
    operator.methodcaller("__call__")(short)  # counted: callgrind's methodcaller_call
    reduce(lambda _, fit: fit(), [long], None)  # counted: functools_reduce


def _plain_loop(batches: list, model, optimizer) -> None:
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()


def count(config: str, folder: str) -> float:
    """Instructions per step of ``config``: valgrind runs the worker, callgrind_annotate reads the two counts."""
    out = Path(folder) / f"callgrind.{config}"
    subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=methodcaller_call",
                    "--toggle-collect=functools_reduce", f"--callgrind-out-file={out}", sys.executable, __file__,
                    "--worker", config], check=True, capture_output=True)
    report = subprocess.run(["callgrind_annotate", "--inclusive=yes", str(out)], check=True, capture_output=True,
                            text=True).stdout
    counts = {}
    for name in ("methodcaller_call", "functools_reduce"):
        line = next(line for line in report.splitlines() if f":{name} " in line)  # ('... file.c:name [lib]')
        counts[name] = int(re.match(r"\s*([\d,]+)", line).group(1).replace(",", ""))
    return (counts["functools_reduce"] - counts["methodcaller_call"]) / (STEPS[1] - STEPS[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="configurations counted at once (one core each)")
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--worker", choices=CONFIGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker)
    configs = [c for c in CONFIGS if c in args.configs or c == "plain"]
    with tempfile.TemporaryDirectory() as folder, ThreadPoolExecutor(args.jobs) as pool:
        per_step = dict(zip(configs, pool.map(lambda c: count(c, folder), configs)))
    plain = per_step["plain"]
    parts = {CONFIGS[config]: per_step[config] - per_step[before] for before, config in zip(configs, configs[1:])}
    result = {"benchmark": "instructions", "steps": STEPS[1] - STEPS[0], "plain_per_step": plain,
              **{config: {"per_step": n, "over_plain": n - plain, "ratio": n / plain}
                 for config, n in per_step.items() if config != "plain"},
              "parts": parts, "torch": torch.__version__, "python": platform.python_version(),
              "machine": platform.machine()}
    out = HERE / "results" / "instructions.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"instructions per step (callgrind), torch {result['torch']}, Python {result['python']}")
    print(f"{'plain loop':22} {plain:12,.0f}")
    for config, part in zip(configs[1:], parts.values()):
        r = result[config]
        print(f"{'+ ' + CONFIGS[config]:22} {part:+12,.0f}  (step {r['per_step']:,.0f}: +{r['over_plain']:,.0f} over "
              f"the plain loop, {r['ratio']:.4f}x)")
    print(f"saved to {out}")


if __name__ == "__main__":
    main()

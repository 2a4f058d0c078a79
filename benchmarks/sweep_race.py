"""Racing against the full sweep: runs trained and wrong verdicts, on experiments of known effects.

Each scenario sets the true mean of the metric for every order; a run's value is its order's
mean, plus a seed effect shared by every order with that seed (sd 0.03: the initial weights and
the data order), plus the run's own noise (sd 0.003, then 0.004: paired differences of sd
0.0042 and 0.0057, near delta, so that equivalence takes several seeds to show). A race
(delta = 0.005, alpha = 0.05, min_seeds = 3, up to 20 seeds) is driven through
:class:`composer_lab.explore.race.Race`, the
object ``Sweep.race`` drives, on a simulated pool of 2 workers whose runs take a random time
(lognormal), so results arrive out of order as they do on a real pool. The full sweep trains
every order with all 20 seeds.

A verdict is wrong when it contradicts the truth: ``worse`` for an order whose true mean is the
best's, ``equivalent`` for one more than delta from the best's, ``best`` for one more than delta
below it. Reported per scenario: runs trained by the race (150 races on the simulated workers)
and by the full sweep, their ratio; the rate of wrong verdicts among all verdicts given, the
rate of races with any wrong verdict and how often a race ended undecided, over those races and
450 more experiments whose verdicts alone are computed (``decide`` of their results: the
verdicts do not depend on the order runs end in, only the runs trained do).

Then the same once end to end: ``Sweep.race`` and ``Sweep.run`` on an InlineExecutor with a
factory that logs the known value (one training batch per run, so the runs' content is real
but short). Writes benchmarks/results/sweep_race.json.

    python benchmarks/sweep_race.py [--repeats 150] [--verdict-repeats 450] [--run-sd 0.003 0.004] [--end-to-end 2]
"""

from __future__ import annotations

import argparse
import heapq
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.explore.factories, for the end to end run

from composer_lab.explore.race import Race, decide  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "sweep_race.json"
DELTA, ALPHA, MIN_SEEDS, SEEDS, WORKERS = 0.005, 0.05, 3, 20, 2
SEED_SD, RUN_SDS = 0.03, (0.003, 0.004)
SCENARIOS = {
    "2 orders, no effect": [0.0, 0.0],
    "2 orders, one worse by 2 delta": [0.0, -2 * DELTA],
    "3 orders, one tied, one worse by 2 delta": [0.0, 0.0, -2 * DELTA],
    "4 orders: tied, 0.4 delta below, 3 delta below": [0.0, 0.0, -0.4 * DELTA, -3 * DELTA],
    "2 orders, 1 delta apart": [0.0, -DELTA],
    "2 orders, 1.25 delta apart (equivalence just false)": [0.0, -1.25 * DELTA],
}


def experiment(means: list[float], run_sd: float, rng: np.random.Generator) -> pd.DataFrame:
    """The results of every order with every seed: seeds x orders."""
    values = 0.8 + np.add.outer(rng.normal(0, SEED_SD, SEEDS), np.asarray(means)) \
        + rng.normal(0, run_sd, (SEEDS, len(means)))
    orders = [f"order{i}" for i in range(len(means))]
    return pd.DataFrame(values, index=pd.Index(range(SEEDS), name="seed"), columns=orders)


def race_on_workers(table: pd.DataFrame, rng: np.random.Generator) -> tuple[int, pd.Series]:
    """A race over ``table`` on simulated workers: the runs it trained and its verdicts."""
    empty = table * np.nan
    trials = {(o, s): (o, s) for o in table.columns for s in table.index}
    race = Race(empty, trials, "score", list(table.columns), DELTA, ALPHA, MIN_SEEDS)
    clock, running, trained = 0.0, [], 0
    while True:
        while len(running) < WORKERS and (trial := race.next_trial()) is not None:
            heapq.heappush(running, (clock + rng.lognormal(0, 0.3), trial))
            trained += 1
        if not running:
            break
        clock, (order, seed) = heapq.heappop(running)
        race.record({"order": order, "seed": seed, "score": table.loc[seed, order]})
    return trained, race.table.set_index("order")["verdict"]


def wrong(verdicts: pd.Series, means: list[float]) -> int:
    """The verdicts the truth contradicts."""
    truth, best = {f"order{i}": mean for i, mean in enumerate(means)}, max(means)
    contradicted = {"worse": lambda o: truth[o] == best, "equivalent": lambda o: abs(truth[o] - best) > DELTA,
                    "best": lambda o: truth[o] < best - DELTA}
    return sum(1 for o, v in verdicts.items() if v in contradicted and contradicted[v](o))


def scenario(means: list[float], run_sd: float, repeats: int, verdict_repeats: int, seed: int) -> dict:
    """``repeats`` races on simulated workers (runs trained, verdicts), then ``verdict_repeats``
    more experiments whose verdicts alone are counted: they are :func:`decide` of the results,
    whatever order the runs end in, so the workers change only the runs trained."""
    rng = np.random.default_rng(seed)
    races = [race_on_workers(experiment(means, run_sd, rng), rng) for _ in range(repeats)]
    verdicts = [v for _, v in races] + [
        decide(experiment(means, run_sd, rng), DELTA, ALPHA, MIN_SEEDS).set_index("order")["verdict"]
        for _ in range(verdict_repeats)]
    given = sum(int(v.isin(["worse", "equivalent", "best"]).sum()) for v in verdicts)
    full = len(means) * SEEDS
    trained = float(np.mean([t for t, _ in races]))
    return {"true_differences": means, "repeats": repeats, "verdict_repeats": len(verdicts),
            "runs_full_sweep": full, "runs_race_mean": trained, "runs_race_max": int(max(t for t, _ in races)),
            "race_over_full": trained / full,
            "wrong_verdicts_rate": sum(wrong(v, means) for v in verdicts) / max(given, 1),
            "races_with_a_wrong_verdict": float(np.mean([wrong(v, means) > 0 for v in verdicts])),
            "undecided_rate": float(np.mean([(v == "undecided").any() for v in verdicts]))}


def end_to_end(repeats: int, run_sd: float) -> dict:
    """Sweep.race and Sweep.run on one factory of known effects (2 orders, tied), InlineExecutor:
    runs trained, seconds, the race's answer."""
    import functools

    from composer_lab.algorithms import CutOut, MixUp
    from composer_lab.explore import InlineExecutor, Sweep
    from tests.explore.factories import scored

    effects = {"CutOut > MixUp": 0.8, "MixUp > CutOut": 0.8}
    rows = []
    for repeat in range(repeats):
        factory = functools.partial(scored, effects, run_sd)
        with tempfile.TemporaryDirectory() as folder:
            seeds = range(100 * repeat, 100 * repeat + SEEDS)
            sweep = Sweep(factory, [CutOut(), MixUp()], seeds=seeds, metric="score", executor=InlineExecutor(),
                          folder=Path(folder) / "race")
            start = time.perf_counter()
            decision = sweep.race(DELTA, ALPHA, MIN_SEEDS)
            race_seconds = time.perf_counter() - start
            full = Sweep(factory, [CutOut(), MixUp()], seeds=seeds, metric="score", executor=InlineExecutor(),
                         folder=Path(folder) / "full")
            start = time.perf_counter()
            results = full.run()
            full_seconds = time.perf_counter() - start
        rows.append({"race_runs": decision.trained, "full_runs": len(results), "answer": decision.answer,
                     "race_seconds": race_seconds, "full_seconds": full_seconds})
    return {"runs": rows, "race_over_full": sum(r["race_runs"] for r in rows) / sum(r["full_runs"] for r in rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=150, help="races on simulated workers per scenario")
    parser.add_argument("--verdict-repeats", type=int, default=450, help="more experiments per scenario whose "
                        "verdicts alone are counted")
    parser.add_argument("--run-sd", type=float, nargs="+", default=list(RUN_SDS), help="sd of a run's own noise")
    parser.add_argument("--end-to-end", type=int, default=2, help="Sweep.race against Sweep.run, repetitions")
    args = parser.parse_args()
    torch.set_num_threads(1)
    report = {"delta": DELTA, "alpha": ALPHA, "min_seeds": MIN_SEEDS, "seeds": SEEDS, "workers": WORKERS,
              "seed_sd": SEED_SD, "repeats": args.repeats, "verdict_repeats": args.verdict_repeats, "run_sd": {}}
    for run_sd in args.run_sd:
        report["run_sd"][run_sd] = regime = {}
        for i, (name, means) in enumerate(SCENARIOS.items()):
            regime[name] = result = scenario(means, run_sd, args.repeats, args.verdict_repeats, seed=i)
            print(f"run sd {run_sd}, {name}: race {result['runs_race_mean']:.1f} of {result['runs_full_sweep']} runs "
                  f"({result['race_over_full']:.2f}), wrong verdicts {result['wrong_verdicts_rate']:.3f}, races "
                  f"with one {result['races_with_a_wrong_verdict']:.3f}, undecided {result['undecided_rate']:.3f}",
                  flush=True)
    if args.end_to_end:
        report["end_to_end"] = end_to_end(args.end_to_end, args.run_sd[0])
        print(f"end to end: race over full {report['end_to_end']['race_over_full']:.2f}; "
              f"{report['end_to_end']['runs'][0]['answer']}")
    report["machine"] = {"python": platform.python_version(), "torch": torch.__version__}
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()

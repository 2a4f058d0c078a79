"""The scheduler: no more runs handed to an executor than its workers can start (so Stop leaves
only the runs training), every finished run reported, and a local pool broken by a killed
worker replaced: the sweep or race still finishes every trial."""

from __future__ import annotations

import functools
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from composer_lab.algorithms import CutOut, MixUp
from composer_lab.explore import InlineExecutor, Sweep, local_pool
from composer_lab.explore.scheduler import Scheduler, workers_of
from composer_lab.explore.trials import Trial
from tests.explore.factories import dying_once, scored


def trial(seed: int) -> Trial:
    return Trial("A > B", (0, 1), seed, f"A_B__seed{seed}", "")


def test_workers_of_each_kind_of_executor():
    assert workers_of(InlineExecutor()) == 1
    pool = local_pool(3)
    try:
        assert workers_of(pool) == 3
    finally:
        pool.shutdown()

    class DaskLike:  # what a distributed.Client answers
        def scheduler_info(self):
            return {"workers": {"tcp://a": {"nthreads": 2}, "tcp://b": {"nthreads": 1}}}

    assert workers_of(DaskLike()) == 3


def test_at_most_one_run_per_worker_is_handed_over_and_stop_cancels_the_rest():
    busy, most, lock = [0], [0], threading.Lock()
    stop, reported = threading.Event(), []

    def train(seed: int) -> dict:
        with lock:
            busy[0] += 1
            most[0] = max(most[0], busy[0])
        time.sleep(0.05)
        with lock:
            busy[0] -= 1
        return {"seed": seed}

    handed = []

    def submit(executor, trial):
        handed.append(trial.seed)
        return executor.submit(train, trial.seed)

    def on_result(trial, row):
        reported.append(row["seed"])
        if len(reported) == 3:
            stop.set()

    pending = iter([trial(s) for s in range(20)])
    with ThreadPoolExecutor(2) as pool:  # a stand-in executor of 2 workers (no training here)
        failure = Scheduler(pool, submit, lambda t: None).run(lambda: next(pending, None), on_result, stop)
    assert failure is None and most[0] <= 2
    assert 3 <= len(handed) <= 3 + 2  # after Stop only the runs already training finished
    assert sorted(reported) == sorted(handed)  # and every one of them was reported


TIED = {"CutOut > MixUp": 0.8, "MixUp > CutOut": 0.8}


def scored_sweep(folder, executor, factory=None, seeds=range(4)) -> Sweep:
    factory = factory or functools.partial(scored, TIED, 0.002)
    return Sweep(factory, [CutOut(), MixUp()], seeds=seeds, metric="score", executor=executor, folder=folder)


def test_a_worker_killed_mid_sweep_costs_only_its_run(tmp_path):
    flag = tmp_path / "die"
    flag.touch()
    pool = local_pool(2)
    try:
        sweep = Sweep(functools.partial(dying_once, str(flag)), [CutOut(), MixUp()], seeds=range(3), executor=pool,
                      folder=tmp_path / "sweep")
        reported = []
        results = sweep.run(on_result=reported.append)
    finally:
        pool.shutdown()
    assert not flag.exists(), "no worker was killed"
    assert sweep.pending() == [] and len(results) == 6 and len(reported) == 6
    assert sorted(zip(results["order"], results["seed"])) == sorted((o, s) for o in sweep.labels for s in range(3))


def test_a_worker_killed_mid_race_costs_only_its_run(tmp_path):
    flag = tmp_path / "die"
    flag.touch()
    whole = scored_sweep(tmp_path / "inline", InlineExecutor(), seeds=range(12)).race(0.005)
    pool = local_pool(2)
    try:
        dying = functools.partial(dying_once, str(flag), then=functools.partial(scored, TIED, 0.002))
        raced = scored_sweep(tmp_path / "pool", pool, dying, seeds=range(12)).race(0.005)
    finally:
        pool.shutdown()
    assert not flag.exists(), "no worker was killed"
    assert list(raced.table["verdict"]) == list(whole.table["verdict"]) and raced.answer == whole.answer


def test_a_run_that_kills_its_worker_every_time_fails_the_sweep_with_what_to_do(tmp_path):
    from tests.explore.factories import dying_while

    flag = tmp_path / "die"
    flag.touch()
    pool = local_pool(1)
    try:
        sweep = Sweep(functools.partial(dying_while, str(flag)), [CutOut(), MixUp()], seeds=[0, 1], executor=pool,
                      folder=tmp_path / "sweep")
        with pytest.raises(RuntimeError, match=r"^the run of .* with seed 1 failed \(TerminatedWorkerError: [^\n]*\); "
                                               r"[0-3] of 4 runs finished and are saved in .*: call run\(\) again "
                                               r"to train the rest[^\n]*$"):
            sweep.run()
    finally:
        pool.shutdown()

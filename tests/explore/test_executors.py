"""The default executor, a local process pool: a worker that dies loses no finished run, and the
sweep resumes on its folder. (The pool and a notebook-cell factory: tests/explore/test_dask.py.)"""

from __future__ import annotations

import functools
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from composer_lab.algorithms import CutOut, MixUp
from composer_lab.explore import InlineExecutor, Sweep, local_pool
from composer_lab.explore.trials import run_trial
from tests.explore.factories import dying_while, make_trainer

METRIC = "metrics/eval/Accuracy"


def test_a_worker_that_dies_loses_no_finished_run_and_the_sweep_resumes(tmp_path):
    flag = tmp_path / "die"
    flag.touch()
    factory = functools.partial(dying_while, str(flag))
    sweep = Sweep(factory, [CutOut(), MixUp()], seeds=[0, 1], orders=[(0, 1)], executor=local_pool(1),
                  folder=tmp_path / "sweep")
    with pytest.raises(RuntimeError, match=r"(?s)the run of 'after_dataloader: MixUp > CutOut' with seed 1 failed "
                                           r"\(TerminatedWorkerError: .*; 1 of 2 runs finished and are saved in .*: "
                                           r"call run\(\) again"):
        sweep.run()
    sweep.executor.shutdown()
    assert [t.seed for t in sweep.pending()] == [1]
    flag.unlink()
    pool = local_pool(1)
    try:
        resumed = Sweep(factory, [CutOut(), MixUp()], seeds=[0, 1], orders=[(0, 1)], executor=pool,
                        folder=tmp_path / "sweep").run()
    finally:
        pool.shutdown()
    assert list(resumed["seed"]) == [0, 1]


def test_executors_that_train_several_runs_at_once_in_this_process_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"ThreadPoolExecutor\(max_workers=2\) would train several runs at once in "
                                         r"this process, .*would seed the others: use the default executor "
                                         r"\(executor=None: a local process pool\), a Dask Client whose workers are "
                                         r"processes .*or InlineExecutor\(\)"):
        Sweep(make_trainer, [CutOut(), MixUp()], executor=ThreadPoolExecutor(2), folder=tmp_path)
    Sweep(make_trainer, [CutOut(), MixUp()], executor=ThreadPoolExecutor(1), folder=tmp_path)  # one at a time
    distributed = pytest.importorskip("distributed", reason="the dask extra: pip install composer_lab[dask]")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as \
            cluster, distributed.Client(cluster) as client:
        with pytest.raises(ValueError, match=r"this Dask Client's workers are threads of this process \(2 threads, "
                                             r"processes=False\)"):
            Sweep(make_trainer, [CutOut(), MixUp()], executor=client, folder=tmp_path)


def test_trials_in_one_process_take_turns(tmp_path):
    # What a Dask worker with two threads would do: two trials at once, in one process.
    calls = []

    def factory(algorithms, seed):
        calls.append(("start", seed))
        time.sleep(0.2)  # long enough for the other thread to arrive meanwhile
        calls.append(("built", seed))
        return make_trainer(algorithms, seed)

    sweep = Sweep(factory, [CutOut(), MixUp()], seeds=[0, 1], orders=[(0, 1)], executor=InlineExecutor(),
                  folder=tmp_path)
    threads = [threading.Thread(target=run_trial, args=(factory, sweep.algorithms, trial, str(tmp_path), METRIC))
               for trial in sweep.trials()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [what for what, _ in calls] == ["start", "built", "start", "built"]  # never two at once
    assert len(sweep.results) == 2


"""The default executor, a local process pool: a worker that dies loses no finished run, and the
sweep resumes on its folder. (The pool and a notebook-cell factory: tests/explore/test_dask.py.)"""

from __future__ import annotations

import functools

import pytest

from composer_lab.algorithms import LabelSmoothing
from composer_lab.explore import Sweep, local_pool
from tests.explore.factories import dying_while


def test_a_worker_that_dies_loses_no_finished_run_and_the_sweep_resumes(tmp_path):
    flag = tmp_path / "die"
    flag.touch()
    factory = functools.partial(dying_while, str(flag))
    sweep = Sweep(factory, [LabelSmoothing()], seeds=[0, 1], executor=local_pool(1), folder=tmp_path / "sweep")
    with pytest.raises(RuntimeError, match=r"(?s)the run of 'LabelSmoothing' with seed 1 failed \(TerminatedWorker"
                                           r"Error: .*; 1 of 2 runs finished and are saved in .*: call run\(\) again"):
        sweep.run()
    sweep.executor.shutdown()
    assert [t.seed for t in sweep.pending()] == [1]
    flag.unlink()
    pool = local_pool(1)
    try:
        resumed = Sweep(factory, [LabelSmoothing()], seeds=[0, 1], executor=pool, folder=tmp_path / "sweep").run()
    finally:
        pool.shutdown()
    assert list(resumed["seed"]) == [0, 1]

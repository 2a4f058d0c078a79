"""Sweeps on a real Dask cluster (a scheduler and two worker processes on 127.0.0.1) and in the
default local pool: one (order, seed) trains to the same metric on both; a worker killed
mid-sweep loses no result and duplicates none; a factory defined in a notebook cell travels."""

from __future__ import annotations

import functools
import os
import pickle
import signal
from concurrent.futures import ProcessPoolExecutor

import pandas as pd
import pytest

from composer_lab.algorithms import CutOut, MixUp
from composer_lab.cli import parse_algorithms
from composer_lab.explore import InlineExecutor, Sweep, local_pool, orderings
from tests.explore.factories import scored, slow

distributed = pytest.importorskip("distributed", reason="the dask extra: pip install composer_lab[dask]")

METRIC = "metrics/eval/Accuracy"
NOTEBOOK_CELL = """
from tests.explore.factories import make_trainer as _make

def make_trainer(algorithms, seed):
    return _make(algorithms, seed, batches="5ba")
"""


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        yield client


def notebook_factory():
    """A factory defined the way a notebook cell defines one: in ``__main__``, not importable."""
    cell = {"__name__": "__main__"}
    exec(NOTEBOOK_CELL, cell)
    return cell["make_trainer"]


def test_a_notebook_cell_factory_trains_alike_in_the_local_pool_and_on_dask(client, tmp_path):
    factory = notebook_factory()
    with pytest.raises(pickle.PicklingError):
        pickle.dumps(factory)  # what the standard library's process pool would send, and cannot
    with pytest.raises(TypeError, match=r"ProcessPoolExecutor pickles functions by name"):
        Sweep(factory, [CutOut(), MixUp()], seeds=[3], executor=ProcessPoolExecutor(1), folder=tmp_path / "std")
    pool = local_pool(1)
    try:
        local = Sweep(factory, [CutOut(), MixUp()], seeds=[3], orders=[(1, 0)], executor=pool,
                      folder=tmp_path / "local").run()
    finally:
        pool.shutdown()
    dask = Sweep(factory, [CutOut(), MixUp()], seeds=[3], orders=[(1, 0)], executor=client,
                 folder=tmp_path / "dask").run()
    assert list(local["order"]) == list(dask["order"]) == ["after_dataloader: CutOut > MixUp"]  # list MixUp > CutOut
    assert local[METRIC].iloc[0] == pytest.approx(dask[METRIC].iloc[0], abs=1e-6)
    assert local["loss/train"].iloc[0] == pytest.approx(dask["loss/train"].iloc[0], rel=1e-5)


def test_a_worker_killed_mid_sweep_loses_no_result(client, tmp_path):
    pids = client.run(os.getpid)
    killed = {}

    def kill_a_busy_worker(row):
        if killed:
            return
        busy = [worker for worker, keys in client.processing().items() if keys]
        killed[busy[0]] = client.processing()[busy[0]]
        os.kill(pids[busy[0]], signal.SIGKILL)

    sweep = Sweep(functools.partial(slow, 1.0), [CutOut(), MixUp()], seeds=range(4), executor=client,
                  folder=tmp_path)
    results = sweep.run(on_result=kill_a_busy_worker)
    assert killed, "no worker was busy to kill"
    pairs = list(zip(results["order"], results["seed"]))
    assert sorted(pairs) == sorted((o, s) for o in sweep.labels for s in range(4))
    assert len(list((tmp_path / "rows").glob("*.json"))) == 8 and not list((tmp_path / "rows").glob(".*"))
    assert sweep.pending() == []


def test_the_sweep_command_trains_on_a_scheduler(client, tmp_path, capsys):
    from composer_lab.cli import main

    folder = tmp_path / "sweep"
    assert main(["sweep", "--algorithms", "cutout,mixup,label_smoothing", "--seeds", "2", "--epochs", "1",
                 "--scheduler", client.scheduler.address, "--folder", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "2 distinct orders x 2 seeds, 4 runs to train" in out
    written = {p.name for p in folder.iterdir()}
    assert {"results.parquet", "ranking.csv", "ranking.png", "commutation.parquet"} <= written
    ranking = pd.read_csv(folder / "ranking.csv")
    assert set(ranking["order"]) == set(orderings(parse_algorithms("cutout,mixup,label_smoothing"))["order"])
    assert (ranking["n"] == 2).all() and ranking["order"].iloc[0] in out
    table = pd.read_parquet(folder / "commutation.parquet")
    assert not table[(table["first"] == "MixUp") & (table["second"] == "CutOut")]["commutes"].all()


def test_a_race_on_dask_reaches_the_verdicts_of_a_race_in_this_process(client, tmp_path):
    tied = functools.partial(scored, {"CutOut > MixUp": 0.8, "MixUp > CutOut": 0.8}, 0.002)
    races = [Sweep(tied, [CutOut(), MixUp()], seeds=range(12), metric="score", executor=executor,
                   folder=tmp_path / name).race(0.005) for name, executor in (("dask", client),
                                                                             ("inline", InlineExecutor()))]
    pd.testing.assert_frame_equal(races[0].table, races[1].table)
    assert races[0].answer == races[1].answer and races[0].trained < 24

"""Sweep.to_mlflow: a parent run per sweep folder, a child per (order, seed) with its ranking; a
sweep trained on Dask and one trained in the local pool give the same MLflow content; exported
again, nothing is duplicated."""

from __future__ import annotations

import pytest

from composer_lab.algorithms import CutOut, MixUp
from composer_lab.explore import Sweep, local_pool
from tests.explore.factories import make_trainer
from tests.tracking.test_mlflow_logger import read_back

distributed = pytest.importorskip("distributed", reason="the dask extra: pip install composer_lab[dask]")

pytestmark = pytest.mark.slow
VOLATILE = {"composer_lab.run_id", "run_name"}  # (each run's own id and start time)


def content(uri: str, experiment: str) -> dict:
    """What an experiment holds of an exported sweep, run by run: the parent's parameters, and per
    child (order, seed) its parameters, ranking tags and metric histories (throughput and wall time are timing)."""
    runs, client = read_back(uri, experiment)
    parent = runs[runs["tags.composer_lab.trial"] == "sweep"]
    children = runs[runs["tags.composer_lab.trial"] != "sweep"]
    assert len(parent) == 1 and set(children["tags.mlflow.parentRunId"]) == set(parent["run_id"])
    tags = client.get_run(parent["run_id"].iloc[0]).data.tags
    found = {"parent": {k: v for k, v in tags.items() if k.startswith(("sweep.", "ranking."))}}
    for run_id in children["run_id"]:
        data = client.get_run(run_id).data
        found[(data.params["order"], data.params["seed"])] = {
            "params": {k: v for k, v in data.params.items() if k not in VOLATILE},
            "tags": {k: v for k, v in data.tags.items() if k.startswith("ranking.")},
            "metrics": {name: [(m.step, m.value) for m in client.get_metric_history(run_id, name)]
                        for name in data.metrics if not name.startswith(("throughput", "wall_time"))}}
    return found


def same(a, b) -> bool:
    """Equal, numbers to a relative 1e-5 (a run on another process may differ in the last digits)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    try:
        return float(a) == pytest.approx(float(b), rel=1e-5, nan_ok=True)
    except (TypeError, ValueError):
        return a == b


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        yield client


def test_a_sweep_from_dask_and_from_the_local_pool_give_the_same_mlflow_content_once(client, tmp_path, uri):
    pool = local_pool(1)
    try:
        local = Sweep(make_trainer, [CutOut(), MixUp()], seeds=[0], executor=pool, folder=tmp_path / "local")
        local.run()
    finally:
        pool.shutdown()
    dask = Sweep(make_trainer, [CutOut(), MixUp()], seeds=[0], executor=client, folder=tmp_path / "dask")
    dask.run()
    parent = local.to_mlflow(uri, "local")
    dask.to_mlflow(uri, "dask")
    exported = content(uri, "local")
    assert len(exported) == 1 + 2 and same(exported, content(uri, "dask"))
    assert exported["parent"]["sweep.metric"] == "metrics/eval/Accuracy" and "ranking.summary" in exported["parent"]
    child = exported[(local.labels[0], "0")]
    assert child["params"]["list_order"] in ("CutOut > MixUp", "MixUp > CutOut")
    assert {"ranking.rank", "ranking.verdict", "ranking.mean"} <= set(child["tags"])
    assert len(child["metrics"]["loss/train"]) == 6

    before = read_back(uri, "local")[0]
    assert local.to_mlflow(uri, "local") == parent  # exported again: nothing added, nothing logged twice
    assert sorted(read_back(uri, "local")[0]["run_id"]) == sorted(before["run_id"])
    assert same(content(uri, "local"), exported)

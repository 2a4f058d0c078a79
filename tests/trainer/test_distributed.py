"""Distributed training: the helpers in one process, and a real 2-rank torchrun launch on CPU (gloo)
checked against a single-process run with the same global batch."""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, WeightedRandomSampler

from composer_lab.core.state import State
from composer_lab.trainer import Run, distributed
from composer_lab.trainer.checkpoint import load_checkpoint
from composer_lab.trainer.rank_traces import RankTraces

from tests.trainer.helpers import counts, make_trainer, tiny_data, tiny_loader, tiny_model

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("distributed_worker.py")
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def clean_env(monkeypatch):
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- helpers, in one process -------------------------------------------------------------------
@pytest.mark.usefixtures("clean_env")
def test_no_launch_is_rank_0_of_1():
    assert distributed.detect_launch() is None
    assert distributed.setup(torch.device("cpu")) == torch.device("cpu")
    assert (distributed.get_rank(), distributed.get_world_size()) == (0, 1)
    assert distributed.sum_over_ranks(5) == 5 and distributed.gather_object("x") == ["x"]


def test_detect_launch_reads_torchrun_variables():
    launch = distributed.detect_launch({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})
    assert launch == distributed.Launch(rank=1, world_size=2, local_rank=1)
    assert distributed.detect_launch({"RANK": "3", "WORLD_SIZE": "4"}).local_rank == 3


@pytest.mark.parametrize("environ,message", [
    ({"WORLD_SIZE": "2"}, "RANK is not"),
    ({"WORLD_SIZE": "2", "RANK": "2"}, "0 <= RANK < WORLD_SIZE"),
    ({"WORLD_SIZE": "two", "RANK": "0"}, "WORLD_SIZE='two' is not an integer"),
])
def test_detect_launch_rejects_broken_environments(environ, message):
    with pytest.raises(ValueError, match=message):
        distributed.detect_launch(environ)


def test_launch_without_torch_distributed_is_a_clear_error(clean_env):
    clean_env.setenv("WORLD_SIZE", "2")
    clean_env.setenv("RANK", "0")
    clean_env.setattr(torch.distributed, "is_available", lambda: False)
    with pytest.raises(ValueError, match="has no torch.distributed"):
        distributed.setup(torch.device("cpu"))


def test_launch_without_master_address_is_a_clear_error(clean_env):
    clean_env.setenv("WORLD_SIZE", "2")
    clean_env.setenv("RANK", "1")
    with pytest.raises(ValueError, match="MASTER_ADDR and MASTER_PORT not set"):
        make_trainer()
    assert not torch.distributed.is_initialized()


def test_torchrun_with_one_process_initialises_gloo_and_trains_unwrapped(clean_env):
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(_free_port())}.items():
        clean_env.setenv(name, value)
    try:
        trainer = make_trainer(max_duration="2ba")
        trainer.fit()
        assert torch.distributed.get_backend() == "gloo"
        assert trainer.ddp.module is None and trainer.state.timestamp.sample == 16
    finally:
        distributed.destroy_process_group()
    assert not torch.distributed.is_initialized()


def test_shard_dataloader_keeps_the_loader_and_splits_the_examples():
    loader = DataLoader(tiny_data(10), batch_size=2, shuffle=False, drop_last=True)
    shards = [distributed.shard_dataloader(loader, "train_dataloader", rank=r, world_size=2) for r in (0, 1)]
    for rank, shard in enumerate(shards):
        assert isinstance(shard.sampler, DistributedSampler) and not shard.sampler.shuffle
        assert (shard.batch_size, shard.drop_last, shard.collate_fn) == (2, True, loader.collate_fn)
        assert list(shard.sampler) == list(range(rank, 10, 2))
    assert distributed.shard_dataloader(loader, "x", rank=0, world_size=1) is loader
    assert distributed.shard_dataloader(None, "x", rank=0, world_size=2) is None
    assert distributed.shard_dataloader(shards[0], "x", rank=0, world_size=2) is shards[0]


def test_shard_dataloader_shuffles_alike_on_every_rank_when_the_original_shuffled():
    loader = tiny_loader(12, 3, shuffle=True)
    shards = [distributed.shard_dataloader(loader, "train_dataloader", seed=5, rank=r, world_size=2) for r in (0, 1)]
    assert all(s.sampler.shuffle and s.sampler.seed == 5 for s in shards)
    assert sorted(list(shards[0].sampler) + list(shards[1].sampler)) == list(range(12))


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(range(4))


@pytest.mark.parametrize("loader,message", [
    ([(torch.zeros(2, 6), torch.zeros(2))], "can split only a torch DataLoader"),
    (DataLoader(_Stream(), batch_size=2), r"IterableDataset.*Trainer\(shard_dataloaders=False\)"),
    (DataLoader(tiny_data(8), batch_sampler=[[0, 1], [2, 3]]), r"custom batch_sampler.*shard_dataloaders=False"),
    (DataLoader(tiny_data(8), batch_size=2, sampler=WeightedRandomSampler([1.0] * 8, 8)),
     r"WeightedRandomSampler.*shard_dataloaders=False"),
])
def test_unshardable_dataloaders_are_clear_errors(loader, message):
    with pytest.raises(ValueError, match=message):
        distributed.shard_dataloader(loader, "eval_dataloader", rank=0, world_size=2)


def test_selection_generator_is_rank_aware():
    draws = [torch.rand(4, generator=State(tiny_model(), seed=3, rank=r).generator()) for r in (0, 1)]
    assert not torch.equal(draws[0], draws[1])
    assert torch.equal(draws[0], torch.rand(4, generator=torch.Generator().manual_seed(3)))


def test_single_process_rank_traces_are_the_trace_with_rank_0():
    trainer = make_trainer(max_duration="2ba")
    trainer.fit()
    traces = trainer.rank_traces
    assert set(traces) == {"events", "invocations", "notes"}
    for name, frame in traces.items():
        own = getattr(trainer.trace, name)
        assert list(frame.columns) == ["rank", *own.columns] and (frame["rank"] == 0).all()
        assert frame.drop(columns="rank").equals(own)
    assert "rank" not in trainer.trace.events.columns


def test_gathered_frames_keep_categories_that_differ_between_ranks():
    trainers = [make_trainer(max_duration="1ba"), make_trainer(max_duration="1ba", progress_bar=True)]
    for t in trainers:
        t.fit()
    joined = RankTraces({r: t.trace for r, t in enumerate(trainers)})["invocations"]
    assert isinstance(joined["name"].dtype, pd.CategoricalDtype)
    assert "ProgressBar" in set(joined.loc[joined["rank"] == 1, "name"])


# -- a real 2-rank launch ----------------------------------------------------------------------
def _single(**kwargs):
    """The single-process twin of a worker run: the same data and seed, batch 2 * 4 (the global batch)."""
    args = dict(train_dataloader=tiny_loader(32, 8), max_duration="1ep", seed=0)
    args.update(kwargs)
    trainer = make_trainer(**args)
    trainer.fit()
    return trainer


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """Runs distributed_worker.py under torchrun with 2 CPU ranks, once for the module."""
    tmp = tmp_path_factory.mktemp("ddp")
    single = make_trainer(train_dataloader=tiny_loader(32, 8), max_duration="1ep", save_folder=tmp / "single")
    single.fit()
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), str(WORKER), str(tmp),
           str(single.checkpoints[-1])]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"torchrun failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"

    def result(name: str, rank: int) -> dict:
        with open(tmp / f"{name}-rank{rank}.pkl", "rb") as f:
            return pickle.load(f)

    return tmp, result


def _assert_same_weights(a: dict, b: dict, exact: bool = False) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if exact:
            assert torch.equal(a[key], b[key]), key
        else:
            torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6)


def _values(metrics, name):
    return metrics.loc[metrics["name"] == name, "value"].to_numpy()


@pytest.mark.slow
@pytest.mark.parametrize("run", ["plain", "micro", "sb", "resumed"])
def test_ranks_end_with_identical_plain_weights(launched, run):
    _, result = launched
    ranks = [result(run, 0), result(run, 1)]
    _assert_same_weights(ranks[0]["weights"], ranks[1]["weights"], exact=True)
    assert all(r["wrapped"] and r["model_type"] == "Sequential" for r in ranks)
    assert ranks[0]["run_name"] == ranks[1]["run_name"]


@pytest.mark.slow
@pytest.mark.parametrize("run,microbatch", [("plain", None), ("micro", 2)])
def test_two_ranks_equal_one_process_with_the_global_batch(launched, run, microbatch):
    _, result = launched
    rank0 = result(run, 0)
    single = _single(eval_dataloader=tiny_loader(16, 4) if run == "plain" else None,
                     device_train_microbatch_size=microbatch)
    _assert_same_weights(rank0["weights"], single.state.model.state_dict())
    assert counts(rank0["timestamp"]) == counts(single.state.timestamp)  # samples summed over the ranks
    assert _values(rank0["metrics"], "loss/train") == pytest.approx(_values(single.metrics, "loss/train"), rel=1e-5)


@pytest.mark.slow
def test_eval_metrics_are_reduced_over_the_ranks(launched):
    _, result = launched
    single = _single(eval_dataloader=tiny_loader(16, 4))
    expected = single.eval()
    for rank in (0, 1):
        assert result("plain", rank)["eval"] == pytest.approx(expected, rel=1e-5)
    logged = result("plain", 0)["metrics"]
    for name in ("loss/eval", "metrics/eval/Accuracy"):
        assert _values(logged, name) == pytest.approx(_values(single.metrics, name), rel=1e-5)


@pytest.mark.slow
def test_microbatches_all_reduce_once_per_step(launched):
    _, result = launched
    assert [result("micro", r)["allreduces"] for r in (0, 1)] == [4, 4]  # 4 steps of 2 microbatches, 1 bucket


@pytest.mark.slow
def test_selective_backprop_draws_per_rank_and_samples_are_summed(launched):
    _, result = launched
    ranks = [result("sb", 0), result("sb", 1)]
    assert [r["generator_seed"] for r in ranks] == [0, 1]
    assert [r["timestamp"]["sample"] for r in ranks] == [16, 16]  # 4 steps x 2 ranks x int(0.5 * 4)


@pytest.mark.slow
def test_rank_0_gathers_every_rank_trace(launched):
    _, result = launched
    traces = result("plain", 0)["rank_traces"]
    events = traces["events"]
    assert set(events["rank"]) == {0, 1}
    by_rank = [events.loc[events["rank"] == r, "event"].astype(str).tolist() for r in (0, 1)]
    assert by_rank[0] == by_rank[1] and "fit_end" in by_rank[0]
    assert set(traces["invocations"]["rank"]) == {0, 1}
    assert set(result("plain", 1)["rank_traces"]["events"]["rank"]) == {1}  # rank 1 keeps its own


@pytest.mark.slow
def test_the_run_folder_keeps_every_rank_trace(launched):
    out, _ = launched
    run = Run.load(out / "run")
    assert set(run.rank_traces) == {"events", "invocations", "notes"}
    assert set(run.rank_traces["events"]["rank"]) == {0, 1}
    assert run.config["world_size"] == 2 and run.config["batch_size"] == 4  # per rank


@pytest.mark.slow
def test_metrics_are_logged_once(launched):
    _, result = launched
    assert len(_values(result("plain", 0)["metrics"], "loss/train")) == 4
    assert result("plain", 1)["metrics"].empty


@pytest.mark.slow
def test_rank_0_writes_a_checkpoint_a_single_process_loads(launched):
    tmp, result = launched
    ranks = [result("plain", 0), result("plain", 1)]
    assert [len(r["checkpoints"]) for r in ranks] == [1, 0]
    assert sorted(p.name for p in (tmp / "checkpoints").iterdir()) == [
        "ep1-ba4.pt", "metrics_chunks", "rank_traces", "run.json"]
    assert len(load_checkpoint(ranks[0]["checkpoints"][0])["rank_rng"]) == 2
    loaded = make_trainer(train_dataloader=tiny_loader(32, 8), max_duration="1ep",
                          eval_dataloader=tiny_loader(16, 4), load_path=ranks[0]["checkpoints"][0])
    _assert_same_weights(loaded.state.model.state_dict(), ranks[0]["weights"], exact=True)
    assert loaded.state.timestamp.sample == 32


@pytest.mark.slow
def test_dataloaders_that_shard_themselves_are_used_as_given(launched):
    """An IterableDataset that reads only its rank's examples, with shard_dataloaders=False,
    trains exactly as the DistributedSampler split of the same data does."""
    _, result = launched
    for rank in (0, 1):
        presharded, plain = result("presharded", rank), result("plain", rank)
        _assert_same_weights(presharded["weights"], plain["weights"], exact=True)
        assert counts(presharded["timestamp"]) == counts(plain["timestamp"])


@pytest.mark.slow
def test_two_ranks_resume_a_single_process_checkpoint(launched):
    tmp, result = launched
    single = make_trainer(train_dataloader=tiny_loader(32, 8), max_duration="2ep",
                          load_path=tmp / "single" / "ep1-ba4.pt")
    single.fit()
    _assert_same_weights(result("resumed", 0)["weights"], single.state.model.state_dict())
    assert counts(result("resumed", 0)["timestamp"]) == counts(single.state.timestamp)


# -- gathering traces of several chunks (the "chunked" run: chunks of 24 events on rank 0, 16 on rank 1)
def _rank_rows(frame: pd.DataFrame, rank: int) -> pd.DataFrame:
    return frame[frame["rank"] == rank].drop(columns="rank").reset_index(drop=True)


@pytest.mark.slow
def test_a_gather_sends_a_chunk_per_message_and_rank_0_gets_every_rank_trace(launched):
    _, result = launched
    ranks = [result("chunked", r) for r in (0, 1)]
    sent = ranks[1]["fits"][0]["sent"]  # rank 1's messages: its chunk names, its chunks one by one, its tail
    assert len(sent) > 8 and max(sent) < sum(sent) / 4
    for fit in (0, 1):
        gathered = ranks[0]["fits"][fit]["gathered"]
        for name in ("events", "invocations", "notes"):
            assert list(gathered[name].columns[:1]) == ["rank"]
            for rank in (0, 1):
                pd.testing.assert_frame_equal(_rank_rows(gathered[name], rank), ranks[rank]["fits"][fit]["own"][name],
                                              check_categorical=False)


@pytest.mark.slow
def test_the_next_fit_gathers_only_what_is_new(launched):
    _, result = launched
    first, second = (fit["sent"] for fit in result("chunked", 1)["fits"])
    own = [len(fit["own"]["events"]) for fit in result("chunked", 1)["fits"]]
    assert own[1] > 1.4 * own[0]  # the second fit added about half as many rows again
    assert sum(second) < 0.75 * sum(first)  # and sent about that, not the whole trace again


@pytest.mark.slow
def test_rank_traces_are_saved_and_loaded_as_chunks(launched):
    out, result = launched
    rank0 = result("chunked", 0)
    gathered = rank0["fits"][1]["gathered"]
    run = Run.load(out / "chunked-run")
    persisted = RankTraces.load(out / "chunked" / "rank_traces")  # what a failure later would leave
    for traces in (run.rank_traces, persisted):
        assert isinstance(traces, RankTraces) and list(traces.traces) == [0, 1]
        for name in ("events", "invocations", "notes"):
            pd.testing.assert_frame_equal(traces[name], gathered[name])
    assert len(list((out / "chunked-run" / "ranks" / "rank1").glob("*.parquet"))) > 8  # chunks, linked
    pd.testing.assert_frame_equal(run.rank_traces.query("invocations", rank=1, batches=(3, 6)), rank0["query"])
    calls = _rank_rows(gathered["invocations"], 1)
    assert len(rank0["query"]) == calls["batch"].between(3, 5).sum() > 0

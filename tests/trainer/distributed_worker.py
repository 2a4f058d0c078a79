"""The script tests/trainer/test_distributed.py launches with torchrun (2 ranks, gloo on CPU).

Usage: ``torchrun --nproc_per_node 2 distributed_worker.py OUT SINGLE_PROCESS_CHECKPOINT``.
Each rank trains a few tiny runs and writes what it ended with to ``OUT/<run>-rank<r>.pkl``.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.utils.data import DataLoader, IterableDataset

from composer_lab import Trainer
from composer_lab.algorithms import SelectiveBackprop
from composer_lab.core.trace import Trace
from composer_lab.trainer import distributed

from tests.trainer.helpers import tiny_data, tiny_loader, tiny_model

BATCH = 4  # per rank: a step trains on 8 examples
CHUNK_ROWS = (24, 16)  # events per trace chunk in the chunked run, by rank: a few chunks per fit, more on rank 1


def make_trainer(**kwargs) -> Trainer:
    args = dict(model=tiny_model(), train_dataloader=tiny_loader(32, BATCH), max_duration="1ep",
                loss_fn=nn.functional.cross_entropy, device="cpu", progress_bar=False, seed=0)
    args.update(kwargs)
    return Trainer(**args)


def record(trainer: Trainer, **extra) -> dict:
    return {"weights": {k: v.detach().clone() for k, v in trainer.state.model.state_dict().items()},
            "timestamp": trainer.state.timestamp.state_dict(), "metrics": trainer.metrics,
            "checkpoints": [str(p) for p in trainer.checkpoints], "rank_traces": dict(trainer.rank_traces),
            "model_type": type(trainer.state.model).__name__, "wrapped": trainer.ddp.module is not None,
            "generator_seed": trainer.state.generator().initial_seed(), "run_name": trainer.state.run_name,
            **extra}


def save(out: Path, name: str, rank: int, result: dict) -> None:
    with open(out / f"{name}-rank{rank}.pkl", "wb") as f:
        pickle.dump(result, f)


class RankStream(IterableDataset):
    """The examples of ``tiny_loader(32)`` that a DistributedSampler gives rank r (r, r + 2, ...):
    a stream that splits itself across the ranks."""

    def __init__(self) -> None:
        self.data = tiny_data(32)

    def __len__(self) -> int:
        return len(self.data) // torch.distributed.get_world_size()

    def __iter__(self):
        rank, world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
        return (self.data[i] for i in range(rank, len(self.data), world_size))


def main(out: Path, single_checkpoint: Path) -> None:
    plain = make_trainer(eval_dataloader=tiny_loader(16, BATCH), save_folder=out / "checkpoints")
    plain.fit()
    rank = plain.state.rank
    save(out, "plain", rank, record(plain, eval=plain.eval()))
    if rank == 0:
        plain.to_run().save(out / "run")

    micro = make_trainer(device_train_microbatch_size=2)
    allreduces = []

    def counting_allreduce(process_group, bucket):
        allreduces.append(bucket.index())
        return default_hooks.allreduce_hook(process_group, bucket)

    micro.ddp.module.register_comm_hook(None, counting_allreduce)
    micro.fit()
    save(out, "micro", rank, record(micro, allreduces=len(allreduces)))

    sb = make_trainer(algorithms=[SelectiveBackprop(start=0, end=1, keep=0.5, scale_factor=1, interrupt=0)])
    sb.fit()
    save(out, "sb", rank, record(sb))

    presharded = make_trainer(train_dataloader=DataLoader(RankStream(), batch_size=BATCH), shard_dataloaders=False)
    presharded.fit()
    save(out, "presharded", rank, record(presharded))

    resumed = make_trainer(max_duration="2ep", load_path=single_checkpoint)
    resumed.fit()
    save(out, "resumed", rank, record(resumed))

    save(out, "chunked", rank, chunked_gathers(out))


def chunked_gathers(out: Path) -> dict:
    """Two fits of a trace spilled every CHUNK_ROWS[rank] events: the bytes each rank sent per
    gather_object call of each fit's gather, its own frames and (rank 0) the frames gathered then."""
    rank = torch.distributed.get_rank()
    trainer = make_trainer(trace=Trace("all", chunk_rows=CHUNK_ROWS[rank]), max_duration="2ep",
                           save_folder=out / "chunked")
    sent, gather_object, gather_traces = [], torch.distributed.gather_object, distributed.gather_traces

    def measured(obj, *args, **kwargs):
        sent[-1].append(len(pickle.dumps(obj)))
        return gather_object(obj, *args, **kwargs)

    def gathering(*args, **kwargs):
        sent.append([])
        torch.distributed.gather_object = measured
        try:
            return gather_traces(*args, **kwargs)
        finally:
            torch.distributed.gather_object = gather_object

    distributed.gather_traces = gathering
    fits = []
    for duration in (None, "1ep"):
        trainer.fit(duration)
        fits.append({"sent": sent[-1], "gathered": dict(trainer.rank_traces),
                     "own": {name: getattr(trainer.trace, name) for name in ("events", "invocations", "notes")}})
    distributed.gather_traces = gather_traces
    if rank == 0:
        trainer.to_run().save(out / "chunked-run")
    return {"fits": fits, "query": trainer.rank_traces.query("invocations", rank=1, batches=(3, 6)) if rank == 0
            else None}

if __name__ == "__main__":
    torch.set_num_threads(1)
    main(Path(sys.argv[1]), Path(sys.argv[2]))

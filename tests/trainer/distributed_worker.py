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

from tests.trainer.helpers import tiny_data, tiny_loader, tiny_model

BATCH = 4  # per rank: a step trains on 8 examples


def make_trainer(**kwargs) -> Trainer:
    args = dict(model=tiny_model(), train_dataloader=tiny_loader(32, BATCH), max_duration="1ep",
                loss_fn=nn.functional.cross_entropy, device="cpu", progress_bar=False, seed=0)
    args.update(kwargs)
    return Trainer(**args)


def record(trainer: Trainer, **extra) -> dict:
    return {"weights": {k: v.detach().clone() for k, v in trainer.state.model.state_dict().items()},
            "timestamp": trainer.state.timestamp.state_dict(), "metrics": trainer.metrics,
            "checkpoints": [str(p) for p in trainer.checkpoints], "rank_traces": trainer.rank_traces,
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


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(Path(sys.argv[1]), Path(sys.argv[2]))

"""Distributed data-parallel training on PyTorch's own engine, for scripts launched with torchrun.

``torchrun --nproc_per_node N script.py`` starts N copies of the script and sets ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` in each. The Trainer finds
them here, initialises the process group (nccl on GPU, gloo on CPU), trains through a
``DistributedDataParallel`` wrapper (which all-reduces the gradients) and gives each rank its
shard of the data through a ``DistributedSampler``. As in Composer, a dataloader's
``batch_size`` is per rank: one step trains on ``batch_size * world_size`` examples.

A process that was not launched (``python script.py``, a notebook) is rank 0 of 1, and every
helper here then returns at once without communicating.
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Union

import pandas as pd
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import (DataLoader, DistributedSampler, IterableDataset, RandomSampler,
                              SequentialSampler)

from composer_lab.core.logger import Logger
from composer_lab.core.state import State
from composer_lab.core.trace import Trace
from composer_lab.trainer.rank_traces import RANK_TRACES, RankTraces

__all__ = ["Launch", "detect_launch", "setup", "destroy_process_group", "get_rank", "get_world_size",
           "sum_over_ranks", "mean_over_ranks", "gather_object", "broadcast_object", "barrier",
           "shard_dataloader", "DDPModel", "rank_frames", "gather_traces", "RankTraces",
           "rank_random_state", "SilentLogger"]

_owns_group = False  # composer_lab created the default process group (and destroys it at exit)
_host_group: Optional[Any] = None  # gloo group for host-side collectives when the default is nccl


@dataclass(frozen=True)
class Launch:
    """This process's place in a torchrun launch."""

    rank: int
    world_size: int
    local_rank: int


def detect_launch(environ: Optional[Mapping[str, str]] = None) -> Optional[Launch]:
    """The launch that ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` describe (torchrun sets them),
    or None when ``WORLD_SIZE`` is unset. ``LOCAL_RANK`` defaults to ``RANK`` (one node)."""
    environ = os.environ if environ is None else environ
    if "WORLD_SIZE" not in environ:
        return None
    if "RANK" not in environ:
        raise ValueError("WORLD_SIZE is set but RANK is not: launch the script with `torchrun "
                         "--nproc_per_node N script.py`, which sets both, or unset WORLD_SIZE to train in "
                         "one process")
    rank, world_size = _env_int(environ, "RANK"), _env_int(environ, "WORLD_SIZE")
    local_rank = _env_int(environ, "LOCAL_RANK") if "LOCAL_RANK" in environ else rank
    if world_size < 1 or not 0 <= rank < world_size or local_rank < 0:
        raise ValueError(f"RANK={rank}, WORLD_SIZE={world_size}, LOCAL_RANK={local_rank} describe no launch: "
                         f"it needs WORLD_SIZE >= 1, 0 <= RANK < WORLD_SIZE and LOCAL_RANK >= 0; let torchrun "
                         f"set them")
    return Launch(rank, world_size, local_rank)


def _env_int(environ: Mapping[str, str], name: str) -> int:
    try:
        return int(environ[name])
    except ValueError:
        raise ValueError(f"environment variable {name}={environ[name]!r} is not an integer; launch with "
                         f"torchrun, which sets it, or unset WORLD_SIZE to train in one process") from None


# -- process group -----------------------------------------------------------------------------
def setup(device: torch.device) -> torch.device:
    """Join the launch this process belongs to, if any, and return this rank's device.

    Initialises the default process group (nccl for a GPU device, gloo for CPU) unless one is
    up already (the user's own ``init_process_group``: it is used as it is). On a GPU, a
    device without an index becomes ``cuda:LOCAL_RANK``. A process that was not launched
    gets ``device`` back unchanged.
    """
    launch = detect_launch()
    if launch is not None and not dist.is_available():
        raise ValueError(f"WORLD_SIZE={launch.world_size} asks for distributed training, but this torch build "
                         f"({torch.__version__}) has no torch.distributed; install a build with it (the "
                         f"standard PyPI wheel) or unset WORLD_SIZE to train in one process")
    if launch is None and not _initialized():
        return device
    local_rank = launch.local_rank if launch is not None else dist.get_rank() % max(torch.cuda.device_count(), 1)
    device = _rank_device(device, local_rank)
    if not _initialized():
        _init_process_group(device)
    _make_host_group()
    return device


def _rank_device(device: torch.device, local_rank: int) -> torch.device:
    if device.type != "cuda":
        return device
    if device.index is None:
        if local_rank >= torch.cuda.device_count():
            raise ValueError(f"LOCAL_RANK={local_rank} but this node has {torch.cuda.device_count()} GPU(s); "
                             f"launch at most one process per GPU (torchrun --nproc_per_node "
                             f"{torch.cuda.device_count()}), or train on device='cpu'")
        device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    return device


def _init_process_group(device: torch.device) -> None:
    global _owns_group
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
    if missing:
        raise ValueError(f"{' and '.join(missing)} not set: the ranks cannot find each other; launch with "
                         f"torchrun, which sets them, or set them to rank 0's address and a free port")
    if device.type == "cuda":
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group("gloo")
    _owns_group = True
    atexit.register(destroy_process_group)


def _make_host_group() -> None:
    """Counts, objects and barriers go through gloo on the host: with nccl they would need
    a device tensor and a device sync. ``new_group`` is collective: every rank calls it here."""
    global _host_group
    if _host_group is None and dist.get_backend() == "nccl" and dist.get_world_size() > 1:
        _host_group = dist.new_group(backend="gloo")


def destroy_process_group() -> None:
    """Destroy the process group if composer_lab created it (also run at exit); a group the
    user created is the user's to destroy."""
    global _owns_group, _host_group
    if _owns_group and _initialized():
        dist.destroy_process_group()
    _owns_group, _host_group = False, None


def _initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    """This process's rank; 0 without a process group."""
    return dist.get_rank() if _initialized() else 0


def get_world_size() -> int:
    """The number of ranks; 1 without a process group."""
    return dist.get_world_size() if _initialized() else 1


# -- collectives (each returns at once in one process) -------------------------------------------
def sum_over_ranks(count: int) -> int:
    """``count`` summed over the ranks (e.g. the examples one step trained on), through a host
    tensor: no device sync."""
    if get_world_size() == 1:
        return count
    total = torch.tensor([count], dtype=torch.int64)
    dist.all_reduce(total, group=_host_group)
    return int(total.item())


def mean_over_ranks(value: torch.Tensor, weight: int = 1) -> torch.Tensor:
    """``value`` averaged over the ranks, each weighted by its ``weight`` (its example count):
    one all-reduce on ``value``'s device. Gloo has no AVG, so sums are divided here."""
    if get_world_size() == 1:
        return value
    value = value.detach().float().reshape(())
    totals = torch.stack([value * weight, torch.full((), float(weight), device=value.device)])
    dist.all_reduce(totals)
    return totals[0] / totals[1]


def gather_object(obj: Any) -> Optional[list]:
    """Every rank's picklable ``obj``, in rank order, on rank 0; None on the other ranks."""
    if get_world_size() == 1:
        return [obj]
    gathered = [None] * get_world_size() if get_rank() == 0 else None
    dist.gather_object(obj, gathered, dst=0, group=_host_group)
    return gathered


def broadcast_object(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank."""
    if get_world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0, group=_host_group)
    return box[0]


def barrier() -> None:
    """Wait until every rank gets here."""
    if get_world_size() > 1:
        dist.barrier(group=_host_group)


# -- data ---------------------------------------------------------------------------------------
_REBUILT = frozenset({"self", "dataset", "batch_size", "shuffle", "sampler", "batch_sampler"})


def shard_dataloader(dataloader: Any, name: str, seed: int = 0, rank: Optional[int] = None,
                     world_size: Optional[int] = None) -> Any:
    """This rank's share of ``dataloader``: a DataLoader over the same dataset, with the same
    per-rank ``batch_size``, ``collate_fn``, ``drop_last`` and workers, drawing through a
    ``DistributedSampler`` (rank r reads examples r, r + world_size, ...; shuffled first, in an
    order set by ``seed`` and the epoch and the same on every rank, when the original shuffled).

    Returned unchanged in one process and when it has a DistributedSampler already; None stays
    None. The sampler pads the dataset to a multiple of ``world_size`` by repeating its first
    examples, so an eval set of another size counts those twice: give eval sets a size divisible
    by the world size for metrics equal to a single-process evaluation.
    """
    rank = get_rank() if rank is None else rank
    world_size = get_world_size() if world_size is None else world_size
    if dataloader is None or world_size == 1:
        return dataloader
    _check_shardable(dataloader, name)
    if isinstance(dataloader.sampler, DistributedSampler):
        return dataloader
    sampler = DistributedSampler(dataloader.dataset, num_replicas=world_size, rank=rank,
                                 shuffle=isinstance(dataloader.sampler, RandomSampler), seed=seed)
    kept = {p: getattr(dataloader, p) for p in inspect.signature(DataLoader.__init__).parameters
            if p not in _REBUILT and hasattr(dataloader, p)}
    return DataLoader(dataloader.dataset, batch_size=dataloader.batch_size, sampler=sampler, **kept)


def _check_shardable(dataloader: Any, name: str) -> None:
    sharded = (f"or, if every rank's {name} already reads only that rank's share, pass "
               f"Trainer(shard_dataloaders=False)")
    fix = f"or give {name} a DistributedSampler(dataset, num_replicas=WORLD_SIZE, rank=RANK) of your own, {sharded}"
    if not isinstance(dataloader, DataLoader):
        raise ValueError(f"{name} is a {type(dataloader).__name__}: under torchrun each rank must read its "
                         f"own shard of the data, and composer_lab can split only a torch DataLoader; pass a "
                         f"DataLoader over a map-style dataset, {sharded}")
    if isinstance(dataloader.dataset, IterableDataset):
        raise ValueError(f"{name} reads an IterableDataset, which a DistributedSampler cannot split across "
                         f"ranks (each rank would read the whole stream); use a map-style dataset (with "
                         f"__getitem__ and __len__), {sharded}")
    if isinstance(dataloader.sampler, DistributedSampler):
        return
    if dataloader.batch_size is None:
        raise ValueError(f"{name} batches with a custom batch_sampler, which composer_lab cannot split "
                         f"across ranks; give it a batch_size (per rank) instead, {fix}")
    sampler = dataloader.sampler
    if type(sampler) not in (SequentialSampler, RandomSampler) or getattr(sampler, "replacement", False):
        raise ValueError(f"{name} samples with {type(sampler).__name__}, which composer_lab cannot split "
                         f"across ranks; use shuffle=True or shuffle=False, {fix}")


# -- model --------------------------------------------------------------------------------------
class DDPModel:
    """The DistributedDataParallel wrapper that training forwards go through.

    ``state.model`` stays the plain module: algorithms, checkpoints (loadable at any world
    size), evaluation and prediction use it, and Selective Backprop's scoring forward does not
    touch DDP's gradient bookkeeping. In one process there is no wrapper.
    """

    def __init__(self) -> None:
        self.enabled = get_world_size() > 1
        self.module: Optional[DistributedDataParallel] = None

    def wrap(self, state: State) -> None:
        """Wrap ``state.model`` (after INIT's surgery, on its device): DDP broadcasts rank 0's
        weights and buffers, so every rank starts alike. ``find_unused_parameters`` is on when
        any algorithm's says so (e.g. LayerFreezing)."""
        if not self.enabled:
            return
        device_ids = [state.device.index] if state.device.type == "cuda" else None
        self.module = DistributedDataParallel(
            state.model, device_ids=device_ids,
            find_unused_parameters=any(a.find_unused_parameters for a in state.algorithms))

    def training_forward(self, state: State, sync: bool) -> contextlib.AbstractContextManager:
        """A context giving the module a training forward calls. Under DDP: the wrapper (made
        again if an algorithm replaced ``state.model``), inside ``no_sync`` unless ``sync``, so
        the backward of this forward accumulates gradients locally instead of all-reducing
        them (DDP decides at forward time)."""
        if not self.enabled:
            return contextlib.nullcontext(state.model)
        if self.module is None or self.module.module is not state.model:
            self.wrap(state)
        return contextlib.nullcontext(self.module) if sync else _accumulating(self.module)


@contextlib.contextmanager
def _accumulating(module: DistributedDataParallel) -> Iterator[DistributedDataParallel]:
    with module.no_sync():
        yield module


# -- trace, random state, logging ---------------------------------------------------------------
def rank_frames(trace: Trace, rank: int) -> RankTraces:
    """This process's ``trace`` as rank ``rank``'s: its events, invocations and notes, each with a
    leading ``rank`` column."""
    return RankTraces.of(trace, rank)


def gather_traces(trace: Trace, gathered: Optional[RankTraces] = None,
                  save_folder: Union[str, os.PathLike, None] = None) -> Optional[RankTraces]:
    """Every rank's trace on rank 0 of a distributed run, added to what ``gathered`` holds (or
    to a new :class:`RankTraces`, kept in ``save_folder``/rank_traces when given); None on the
    other ranks and in one process. Every rank must call it.

    Only what rank 0 lacks travels, so memory and time do not grow with the run: first the
    chunk files rank 0 has not received, one per rank per message (ranks with fewer send
    nothing in the last rounds), then each rank's rows in memory (at most ``chunk_rows``
    events) and notes. A gather that fails keeps what earlier ones brought."""
    if get_world_size() == 1:
        return None
    rank, snapshot = get_rank(), trace.checkpoint()
    if rank == 0 and gathered is None:
        gathered = RankTraces(folder=None if save_folder is None else Path(save_folder) / RANK_TRACES)
    _gather_chunk_files(snapshot, gathered, rank)
    snapshots = gather_object({**snapshot, "folder": None} if rank else None)  # (rank 0's own: read where they are)
    if snapshots is None:
        return None
    for r, theirs in enumerate(snapshots):
        gathered.update(r, theirs or snapshot)
    return gathered


def _gather_chunk_files(snapshot: Mapping[str, Any], gathered: Optional[RankTraces], rank: int) -> None:
    """Bring to rank 0's ``gathered`` the chunk files of ``snapshot`` (this rank's trace) it lacks, one
    file per rank per message (ranks with fewer send nothing in the last rounds)."""
    files = gather_object([chunk["file"] for chunk in snapshot["chunks"]])  # on rank 0: every rank's
    lacking = broadcast_object(None if files is None else [[] if r == 0 else gathered.lacks(r, names)
                                                           for r, names in enumerate(files)])
    for step in range(max(map(len, lacking))):
        mine = lacking[rank][step:step + 1]
        sent = gather_object([(name, (Path(snapshot["folder"]) / name).read_bytes()) for name in mine])
        for r, chunks in enumerate(sent or ()):
            for name, data in chunks:
                gathered.receive(r, name, data)


def rank_random_state(checkpoint: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """This rank's random state in ``checkpoint`` (``rng`` and ``generators``): its own when as
    many ranks wrote it, rank 0's on rank 0 otherwise. None for the other ranks of a different
    world size: they keep the streams they were seeded with (seed + rank), so ranks still draw
    differently."""
    saved = checkpoint.get("rank_rng")
    if saved is not None and len(saved) == get_world_size():
        return saved[get_rank()]
    if get_rank() == 0:
        return {"rng": checkpoint["rng"], "generators": checkpoint.get("generators", {})}
    return None


class SilentLogger(Logger):
    """The logger of ranks other than 0: it keeps nothing, so a distributed run's metrics are
    logged once, by rank 0 (whose train loss and eval metrics are reduced over the ranks)."""

    def log_metrics(self, metrics: Mapping[str, Any], phase: Optional[str] = None) -> None:
        """Drop ``metrics``."""

    def log_train_step(self, loss: Any, lr: Any) -> None:
        """Drop the step's loss and learning rate."""

    def load_metrics(self, frame: pd.DataFrame) -> None:
        """Drop ``frame``."""

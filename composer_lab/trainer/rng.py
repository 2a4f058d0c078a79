"""Repeatable randomness: seeding, saving and restoring every RNG the loop draws from, and a
per-epoch shuffle order that depends only on the seed and the epoch."""

from __future__ import annotations

import contextlib
import random
from typing import Any, Iterator

import numpy as np
import torch

from composer_lab.core.checks import is_int

__all__ = ["seed_all", "rng_state", "load_rng_state", "preserved_rng", "seed_epoch_data"]

_WORKER_SEEDS = 500_009
"""Offset of the DataLoader generator's per-epoch seed from the sampler's, so the workers'
seeds are not the shuffle's first draw."""


def seed_all(seed: int) -> None:
    """Seed Python's, NumPy's and torch's (CPU and CUDA) global generators."""
    if not is_int(seed) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}; pass e.g. seed=0")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """The state of the global generators, in types ``torch.load(weights_only=True)`` reads."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def load_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned, wherever its tensors were loaded (a checkpoint
    read with ``map_location="cuda"`` puts them on the GPU; the generators take CPU tensors)."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"].cpu())
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.cpu().numpy().astype(np.uint32), pos, has_gauss, gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([device_state.cpu() for device_state in state["cuda"]])


@contextlib.contextmanager
def preserved_rng() -> Iterator[None]:
    """Run the body without consuming the global generators (e.g. creating a dataloader
    iterator draws a seed from torch's), so the rest of the run does not depend on it."""
    state = rng_state()
    try:
        yield
    finally:
        load_rng_state(state)


def seed_epoch_data(dataloader: Any, seed: int, epoch: int, rank: int = 0) -> None:
    """Make this epoch's shuffle order a function of (seed, epoch) and its workers' seeds a
    function of (seed, epoch, rank): reseed a RandomSampler's generator, or call ``set_epoch``
    on samplers that have it (DistributedSampler), and reseed the DataLoader's own generator,
    from which its iterator draws the workers' seeds (so workers that draw random numbers give
    a resumed epoch the same data as an uninterrupted one)."""
    if isinstance(dataloader, torch.utils.data.DataLoader):
        if dataloader.generator is None:
            dataloader.generator = torch.Generator()
        dataloader.generator.manual_seed((seed + rank) * 1_000_003 + epoch + _WORKER_SEEDS)
    for sampler in (getattr(dataloader, "sampler", None),
                    getattr(getattr(dataloader, "batch_sampler", None), "sampler", None)):
        if isinstance(sampler, torch.utils.data.RandomSampler):
            gen = sampler.generator
            if gen is None:
                gen = sampler.generator = torch.Generator()
            gen.manual_seed(seed * 1_000_003 + epoch)
        elif hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)

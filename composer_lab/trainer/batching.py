"""Batches: their size, their split into microbatches, and the parts the loop reads.

A batch is an ``(input, target)`` tuple or list, a dict with 'input' and 'target' (other keys
are carried along), or a bare input tensor (predict).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from composer_lab.core.state import BATCH_KEYS, batch_key

__all__ = ["batch_size", "batch_inputs", "batch_targets", "split_batch"]


def _first_tensor(batch: Any) -> torch.Tensor:
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, Mapping):
        value = batch.get(BATCH_KEYS[0])
        if isinstance(value, torch.Tensor):
            return value
        values = batch.values()
    elif isinstance(batch, (tuple, list)):
        values = batch
    else:
        values = ()
    for value in values:
        if isinstance(value, torch.Tensor):
            return value
    raise TypeError(f"cannot tell the size of a batch of type {type(batch).__name__}; batches are "
                    f"(input, target) pairs, dicts with 'input' and 'target', or tensors")


def batch_size(batch: Any) -> int:
    """The number of examples in ``batch``: the first dimension of its input tensor."""
    if type(batch) is tuple and batch and isinstance(batch[0], torch.Tensor):
        return batch[0].shape[0]  # the usual (input, target) batch, answered first: this runs every step
    return _first_tensor(batch).shape[0]


def batch_inputs(batch: Any) -> Any:
    """What the model's forward takes: ``batch[0]``, ``batch['input']`` or the batch itself."""
    if type(batch) is tuple:  # the usual batch, before the slower Mapping check
        return batch[0]
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, Mapping):
        return batch[batch_key(batch, 0)]
    return batch[0]


def batch_targets(batch: Any) -> Any:
    """What the loss compares with: ``batch[1]`` or ``batch['target']``."""
    if type(batch) is tuple and len(batch) > 1:  # the usual batch, before the slower Mapping check
        return batch[1]
    if isinstance(batch, Mapping):
        return batch[batch_key(batch, 1)]
    if isinstance(batch, (tuple, list)) and len(batch) > 1:
        return batch[1]
    raise TypeError(f"a batch of type {type(batch).__name__} has no target; training and evaluation "
                    f"need (input, target) pairs or dicts with 'input' and 'target'")


def split_batch(batch: Any, size: int) -> list:
    """``batch`` cut along its first dimension into pieces of at most ``size`` examples
    (views, no copies); entries that are not tensors of the batch's length are shared."""
    n = batch_size(batch)
    if size >= n:
        return [batch]
    starts = range(0, n, size)
    if isinstance(batch, torch.Tensor):
        return list(batch.split(size))
    if isinstance(batch, Mapping):
        return [{k: _slice(v, n, s, size) for k, v in batch.items()} for s in starts]
    return [type(batch)(_slice(v, n, s, size) for v in batch) for s in starts]


def _slice(value: Any, n: int, start: int, size: int) -> Any:
    if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == n:
        return value[start:start + size]
    return value

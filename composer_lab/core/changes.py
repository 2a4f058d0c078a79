"""Which State fields a call replaced or mutated in place, detected without copying data.

A field's signature holds the ids of the objects in it and the version counters of its
tensors (PyTorch bumps ``tensor._version`` on every in-place write). The objects are kept
referenced while the call runs, so a freed object's id cannot be reused by its replacement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["TRACKED_FIELDS", "snapshot", "changed_fields"]

TRACKED_FIELDS = ("batch", "outputs", "loss", "model", "optimizers")


def _signature(value: Any, keep: list) -> Any:
    keep.append(value)
    if isinstance(value, torch.Tensor):
        return (id(value), value._version)
    if isinstance(value, torch.nn.Module):
        return _module_signature(value, keep)
    if isinstance(value, (tuple, list)):
        return (id(value), *[_signature(v, keep) for v in value])
    if isinstance(value, Mapping):
        return (id(value), *[(k, _signature(v, keep)) for k, v in value.items()])
    if isinstance(value, torch.optim.Optimizer):
        return (id(value), *[(len(g["params"]), g.get("lr")) for g in value.param_groups])
    return id(value)


def _module_signature(module: torch.nn.Module, keep: list) -> tuple:
    # Surgery replaces submodules; freezing flips requires_grad; weight swaps write in place.
    modules = list(module.modules())
    params = list(module.parameters())
    keep.append(modules)
    keep.append(params)
    return (tuple(map(id, modules)), tuple(map(id, params)),
            tuple([(p._version, p.requires_grad) for p in params]))


def snapshot(state: Any) -> tuple[list, list]:
    """The signatures of the tracked fields of ``state``, and the objects they refer to."""
    keep: list = []
    return [_signature(getattr(state, f), keep) for f in TRACKED_FIELDS], keep


def changed_fields(before: tuple[list, list], state: Any) -> str:
    """The tracked fields whose signature differs from ``before``, comma-separated."""
    after, _ = snapshot(state)
    return ",".join([f for f, b, a in zip(TRACKED_FIELDS, before[0], after) if b != a])

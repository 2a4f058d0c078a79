"""Which State fields a call replaced or mutated in place, detected without copying data.

Replacement shows as a new object in the field (``is`` comparison). In-place writes show in
tensor version counters (PyTorch bumps ``tensor._version`` on every in-place op). For the
model, the signature is its module and parameter ids (surgery), the parameters' versions
(weight writes) and ``requires_grad`` flags (freezing); the module walk is cached per model
until a module or parameter is registered anywhere (PyTorch's global registration hooks).
This runs around every algorithm and callback call, so it is written for speed.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import torch
from torch.nn.modules import module as _module_hooks

__all__ = ["TRACKED_FIELDS", "FieldWatcher"]

TRACKED_FIELDS = ("batch", "outputs", "loss", "model", "optimizers")

_Tensor = torch.Tensor
_version, _requires_grad = attrgetter("_version"), attrgetter("requires_grad")
_structure_version = 0


def _on_registration(*args: Any) -> None:
    global _structure_version
    _structure_version += 1


_module_hooks.register_module_module_registration_hook(_on_registration)
_module_hooks.register_module_parameter_registration_hook(_on_registration)


def _data_signature(value: Any) -> Any:
    """Ids and versions of the tensors in ``value`` (a tensor, or a tuple / list / dict of them)."""
    if value is None:
        return None
    if isinstance(value, _Tensor):
        return value._version
    cls = type(value)
    if cls is tuple or cls is list:
        return [(id(v), v._version) if isinstance(v, _Tensor) else id(v) for v in value]
    if cls is dict:
        return [(k, id(v), v._version) if isinstance(v, _Tensor) else (k, id(v)) for k, v in value.items()]
    return None


def _held(value: Any) -> Any:
    """What must stay referenced so that the ids in a signature cannot be reused."""
    cls = type(value)
    if cls is list:
        return tuple(value)
    if cls is dict:
        return tuple(value.values())
    return None


def _optimizer_signature(optimizers: list) -> Any:
    if len(optimizers) == 1:  # the usual case, without the loop
        groups = optimizers[0].param_groups
        return id(optimizers[0]), [(len(g["params"]), g.get("lr")) for g in groups]
    return [(id(o), [(len(g["params"]), g.get("lr")) for g in o.param_groups]) for o in optimizers]


class FieldWatcher:
    """Takes a :meth:`snapshot` of a State before a call and names the fields that
    :meth:`changed` after it."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self._model: Any = None
        self._walk: tuple = (-1, None, [])

    def _model_signature(self, model: Any) -> Any:
        if not isinstance(model, torch.nn.Module):
            return None
        walk = self._walk
        if model is not self._model or walk[0] != _structure_version:
            modules, params = list(model.modules()), list(model.parameters())
            structure = (tuple(map(id, modules)), tuple(map(id, params)))
            self._model, walk = model, (_structure_version, structure, params, modules)
            self._walk = walk
        params = walk[2]
        return (walk[1], list(map(_version, params)), list(map(_requires_grad, params)))

    def snapshot(self) -> tuple:
        s = self.state
        batch, outputs, loss, model, optimizers = s.batch, s.outputs, s.loss, s.model, s.optimizers
        return (batch, outputs, loss, model, optimizers,
                _data_signature(batch), _data_signature(outputs), _data_signature(loss),
                self._model_signature(model), _optimizer_signature(optimizers),
                _held(batch), _held(outputs))

    def changed(self, before: tuple) -> tuple[str, tuple]:
        """The tracked fields replaced or mutated since ``before``, comma-separated ('' if none),
        and the new snapshot (the next call's ``before``)."""
        after = self.snapshot()
        names = [name for i, name in enumerate(TRACKED_FIELDS)
                 if before[i] is not after[i] or before[i + 5] != after[i + 5]]
        return ",".join(names), after

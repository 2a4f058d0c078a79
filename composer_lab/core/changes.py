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
from torch.optim import optimizer as _optimizer_hooks
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

_optimizer_steps = 0


def _on_optimizer_step(*args: Any) -> None:
    global _optimizer_steps
    _optimizer_steps += 1


_optimizer_hooks.register_optimizer_step_post_hook(_on_optimizer_step)

# Events after which code outside the engine may have changed the model or optimizers in
# place (a loaded checkpoint, a user's cell between two fits): never reuse a snapshot there.
_BOUNDARY_EVENTS = frozenset({"init", "before_load", "after_load", "fit_start", "eval_standalone_start",
                              "predict_start", "eval_before_all"})


def _data_signature(value: Any) -> Any:
    """Versions (and, in mutable containers, ids) of the tensors in ``value``: a tensor, or a
    tuple / list / dict of them. A tuple's elements cannot change while the tuple is held."""
    if value is None:
        return None
    if isinstance(value, _Tensor):
        return value._version
    cls = type(value)
    if cls is tuple:
        try:
            return tuple(map(_version, value))  # the usual (input, target) batch
        except AttributeError:
            return [v._version if isinstance(v, _Tensor) else id(v) for v in value]
    if cls is list:
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


class FieldWatcher:
    """Takes a :meth:`snapshot` of a State before a call and names the fields that
    :meth:`changed` after it."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self._model: Any = None
        self._walk: tuple = (-1, None, [])
        self._last: Any = None

    def _walk_model(self, model: Any) -> tuple:
        """The model's module and parameter ids, and its parameters (kept referenced)."""
        if isinstance(model, torch.nn.Module):
            modules, params = list(model.modules()), list(model.parameters())
            walk = (_structure_version, (tuple(map(id, modules)), tuple(map(id, params))), params, modules)
        else:
            walk = (_structure_version, None, [], [])
        self._model, self._walk = model, walk
        return walk

    def snapshot(self) -> tuple:
        """``(fields, signatures, held, counters)``: the tracked fields' objects, their
        signatures (ints, floats and tuples of them), what must stay referenced for the
        signatures' ids, and the hook counters it was taken under. Written out for speed."""
        s = self.state
        batch, outputs, loss, model, optimizers = s.batch, s.outputs, s.loss, s.model, s.optimizers
        walk = self._walk
        if model is not self._model or walk[0] != _structure_version:
            walk = self._walk_model(model)
        params = walk[2]
        snap = self._last = (
            (batch, outputs, loss, model, optimizers),
            (_data_signature(batch),
             outputs._version if type(outputs) is _Tensor else _data_signature(outputs),
             loss._version if type(loss) is _Tensor else _data_signature(loss),
             # Versions only grow, so their sum moves on any in-place write; the count of
             # trainable parameters moves when one is frozen or unfrozen.
             (walk[1], sum(map(_version, params)), sum(map(_requires_grad, params))),
             tuple([g.get("lr") for o in optimizers for g in o.param_groups])),
            None if type(batch) is tuple and type(outputs) is not list and type(outputs) is not dict
            else (_held(batch), _held(outputs)),
            (_structure_version, _optimizer_steps))
        return snap

    def snapshot_before(self, event: Any) -> tuple:
        """The snapshot before the first call of ``event``, reusing the last one where that is
        sound: between two events only the trainer's own code runs, which replaces batch,
        outputs and loss (seen by identity) and changes parameters and learning rates only
        through ``optimizer.step()`` (seen by PyTorch's optimizer-step hook). Elsewhere (after
        a boundary event, or after any hook fired) a full snapshot is taken."""
        last = self._last
        if (last is None or last[3] != (_structure_version, _optimizer_steps)
                or event._value_ in _BOUNDARY_EVENTS):
            return self.snapshot()
        s = self.state
        batch, outputs, loss, model, optimizers = s.batch, s.outputs, s.loss, s.model, s.optimizers
        fields, sigs = last[0], last[1]
        if model is not fields[3] or optimizers is not fields[4]:
            return self.snapshot()
        snap = self._last = (
            (batch, outputs, loss, model, optimizers),
            (sigs[0] if batch is fields[0] else _data_signature(batch),
             sigs[1] if outputs is fields[1] else _data_signature(outputs),
             sigs[2] if loss is fields[2] else _data_signature(loss),
             sigs[3], sigs[4]),
            None if type(batch) is tuple and type(outputs) is not list and type(outputs) is not dict
            else (_held(batch), _held(outputs)),
            last[3])
        return snap

    def forget(self) -> None:
        """Take the next snapshot in full (after a call raised, say)."""
        self._last = None

    def changed(self, before: tuple) -> tuple[str, tuple]:
        """The tracked fields replaced or mutated since ``before``, comma-separated ('' if none),
        and the new snapshot (the next call's ``before``)."""
        after = self.snapshot()
        old, new = before[0], after[0]
        if (old[0] is new[0] and old[1] is new[1] and old[2] is new[2] and old[3] is new[3]
                and old[4] is new[4] and before[1] == after[1]):
            return "", after
        return ",".join([name for name, b, a, sb, sa in zip(TRACKED_FIELDS, old, new, before[1], after[1])
                         if b is not a or sb != sa]), after

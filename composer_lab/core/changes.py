"""Which State fields a call replaced or mutated in place, detected without copying data.

Replacement shows as a new object in the field (``is`` comparison). In-place writes show in
tensor version counters (PyTorch bumps ``tensor._version`` on every in-place op; a write
through ``tensor.data`` goes to a detached alias with its own counter and is not seen). For the
model, the signature is its module and parameter ids (surgery), the parameters' versions
(weight writes) and ``requires_grad`` flags (freezing); the module walk is cached per model
until a module or parameter is registered anywhere (PyTorch's global registration hooks).
This runs around every algorithm and callback call, so it is written for speed: after a call,
the usual answer (nothing changed) is checked first, with one pass over the versions of the
batch, outputs, loss and parameters and no snapshot built.

Those hooks are PyTorch's process-wide ones, so they are installed only inside
:func:`torch_hooks` (the engine's :meth:`~composer_lab.core.engine.Engine.running`, entered by
the trainer around fit, eval and predict) and removed after it; importing composer_lab installs
nothing. Outside it the watcher takes a full snapshot for every call: slower, equally right.
"""

from __future__ import annotations

from contextlib import contextmanager
from operator import attrgetter
from typing import Any, Iterator, Optional

import torch
from torch.optim import optimizer as _optimizer_hooks
from torch.nn.modules import module as _module_hooks

from composer_lab.core.event import Event

__all__ = ["TRACKED_FIELDS", "FieldWatcher", "torch_hooks"]

TRACKED_FIELDS = ("batch", "outputs", "loss", "model", "optimizers")

_Tensor = torch.Tensor
_version, _requires_grad = attrgetter("_version"), attrgetter("requires_grad")
_structure_version = 0  # bumped when a module or parameter is registered anywhere
_hooks = 0  # bumped by that, by every optimizer step, and when hooks come or go
_handles: list = []  # the installed hooks' handles, while some engine runs (else empty)
_users = 0  # how many torch_hooks() contexts are open (eval runs inside fit)


def _on_registration(*args: Any) -> None:
    global _structure_version, _hooks
    _structure_version += 1
    _hooks += 1


def _on_optimizer_step(*args: Any) -> None:
    global _hooks
    _hooks += 1


@contextmanager
def torch_hooks() -> Iterator[None]:
    """PyTorch's global module/parameter registration and optimizer-step hooks, installed for
    the duration (nested uses share one installation) and removed when the last one exits."""
    global _users, _hooks, _structure_version
    if _users == 0:
        _structure_version += 1  # modules registered while no hook listened: walk models again
        _handles[:] = [_module_hooks.register_module_module_registration_hook(_on_registration),
                       _module_hooks.register_module_parameter_registration_hook(_on_registration),
                       _optimizer_hooks.register_optimizer_step_post_hook(_on_optimizer_step)]
    _users += 1
    _hooks += 1  # a snapshot taken without hooks is not reused under them
    try:
        yield
    finally:
        _users -= 1
        _hooks += 1
        if _users == 0:
            for handle in _handles:
                handle.remove()
            _handles.clear()

# Events after which code outside the engine may have changed the model or optimizers in
# place (a loaded checkpoint, a user's cell between two fits): never reuse a snapshot there.
_BOUNDARY_EVENTS = frozenset({Event.INIT, Event.BEFORE_LOAD, Event.AFTER_LOAD, Event.FIT_START,
                              Event.EVAL_STANDALONE_START, Event.PREDICT_START, Event.EVAL_BEFORE_ALL})


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


def _plain_tensors(batch: Any, outputs: Any, loss: Any) -> Optional[list]:
    """The tensors of ``batch``, ``outputs`` and ``loss`` in that order, when each is None, a
    tensor or a tuple of tensors (the usual case): their versions then tell every in-place
    write. None when one of them holds anything else."""
    if type(batch) is tuple and len(batch) == 2 and type(outputs) is _Tensor and type(loss) is _Tensor:
        inputs, targets = batch  # the usual step, answered without the loop below
        if type(inputs) is _Tensor and type(targets) is _Tensor:
            return [inputs, targets, outputs, loss]
    tensors = []
    for value in (batch, outputs, loss):
        if isinstance(value, _Tensor):
            tensors.append(value)
        elif type(value) is tuple:
            for item in value:
                if not isinstance(item, _Tensor):
                    return None
            tensors.extend(value)
        elif value is not None:
            return None
    return tensors


def _learning_rates(optimizers: Any) -> list:
    """The learning rate of every parameter group of ``optimizers``, in order."""
    lrs = []
    for optimizer in optimizers:  # loops, not a comprehension: one Python call less (Python 3.11)
        for group in optimizer.param_groups:
            lrs.append(group.get("lr"))
    return lrs


class _Snapshot:
    """What :meth:`FieldWatcher.snapshot` saw of a State, without copies of any data.

    ``batch``, ``outputs``, ``loss``, ``model``, ``optimizers``: the objects in those fields.
    When batch, outputs and loss are plain (see :func:`_plain_tensors`), ``tensors`` lists their
    tensors and then the model's parameters, and ``versions`` their versions: one pass over them
    tells any in-place write. Otherwise ``tensors`` is None and ``data`` holds the three fields'
    :func:`_data_signature` (``held``: what keeps the ids in them from being reused).
    ``walk``: the model walk it was taken under (structure version, ids, parameters, modules);
    ``param_versions``, ``trainable`` (the count of parameters that require grad),
    ``lrs``; ``hooks``: the hook counter it was taken under.
    """

    __slots__ = ("batch", "outputs", "loss", "model", "optimizers", "tensors", "versions", "data", "held", "walk",
                 "param_versions", "trainable", "lrs", "hooks")

    def __init__(self, state: Any, walk: tuple, param_versions: tuple, trainable: int, lrs: list,
                 hooks: int) -> None:
        self.model, self.optimizers = state.model, state.optimizers
        self.walk, self.param_versions, self.trainable, self.lrs = walk, param_versions, trainable, lrs
        self.hooks = hooks
        self.see_data(state.batch, state.outputs, state.loss)

    def see_data(self, batch: Any, outputs: Any, loss: Any) -> None:
        """Take batch, outputs and loss again (the rest of the snapshot still holds)."""
        self.batch, self.outputs, self.loss = batch, outputs, loss
        data = _plain_tensors(batch, outputs, loss)
        if data is not None:
            self.tensors, self.versions = data + self.walk[2], tuple(map(_version, data)) + self.param_versions
            self.data = self.held = None
        else:
            self.tensors, self.versions = None, ()
            self.data = (_data_signature(batch), _data_signature(outputs), _data_signature(loss))
            self.held = (_held(batch), _held(outputs), _held(loss))

    def data_signatures(self) -> tuple:
        """The signatures of batch, outputs and loss, each as :func:`_data_signature` gives it."""
        if self.tensors is None:
            return self.data
        versions, signatures, start = self.versions, [], 0
        for value in (self.batch, self.outputs, self.loss):
            if value is None:
                signatures.append(None)
            elif type(value) is tuple:
                signatures.append(versions[start:start + len(value)])
                start += len(value)
            else:
                signatures.append(versions[start])
                start += 1
        return tuple(signatures)


class FieldWatcher:
    """Keeps a snapshot of a State (:meth:`watch` before the first call of an event) and names
    the fields that each call :meth:`changed`."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self._model: Any = None
        self._walk: tuple = (-1, None, [], [])
        self._last: Optional[_Snapshot] = None

    def _walk_model(self, model: Any) -> tuple:
        """The model's module and parameter ids, and its parameters (kept referenced)."""
        if isinstance(model, torch.nn.Module):
            modules, params = list(model.modules()), list(model.parameters())
            walk = (_structure_version, (tuple(map(id, modules)), tuple(map(id, params))), params, modules)
        else:
            walk = (_structure_version, None, [], [])
        self._model, self._walk = model, walk
        return walk

    def snapshot(self) -> _Snapshot:
        """The tracked fields now, without copying data; it becomes the last snapshot."""
        s = self.state
        model, optimizers = s.model, s.optimizers
        walk = self._walk
        if model is not self._model or walk[0] != _structure_version or not _users:
            walk = self._walk_model(model)
        params = walk[2]
        snap = self._last = _Snapshot(s, walk, tuple(map(_version, params)), sum(map(_requires_grad, params)),
                                      _learning_rates(optimizers), _hooks)
        return snap

    def watch(self, event: Any) -> None:
        """Make the last snapshot the state before the first call of ``event``, reusing it where
        that is sound: between two events only the trainer's own code runs, which replaces
        batch, outputs and loss (seen by identity) and changes parameters and learning rates
        only through ``optimizer.step()`` (seen by PyTorch's optimizer-step hook). Elsewhere
        (after a boundary event, or after any hook fired) a full snapshot is taken."""
        last = self._last
        if last is None or last.hooks != _hooks or not _users or event in _BOUNDARY_EVENTS:
            self.snapshot()
            return
        s = self.state
        if s.model is not last.model or s.optimizers is not last.optimizers:
            self.snapshot()
        elif s.batch is not last.batch or s.outputs is not last.outputs or s.loss is not last.loss:
            last.see_data(s.batch, s.outputs, s.loss)  # replaced: only their versions are read again

    def forget(self) -> None:
        """Take the next snapshot in full (after a call raised, say)."""
        self._last = None

    def changed(self) -> tuple[str, ...]:
        """The tracked fields replaced or mutated since the last snapshot, in the order of
        ``TRACKED_FIELDS`` (empty if none); the state now becomes the last snapshot, to compare
        the next call with. The usual answer (nothing changed) is checked first, without
        building a snapshot."""
        s, before = self.state, self._last
        # (plain `is` tests: Python specialises these attribute reads; a C-level getter is slower)
        if (s.batch is before.batch and s.outputs is before.outputs and s.loss is before.loss
                and s.model is before.model and s.optimizers is before.optimizers
                and before.tensors is not None and before.hooks == _hooks and _users
                and tuple(map(_version, before.tensors)) == before.versions
                and sum(map(_requires_grad, before.walk[2])) == before.trainable
                and _learning_rates(s.optimizers) == before.lrs):
            return ()
        after = self.snapshot()
        names = [name for name, b, a, sb, sa in zip(TRACKED_FIELDS, (before.batch, before.outputs, before.loss),
                                                     (after.batch, after.outputs, after.loss),
                                                     before.data_signatures(), after.data_signatures())
                 if b is not a or sb != sa]
        if (before.model is not after.model or before.walk[1] != after.walk[1]
                or before.param_versions != after.param_versions or before.trainable != after.trainable):
            names.append("model")
        if before.optimizers is not after.optimizers or before.lrs != after.lrs:
            names.append("optimizers")
        return tuple(names)

"""Which State fields a call replaced or mutated in place, detected without copying data.

Replacement shows as a new object in the field (compared by id while the old one is held). In-place
writes show in tensor version counters (PyTorch bumps ``tensor._version`` on every in-place op; a
write through ``tensor.data`` goes to a detached alias with its own counter and is not seen).

Two parts, so that the usual call costs the same whatever the model's size:

- the fields' identities, the versions of the batch, outputs and loss tensors and the learning
  rates: O(1) in the model, compared around every call;
- the model's signature (its module and parameter ids for surgery, the parameters' versions for
  weight writes, their ``requires_grad`` flags for freezing): O(parameters), taken before and
  after only the calls that may write the model, i.e. whose ``writes`` (at the event at hand,
  when declared event by event) is not a frozenset (undeclared) or names ``'model'``. A
  declaration is trusted: an object declaring
  ``writes = frozenset({'batch'})`` is never compared on the model (tests/trainer/
  test_writes_declared.py checks the library's claims).

The cheap part is taken afresh at every event, and again only after a call that changed something:
after a call, the usual answer (nothing changed) is told first and builds nothing, from the same
five objects, one pass over the versions of a flat list of the batch, outputs and loss tensors,
the learning rates and, around a call that may write the model, its parameters' versions and
flags (while no hook fired, the kept walk still holds its modules). The model's signature is
reused from one call to the next, across events too, while no hook fired: between events only
the trainer's code runs, which changes parameters only through ``optimizer.step()``; after a
boundary event (a loaded checkpoint, a user's cell between two fits) it is taken afresh.
PyTorch's global hooks tell of module and parameter registrations (which also make the cached
walk of the modules stale) and of optimizer steps; they are installed only inside
:func:`torch_hooks` (the engine's :meth:`~composer_lab.core.engine.Engine.running`, entered by
the trainer around fit, eval and predict) and removed after it, so importing composer_lab
installs nothing. Outside it the model is walked for every signature: slower, equally right.
"""

from __future__ import annotations

from contextlib import contextmanager
from operator import attrgetter
from typing import Any, Iterator

import torch
from torch.optim import optimizer as _optimizer_hooks

from composer_lab.core.event import Event

__all__ = ["TRACKED_FIELDS", "FieldWatcher", "torch_hooks"]

TRACKED_FIELDS = ("batch", "outputs", "loss", "model", "optimizers")

_Tensor, _Module, _Optimizer = torch.Tensor, torch.nn.Module, torch.optim.Optimizer
_version, _versions_and_flags = attrgetter("_version"), attrgetter("_version", "requires_grad")
_CHANGING = type("Changing", (), {"_version": property(lambda self: object())})()  # (see _data_signature)
# _hooks: bumped when a module or parameter is registered or an optimizer steps (hooks in), or hooks come in;
# _structure: bumped when a module or parameter is registered (hooks in), or hooks come in
_hooks = _structure = 0
# the installed hooks' handles, while some engine runs (else empty); how many torch_hooks() contexts are open
_handles, _users = [], 0


def _on_hook(first: Any, *args: Any) -> None:
    """A module or parameter registered (module hooks: ``first`` is the module) or a step."""
    global _structure, _hooks
    _structure, _hooks = _structure + (not isinstance(first, _Optimizer)), _hooks + 1


@contextmanager
def torch_hooks() -> Iterator[None]:
    """PyTorch's global module and parameter registration and optimizer-step hooks, installed for
    the duration (nested uses share one installation) and removed when the last one exits."""
    global _users
    if _users == 0:
        _handles[:] = [torch.nn.modules.module.register_module_module_registration_hook(_on_hook),
                       torch.nn.modules.module.register_module_parameter_registration_hook(_on_hook),
                       _optimizer_hooks.register_optimizer_step_post_hook(_on_hook)]
    _users += 1
    _on_hook(None)  # a walk or signature taken without the hooks is not reused under them
    try:
        yield
    finally:
        _users -= 1
        while _users == 0 and _handles:
            _handles.pop().remove()


# Events after which code outside the engine may have changed the model in place (a loaded
# checkpoint, a user's cell between two fits): the model's last signature is not reused there.
_BOUNDARY_EVENTS = frozenset({Event.INIT, Event.BEFORE_LOAD, Event.AFTER_LOAD, Event.FIT_START,
                              Event.EVAL_STANDALONE_START, Event.PREDICT_START, Event.EVAL_BEFORE_ALL})


def _data_signature(value: Any, tensors: list) -> Any:
    """Versions (and, in mutable containers, ids) of the tensors in ``value``: a tensor, or a
    tuple / list / dict of them. A tuple's elements cannot change while the tuple is held. The
    signature is a tuple, one item per object it puts in ``tensors``: a tensor's version for each
    tensor; a container, whose signature versions do not tell, puts there :data:`_CHANGING`
    (whose version never equals its one item, the container's ids and versions)."""
    items = (value,) if isinstance(value, _Tensor) else value if type(value) is tuple else ()
    if type(value) is not list and type(value) is not dict:
        try:  # (a tuple of other things than tensors raises: ids and versions, as a list's)
            signature = tuple(map(_version, items))  # (a tensor's signature: its version in a tuple)
            tensors += items
            return signature
        except AttributeError:
            pass
    tensors.append(_CHANGING)  # (the held copy, last, is compared only once the ids are equal: by identity)
    items = value.items() if type(value) is dict else enumerate(value)
    return ([*[(k, id(v), v._version if isinstance(v, _Tensor) else None) for k, v in items], tuple(value)],)


def _learning_rates(optimizers: Any) -> list:
    """The learning rate of every parameter group of ``optimizers``, in order."""
    lrs = []
    for optimizer in optimizers:  # loops, not a comprehension: one Python call less
        for group in optimizer.param_groups:
            lrs.append(group.get("lr"))
    return lrs


def _fields(state: Any) -> tuple:
    """The O(1) signature: the five fields (compared by identity); the signatures of batch, outputs
    and loss (:func:`_data_signature`) and the learning rates; the tensors (or stand-ins) those
    signatures are taken from, in one flat list, and its versions, the signatures end to end: one
    pass over the list then tells that none changed."""
    batch, outputs, loss, optimizers, flat = state.batch, state.outputs, state.loss, state.optimizers, []
    objects, lrs = (batch, outputs, loss, state.model, optimizers), _learning_rates(optimizers)
    if (type(batch) is tuple and len(batch) == 2
            and type(outputs) is _Tensor is type(loss) is type(batch[0]) is type(batch[1])):
        versions = tuple(map(_version, flat := [*batch, outputs, loss]))  # the usual step: no call below
        return objects, (versions[:2], versions[2:3], versions[3:], None, lrs), flat, versions
    data = (_data_signature(batch, flat), _data_signature(outputs, flat), _data_signature(loss, flat), None, lrs)
    return objects, data, flat, data[0] + data[1] + data[2]


def _walk(model: Any) -> tuple:
    """The model's modules and parameters (held, so that their ids stay theirs) and their ids."""
    modules, params, stack = [], [], [model] if isinstance(model, _Module) else []
    while stack:  # a walk of our own: Module.modules() and .parameters() cost 8x as much
        module = stack.pop()
        if module is not None:  # (a submodule registered as None)
            modules.append(module)
            params.extend([p for p in module._parameters.values() if p is not None])
            stack.extend(module._modules.values())
    return model, params, (tuple(map(id, modules)), tuple(map(id, params))), modules, _structure


class FieldWatcher:
    """Names the fields each call :meth:`changed`: :meth:`watch` at the start of an event's calls,
    :meth:`before` each call, :meth:`changed` after it. It holds the fields as :func:`_fields`
    gives them, the model's last signature, walk and hook count, and whether the call under way
    is compared on the model."""

    def __init__(self, state: Any) -> None:
        self.state, self._fields, self._model, self._watching = state, ((), (), (), ()), None, False
        self._event: Any = None

    def watch(self, event: Event) -> None:
        """Take the fields as they are now, before the first call of ``event``."""
        self._fields, self._model = _fields(self.state), None if event in _BOUNDARY_EVENTS else self._model
        self._event = event

    def release(self) -> None:
        """Let go of the fields after an event's calls: the trainer frees what it replaces (last
        step's loss, and its autograd graph) in its own time, not in the next event's."""
        self._fields = ((), (), (), ())

    def before(self, obj: Any) -> None:
        """Ready the check of ``obj``'s call: the model's signature when it may write the model."""
        writes = getattr(obj, "writes", None)
        if type(writes) is dict:  # declared event by event (an event left out: unknown)
            writes = writes.get(self._event)
        # (a callback's own 'writes' may be anything but a frozenset: unknown)
        self._watching = type(writes) is not frozenset or "model" in writes
        if self._watching and not (self._model is not None and self._model[2] == _hooks and _users):
            self._model = self._signature()  # (else the last one holds: no hook fired, no undeclared call ran)

    def _signature(self) -> tuple:
        """The model's ids, its parameters' versions and ``requires_grad`` flags, the walk that
        holds what the ids name (kept while no module or parameter was registered) and the hook count."""
        model, last = self.state.model, self._model
        walk = last[1] if last and last[1][0] is model and last[1][4] == _structure and _users else _walk(model)
        return (walk[2], tuple(map(_versions_and_flags, walk[1]))), walk, _hooks

    def changed(self) -> tuple[str, ...]:
        """The tracked fields replaced or mutated by the call, in the order of ``TRACKED_FIELDS``
        (empty if none); the state now is what the next call is compared with. The usual answer,
        nothing, is told first, building nothing: the same five objects, the same versions of the
        flat tensors and learning rates, and, if the model is watched and no hook fired, the same
        versions and flags of its parameters (its modules then are the same)."""
        s, (objects, data, tensors, versions), moved = self.state, self._fields, False
        if self._watching:
            (ids, flags), walk, hooks = last = self._model
            now = hooks == _hooks and _users and walk[0] is s.model and tuple(map(_versions_and_flags, walk[1]))
            if now != flags:  # (now is False when a hook fired or the model was replaced: look again)
                self._model = ((ids, now), walk, hooks) if now else self._signature()
                moved = self._model[0] != last[0]
        if not moved and (s.batch is objects[0] and s.outputs is objects[1] and s.loss is objects[2]
                          and s.model is objects[3] and s.optimizers is objects[4]
                          and tuple(map(_version, tensors)) == versions and _learning_rates(s.optimizers) == data[4]):
            return ()
        self._fields = fields = _fields(s)
        return tuple([name for name, b, a, db, da in zip(TRACKED_FIELDS, objects, fields[0], data, fields[1])
                      if b is not a or db != da or (moved and name == "model")])

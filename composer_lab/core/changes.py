"""Change detection: which State fields a call changed, told by an observer the engine calls
around each call (:meth:`ChangeObserver.before`, :meth:`ChangeObserver.after`).

A field was replaced when it holds another object (compared by identity while the old one is
held) and mutated in place when a tensor's version counter moved (PyTorch bumps ``_version`` on
every in-place op); the optimizers changed when a learning rate did. The model is compared in one
of three ways, chosen per call:

- trusted: the call's ``writes`` at the event leaves ``'model'`` out (and ``check_writes`` is
  off): the model is not compared;
- watched: inside :meth:`ChangeObserver.watching` (the trainer's fit, eval and predict), a
  :class:`CallWrites` torch-function mode notes the tensors the call's torch functions are given
  that are the model's parameters or share a storage with them or with the step's tensors, and
  PyTorch's global module and parameter registration hooks tell a structural change: the cost is
  in the call's operations, not in the model's size;
- signed: otherwise (events run by hand, or ``check_writes``), every parameter's version and
  ``requires_grad``, every module's and parameter's identity and every module's class, before and
  after the call.

No torch class is patched: the hooks are PyTorch's own, registered while ``watching`` is entered
and removed after. What they cannot see is listed in docs/trace.md ("What `changed` cannot see").
"""

from __future__ import annotations

import operator
from contextlib import contextmanager
from typing import Any, Iterator, NamedTuple, Optional

import torch
from torch.nn.modules import module as _module_hooks
from torch.overrides import TorchFunctionMode

from composer_lab.core.event import Event
from composer_lab.core.state import TRACKED_FIELDS

__all__ = ["ChangeObserver", "NoObserver", "CallWrites", "UndeclaredWrite"]

_STEP_FIELDS = TRACKED_FIELDS[:3]  # batch, outputs, loss: compared by their tensors' versions
_tracked_fields = operator.attrgetter(*TRACKED_FIELDS)  # state -> (batch, outputs, loss, model, optimizers)
_BOUNDARY_EVENTS = frozenset({Event.INIT, Event.BEFORE_LOAD, Event.AFTER_LOAD, Event.FIT_START,
                              Event.EVAL_STANDALONE_START, Event.PREDICT_START, Event.EVAL_BEFORE_ALL})
"""Events after which code outside the engine may have rebuilt the model: its walk is taken afresh."""


class UndeclaredWrite(ValueError):
    """A call changed a State field that its ``writes`` declaration leaves out."""


def _version(value: Any) -> Optional[int]:
    return value._version if isinstance(value, torch.Tensor) else None


def _data_signature(value: Any, versions: bool) -> tuple[Any, tuple]:
    """What tells an in-place change of ``value`` (a tensor, or a tuple / list / dict of them, one
    level deep) and the tensors it holds. A tuple's items cannot change while it is held: their
    versions; a list's or dict's items can: their keys, ids and versions. Without ``versions``
    (a watched call, whose mode sees the in-place writes) only a list's or dict's items are read."""
    if isinstance(value, torch.Tensor):
        return value._version if versions else None, (value,)
    if isinstance(value, tuple):
        return tuple([_version(item) for item in value]) if versions else None, value
    if isinstance(value, (list, dict)):
        items = list(value.items() if isinstance(value, dict) else enumerate(value))
        return tuple((key, id(item), _version(item)) for key, item in items), tuple(item for _, item in items)
    return None, ()


def _learning_rates(optimizers: Any) -> list:
    return [group.get("lr") for optimizer in optimizers for group in optimizer.param_groups]


class Fields(NamedTuple):
    """The State as one call found it: the five fields' objects, the data signatures of batch,
    outputs and loss (read with or without their tensors' ``versions``), the items they hold
    (kept, so that their ids stay theirs), the learning rates."""

    objects: tuple
    data: tuple
    held: tuple
    lrs: list
    versions: bool

    @classmethod
    def of(cls, state: Any, versions: bool = True) -> "Fields":
        objects = batch, outputs, loss, _, optimizers = _tracked_fields(state)
        (b, b_held), (o, o_held), (ls, l_held) = (_data_signature(batch, versions), _data_signature(outputs, versions),
                                                  _data_signature(loss, versions))
        return cls(objects, (b, o, ls), (b_held, o_held, l_held), _learning_rates(optimizers), versions)

    def tensors(self) -> list[tuple[str, torch.Tensor]]:
        """The step's tensors with the field each belongs to."""
        return [(name, t) for name, held in zip(_STEP_FIELDS, self.held) for t in held if isinstance(t, torch.Tensor)]

    def differing(self, now: "Fields") -> list[str]:
        """The fields replaced, mutated (a data signature) or, for the optimizers, with another
        learning rate; the usual answer, none, told by three comparisons."""
        if all(map(operator.is_, self.objects, now.objects)) and self.data == now.data and self.lrs == now.lrs:
            return []
        changed = [name for name, was, is_ in zip(TRACKED_FIELDS, self.objects, now.objects) if was is not is_]
        changed += [name for name, was, is_ in zip(_STEP_FIELDS, self.data, now.data) if was != is_]
        return changed + (["optimizers"] if self.lrs != now.lrs else [])


class Walk(NamedTuple):
    """The model's modules and parameters (held, so that their ids stay theirs) and their ids."""

    modules: list
    params: list
    ids: tuple

    @classmethod
    def of(cls, model: Any) -> "Walk":
        modules = list(model.modules()) if isinstance(model, torch.nn.Module) else []
        params = [p for m in modules for p in m._parameters.values() if p is not None]
        return cls(modules, params, (tuple(map(id, modules)), tuple(map(id, params))))

    def flags(self) -> tuple:
        """Every module's class (surgery may swap it in place) and every parameter's version and
        ``requires_grad``."""
        return tuple(map(type, self.modules)), tuple((p._version, p.requires_grad) for p in self.params)


def _storage(tensor: torch.Tensor) -> int:
    """The address of ``tensor``'s storage; 0 for a tensor without one (sparse, nested, meta)."""
    try:
        return tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


class CallWrites(TorchFunctionMode):
    """Watches one call: notes each tensor a torch function is given (also inside a list, as
    ``torch._foreach_add_`` takes them) that is one of ``params`` or shares a storage with one
    of them or with the ``step`` tensors (a view, ``.data``, ``detach()``), with its version,
    storage and ``requires_grad``, before the function runs. :meth:`wrote` names the fields
    whose noted tensors moved."""

    def __init__(self, params: frozenset, storages: frozenset, step: Fields) -> None:
        super().__init__()
        self.params, self.storages, self.step = params, storages, step
        self.noted: dict[int, tuple] = {}
        self._step_fields: Optional[tuple[dict, dict]] = None  # built at the first torch function: most calls make none

    def _step_maps(self) -> tuple[dict, dict]:
        """The step's tensors by id and by storage, each to its field."""
        if self._step_fields is None:
            tensors = self.step.tensors()
            self._step_fields = ({id(t): name for name, t in tensors},
                                 {storage: name for storage, name in ((_storage(t), name) for name, t in tensors)
                                  if storage})
        return self._step_fields

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        for value in (*args, *kwargs.values()):
            for item in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(item, torch.Tensor) and id(item) not in self.noted:
                    self._note(item)
        return func(*args, **kwargs)

    def _note(self, tensor: torch.Tensor) -> None:
        storage = _storage(tensor)
        by_id, by_storage = self._step_maps()
        fields = {by_id.get(id(tensor)), by_storage.get(storage) if storage else None} - {None}
        if id(tensor) in self.params or storage in self.storages:
            fields.add("model")
        if fields:
            self.noted[id(tensor)] = (tensor, tensor._version, storage, tensor.requires_grad, fields)

    def wrote(self) -> set[str]:
        """The fields whose noted tensors were written, given another storage or another ``requires_grad``."""
        return {field for tensor, version, storage, grad, fields in self.noted.values()
                if (tensor._version, _storage(tensor), tensor.requires_grad) != (version, storage, grad)
                for field in fields}


class _Call(NamedTuple):
    """What :meth:`ChangeObserver.before` took for one call, read back by :meth:`ChangeObserver.after`."""

    fields: Fields
    declared: Any  # the call's writes at the event (a frozenset), or None: unknown
    how: str  # 'trusted', 'watched' or 'signed'
    model: Any  # watched: the CallWrites mode; signed: (walk ids, flags)
    registrations: int
    event: Event


class ChangeObserver:
    """Names the State fields each call changed: :meth:`before` each call, :meth:`after` it
    (nested calls, an event fired from inside a call, are answered inside out) and
    :meth:`event_end` after an event's calls: within an event the State a call left is the one
    the next call finds, so it is taken once between two calls. With
    ``check_writes`` no ``writes`` declaration is trusted: every call is signed, and :meth:`after`
    raises :class:`UndeclaredWrite` at a call that changed a field its declaration leaves out."""

    def __init__(self, state: Any, check_writes: bool = False) -> None:
        self.state, self.check_writes = state, check_writes
        self.registrations = 0
        """How many modules and parameters were registered anywhere while :meth:`watching`."""
        self._depth, self._handles, self._calls = 0, [], []
        self._walk: Optional[tuple] = None  # (model, registrations, Walk, params' ids, their storages)
        self._left: Optional[Fields] = None  # the State as the last call of the event under way left it

    @contextmanager
    def watching(self) -> Iterator[None]:
        """PyTorch's global module and parameter registration hooks, for the duration (nested
        uses share them): calls are then watched instead of signed."""
        if self._depth == 0:
            self._handles = [_module_hooks.register_module_module_registration_hook(self._registered),
                             _module_hooks.register_module_parameter_registration_hook(self._registered)]
            self._walk = None
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                for handle in self._handles:
                    handle.remove()
                self._handles = []

    def _registered(self, *args: Any) -> None:
        self.registrations += 1

    def before(self, obj: Any, event: Event) -> None:
        """Take the State as ``obj``'s call at ``event`` finds it."""
        writes = getattr(obj, "writes", None)
        declared = writes.get(event) if isinstance(writes, dict) else writes
        declared = declared if isinstance(declared, frozenset) else None
        how = self._how(declared)
        fields, model = self._fields(versions=how != "watched"), None
        if how == "watched":
            model = self._watch(fields, event)
        elif how == "signed":
            walk = Walk.of(self.state.model)
            model = (walk.ids, walk.flags())
        self._calls.append(_Call(fields, declared, how, model, self.registrations, event))

    def _how(self, declared: Optional[frozenset]) -> str:
        """How a call that ``declared`` its writes is compared: 'trusted', 'watched' or 'signed'."""
        if self.check_writes:
            return "signed"
        if declared is not None and "model" not in declared:
            return "trusted"
        return "watched" if self._depth else "signed"

    def _fields(self, versions: bool) -> Fields:
        """The State now: as the event's last call left it, when that one was read as fully."""
        left, self._left = self._left, None
        if left is not None and (left.versions or not versions):
            return left
        return Fields.of(self.state, versions)

    def _watch(self, fields: Fields, event: Event) -> CallWrites:
        """A :class:`CallWrites` over the model's parameters (walked again only when the model,
        a registration or a boundary event says so), entered now."""
        model = self.state.model
        if self._walk is None or self._walk[0] is not model or self._walk[1] != self.registrations \
                or event in _BOUNDARY_EVENTS:
            walk = Walk.of(model)
            self._walk = (model, self.registrations, walk, frozenset(walk.ids[1]),
                          frozenset(map(_storage, walk.params)) - {0})
        mode = CallWrites(self._walk[3], self._walk[4], fields)
        mode.__enter__()
        return mode

    def after(self, obj: Any) -> tuple[str, ...]:
        """The tracked fields ``obj``'s call replaced or mutated, in the order of ``TRACKED_FIELDS``."""
        call = self._calls.pop()
        changed = self._model_changed(call)  # (first: a watched call's mode is left before the state is read)
        self._left = Fields.of(self.state, call.fields.versions)
        changed.update(call.fields.differing(self._left))
        if not changed:
            return ()
        fields = tuple(name for name in TRACKED_FIELDS if name in changed)
        undeclared = [name for name in fields if call.declared is not None and name not in call.declared]
        if self.check_writes and undeclared:
            name = type(obj).__name__
            raise UndeclaredWrite(f"{name} changed {undeclared} at {call.event.value}, but its writes declares "
                                  f"{sorted(call.declared)} there: add {undeclared} to {name}.writes (or set it "
                                  f"to None, unknown, to have every call watched)")
        return fields

    def _model_changed(self, call: _Call) -> set[str]:
        """What the call did to the model and, when watched, to the step's tensors."""
        if call.how == "trusted":
            return set()
        if call.how == "signed":
            walk = Walk.of(self.state.model)
            return {"model"} if (walk.ids, walk.flags()) != call.model else set()
        call.model.__exit__(None, None, None)
        wrote = call.model.wrote()
        if self.registrations != call.registrations:  # a module or parameter registered: the model walked again
            walk = self._walk[2]
            self._walk = None
            if Walk.of(self.state.model).ids != walk.ids:
                wrote.add("model")
        return wrote

    def event_end(self) -> None:
        """The event's calls are over: what runs next (the trainer) may change the State, and the
        step's tensors are let go of."""
        self._left = None


class NoObserver:
    """The observer of a trace that records nothing: it compares nothing."""

    @contextmanager
    def watching(self) -> Iterator[None]:
        yield

    def before(self, obj: Any, event: Event) -> None:
        """Nothing to take."""

    def after(self, obj: Any) -> tuple[str, ...]:
        return ()

    def event_end(self) -> None:
        """Nothing held."""

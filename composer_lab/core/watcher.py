"""Change detection: which State fields a call changed, found without copying data.

A field was replaced when it holds another object (compared by identity while the old one is
held) and mutated in place when a tensor's version counter moved (PyTorch bumps ``_version`` on
every in-place op). A :class:`FieldWatcher` compares :class:`Fields`, O(1) in the model, around
every call, in one of two ways. Under the engine's :class:`ModelHooks` (inside
``Engine.watching()``, as the trainer runs), a call whose ``writes`` at the event may include
``'model'`` (a declaration is trusted) is watched by :class:`CallWrites`, which sees what the call
does: the torch functions it runs on the model's parameters or on the step's tensors (batch,
outputs, loss), or on any tensor that shares their storage (a view, ``.data``, ``detach()``),
while the hooks tell a module or parameter registered or removed; the cost is in the call's operations, not
in the model's size, and the step's versions are read only around the calls it does not watch.
Without the hooks (events run by hand), the step's versions are read around every call and a
:class:`ModelSignature` of every parameter's version and flags is taken around the calls that
may write the model. A :class:`CheckedWatcher` (``Engine(check_writes=True)``) trusts no
declaration: it compares the model's signature around every call and raises
:class:`UndeclaredWrite` at the call that changed a field its ``writes`` leaves out.
"""

from __future__ import annotations

from contextlib import contextmanager
from itertools import count, repeat
from operator import attrgetter
from typing import Any, Iterator, NamedTuple, Optional

import torch
from torch.optim import optimizer as _optimizer_hooks
from torch._C import _pop_torch_function_stack as _pop_mode, _push_on_torch_function_stack as _push_mode
from torch.overrides import TorchFunctionMode

from composer_lab.core.event import Event

__all__ = ["TRACKED_FIELDS", "FieldWatcher", "CheckedWatcher", "ModelHooks", "CallWrites", "UndeclaredWrite",
           "UNHOOKED", "register_module_removal_hook"]

TRACKED_FIELDS = ("batch", "outputs", "loss", "model", "optimizers")

_Tensor, _Module, _Optimizer = torch.Tensor, torch.nn.Module, torch.optim.Optimizer
_version, _versions_and_flags = attrgetter("_version"), attrgetter("_version", "requires_grad")
_get, _LR = dict.get, repeat("lr")  # (a param group is a dict: Optimizer.add_param_group requires it)
_MODEL = ("model",)
_STEP_FIELDS = ("batch", "batch", "outputs", "loss")  # (the field of each tensor of the usual step)
_CHANGING = type("Changing", (), {"_version": property(lambda self: object())})()  # (see _data_signature)

# Events after which code outside the engine may have changed the model in place (a loaded
# checkpoint, a user's cell between two fits): the model's last signature is not reused there.
_BOUNDARY_EVENTS = frozenset({Event.INIT, Event.BEFORE_LOAD, Event.AFTER_LOAD, Event.FIT_START,
                              Event.EVAL_STANDALONE_START, Event.PREDICT_START, Event.EVAL_BEFORE_ALL})


UNHOOKED = (-1, -1)
"""The hook counts noted beside a measurement taken without the hooks: never current."""


class UndeclaredWrite(ValueError):
    """A call changed a State field that its ``writes`` declaration leaves out."""


_removal_hooks: dict[int, Any] = {}  # key -> hook(module, name), while some ModelHooks is installed
_removal_keys = count()
_wrappers: dict[str, Any] = {}  # the Module method name -> our wrapper of it that we put there last


def _tell_removal(module: Any, name: str) -> None:
    for hook in list(_removal_hooks.values()):  # (a copy: another thread may install or remove one)
        hook(module, name)


def _telling_delattr(delattr: Any) -> Any:
    def __delattr__(module: Any, name: str) -> None:
        """``Module.__delattr__``, then the removal hooks if a parameter or a submodule went."""
        removes = name in module.__dict__.get("_parameters", ()) or name in module.__dict__.get("_modules", ())
        delattr(module, name)
        if removes:
            _tell_removal(module, name)

    __delattr__.wrapped = delattr
    return __delattr__


def _telling_register_parameter(register_parameter: Any) -> Any:
    def register_parameter_telling(module: Any, name: str, param: Any) -> None:
        """``Module.register_parameter``, then the removal hooks if the parameter is None (``m.bias = None``)."""
        register_parameter(module, name, param)
        if param is None:
            _tell_removal(module, name)

    register_parameter_telling.wrapped = register_parameter
    return register_parameter_telling


_TELLING = {"__delattr__": _telling_delattr, "register_parameter": _telling_register_parameter}


class _RemovalHandle:
    """Removes one removal hook; the last one gives Module back the methods our wrappers wrap,
    where ours are still on top (another library's wrapper over ours stays, and ours under it
    goes on calling what it wraps)."""

    def __init__(self, key: int) -> None:
        self.key = key

    def remove(self) -> None:
        _removal_hooks.pop(self.key, None)
        if not _removal_hooks:
            for name, wrapper in list(_wrappers.items()):
                if _Module.__dict__.get(name) is wrapper:
                    setattr(_Module, name, wrapper.wrapped)
                del _wrappers[name]


def register_module_removal_hook(hook: Any) -> _RemovalHandle:
    """Call ``hook(module, name)`` when a parameter or submodule leaves a module: ``del m.bias``,
    ``del model[1]``, ``m.bias = None``. PyTorch has registration hooks only (and registering None
    calls none), so ``Module.__delattr__`` and ``Module.register_parameter`` are wrapped while a
    hook stands. A write to ``_parameters`` or ``_modules`` itself is not seen."""
    for name, telling in _TELLING.items():
        if name not in _wrappers:  # (ours not put there since the last hook went: wrap what is there now)
            _wrappers[name] = telling(_Module.__dict__[name])
            setattr(_Module, name, _wrappers[name])
    key = next(_removal_keys)
    _removal_hooks[key] = hook
    return _RemovalHandle(key)


class ModelHooks:
    """PyTorch's global module registration and parameter registration hooks, ours for a parameter
    or submodule removed (:func:`register_module_removal_hook`), and with ``optimizer_steps``
    PyTorch's optimizer-step hook, one set per engine, installed while :meth:`installed` is
    entered (nested uses share them) and removed after, so importing composer_lab installs
    nothing. ``fired`` counts every hook call, ``registered`` the registrations and removals (both
    also move when the hooks come in or go): a watcher reuses what it measured
    under the hooks while they stand still, and nothing measured without them (it notes
    :data:`UNHOOKED` as the counts then). Only a model signature reused across events needs to hear
    of optimizer steps (a :class:`CheckedWatcher`'s): watched calls do not, and a hook called at
    every step costs a step time."""

    def __init__(self, optimizer_steps: bool = True) -> None:
        self.fired = self.registered = self.depth = 0
        self.optimizer_steps = optimizer_steps
        self._handles: list = []

    def _on_hook(self, first: Any, *args: Any) -> None:
        """A module or parameter registered or removed (``first`` is the module) or an optimizer stepped."""
        self.registered += not isinstance(first, _Optimizer)
        self.fired += 1

    @contextmanager
    def installed(self) -> Iterator[None]:
        """The hooks, for the duration."""
        if self.depth == 0:
            self._handles = [torch.nn.modules.module.register_module_module_registration_hook(self._on_hook),
                             torch.nn.modules.module.register_module_parameter_registration_hook(self._on_hook),
                             register_module_removal_hook(self._on_hook)]
            if self.optimizer_steps:
                self._handles.append(_optimizer_hooks.register_optimizer_step_post_hook(self._on_hook))
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            if self.depth == 0:
                for handle in self._handles:
                    handle.remove()
                self._handles = []
                self._on_hook(None)  # what was measured under the hooks is not reused without them


class Fields(NamedTuple):
    """The O(1) signature of the State: the five fields' objects (compared by identity), the
    ``tensors`` of batch, outputs and loss whose ``versions`` tell an in-place change (one pass over
    them tells that none changed), the optimizers' learning rates ``lrs``, and ``data``: the
    signatures of batch, outputs and loss one by one, or None in the usual step (an (inputs,
    targets) batch, tensor outputs and loss: the versions are theirs, two, one and one). In the
    usual step ``versions`` is None until read (:meth:`read`): around the calls :class:`CallWrites`
    watches, what they do tells. Flat, so that a step's many snapshots cost one tuple each."""

    batch: Any
    outputs: Any
    loss: Any
    model: Any
    optimizers: Any
    tensors: tuple
    versions: Optional[tuple]
    lrs: list
    data: Optional[tuple]

    def read(self) -> "Fields":
        """These fields with the versions read now, if they were not."""
        if self.versions is not None:
            return self
        return _new(Fields, (*self[:6], tuple(map(_version, self.tensors)), *self[7:]))

    def signatures(self) -> tuple:
        """Each tracked field's data signature, in the order of ``TRACKED_FIELDS`` (None for the
        model, and for the step's fields while their versions are unread)."""
        versions = self.versions
        if self.data is not None:
            return (*self.data, None, self.lrs)
        if versions is None:
            return None, None, None, None, self.lrs
        return versions[:2], versions[2:3], versions[3:], None, self.lrs


class Walk(NamedTuple):
    """The ``model``'s ``modules`` and ``params`` (held, so that their ``ids`` stay theirs), and
    the hooks' ``registered`` count when walked: reused until a registration."""

    model: Any
    params: list
    ids: tuple
    modules: list
    registered: int


class ModelSignature(NamedTuple):
    """The model's module and parameter ``ids``, its parameters' ``flags`` (version and
    ``requires_grad``), the :class:`Walk` they come from and the hooks' ``fired`` count then."""

    ids: tuple
    flags: tuple
    walk: Walk
    fired: int


_NOTHING = Fields(None, None, None, None, None, (), (), [], None)
_WATCHED, _SIGNED = object(), object()  # (FieldWatcher._written: the call is watched by CallWrites, compared on signatures)
_new = tuple.__new__  # (a NamedTuple's own __new__ is Python code; _new(Fields, values) is not)


def _data_signature(value: Any, tensors: list) -> Any:
    """Versions (and, in mutable containers, ids) of the tensors in ``value``: a tensor, or a
    tuple / list / dict of them. A tuple's elements cannot change while the tuple is held. The
    signature is a tuple, one item per object it puts in ``tensors``: a tensor's version for each
    tensor; a container, whose signature versions do not tell, puts there :data:`_CHANGING`
    (whose version never equals its one item, the container's ids and versions)."""
    items = (value,) if isinstance(value, _Tensor) else value if type(value) is tuple else ()
    if type(value) is not list and type(value) is not dict:
        try:  # (a tuple of other things than tensors raises: ids and versions, as a list's)
            signature = tuple(map(_version, items))
            tensors += items
            return signature
        except AttributeError:
            pass
    tensors.append(_CHANGING)  # (the held copy, last, is compared only once the ids are equal: by identity)
    items = value.items() if type(value) is dict else enumerate(value)
    return ([*[(k, id(v), v._version if isinstance(v, _Tensor) else None) for k, v in items], tuple(value)],)


def _learning_rates(optimizers: Any) -> list:
    """The learning rate of every parameter group of ``optimizers``, in order."""
    lrs: list = []
    for optimizer in optimizers:  # (a loop and a map, not a comprehension: no Python call, no bytecode per group)
        lrs += map(_get, optimizer.param_groups, _LR)
    return lrs


def _fields(state: Any, versions: bool = True) -> Fields:
    """The state's :class:`Fields`, the usual step's versions unread unless ``versions``; the usual
    step without a call to :func:`_data_signature` (nor, with one optimizer of one group, to
    :func:`_learning_rates`)."""
    batch, outputs, loss, optimizers = state.batch, state.outputs, state.loss, state.optimizers
    if type(batch) is tuple and len(batch) == 2:
        # (unpacked, not (*batch, ...), and the versions read one by one: 318 -> 281 ns a snapshot, 655 -> 448 ns
        # with the versions read)
        inputs, targets = batch
        if type(outputs) is _Tensor is type(loss) is type(inputs) is type(targets):
            groups = optimizers[0].param_groups if len(optimizers) == 1 else ()
            return _new(Fields, (batch, outputs, loss, state.model, optimizers, (inputs, targets, outputs, loss),
                                 (inputs._version, targets._version, outputs._version, loss._version) if versions
                                 else None,
                                 [groups[0].get("lr")] if len(groups) == 1 else _learning_rates(optimizers), None))
    flat: list = []
    data = (_data_signature(batch, flat), _data_signature(outputs, flat), _data_signature(loss, flat))
    return _new(Fields, (batch, outputs, loss, state.model, optimizers, tuple(flat), data[0] + data[1] + data[2],
                         _learning_rates(optimizers), data))


def _walk(model: Any, registered: int) -> Walk:
    """The model's modules and parameters, by a walk of our own (``Module.modules()`` and
    ``.parameters()`` cost 8x as much)."""
    modules, params, stack = [], [], [model] if isinstance(model, _Module) else []
    while stack:
        module = stack.pop()
        if module is not None:  # (a submodule registered as None)
            modules.append(module)
            params.extend([p for p in module._parameters.values() if p is not None])
            stack.extend(module._modules.values())
    return Walk(model, params, (tuple(map(id, modules)), tuple(map(id, params))), modules, registered)


def _storage(tensor: Any) -> int:
    """The address of ``tensor``'s storage; 0 for a tensor without one (sparse, nested, meta)."""
    try:
        return tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


class CallWrites(TorchFunctionMode):
    """Watches one call for writes to the model and to the step's tensors. Entered around the call,
    it notes each tensor a torch function is given (also inside a list: ``torch._foreach_add_``)
    that is one of the model's parameters or shares the storage of a parameter or of a step tensor
    (a view, ``.data``, ``detach()``, taken now or at an earlier event), with its version, storage
    and, for a parameter, ``requires_grad``, before the function runs. :meth:`wrote` names the
    fields whose noted tensors moved. The step tensors' storages are read at the first tensor a
    torch function is given: a call that runs none costs nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.walk: Optional[Walk] = None
        self._params: frozenset = frozenset()  # the parameters' ids
        self._storages: frozenset = frozenset()  # their storages' addresses
        self.step: tuple = ()
        """The step's tensors watched during the event under way (the usual step's batch, outputs
        and loss tensors; empty between events, so that none is held past its time)."""
        self.step_keys: Optional[tuple] = ((), ())
        """Their ids and storages, read at the first tensor a call gives a torch function (None: unread)."""
        self.noted: dict[int, tuple] = {}
        """The tensors noted since the last :meth:`wrote`: id -> (tensor, version, storage, requires_grad or None)."""

    def of(self, walk: Walk) -> None:
        """Watch ``walk``'s parameters (their ids and storages, read once per walk). The watcher
        sets :attr:`step` (and forgets its keys) when the step's tensors change."""
        self.walk, self._params = walk, frozenset(walk.ids[1])
        self._storages = frozenset(map(_storage, walk.params)) - {0}

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        for value in (*args, *kwargs.values()):
            if type(value) is list or type(value) is tuple:
                for item in value:
                    self._note(item)
            else:
                self._note(value)
        return func(*args, **kwargs)

    def _note(self, value: Any) -> None:
        if isinstance(value, _Tensor) and id(value) not in self.noted:
            is_param, storage, step = id(value) in self._params, _storage(value), self.step_keys
            if step is None:
                step = self.step_keys = (tuple(map(id, self.step)), tuple(map(_storage, self.step)))
            if is_param or storage in self._storages or id(value) in step[0] or (storage and storage in step[1]):
                self.noted[id(value)] = (value, value._version, storage, value.requires_grad if is_param else None)

    def wrote(self) -> tuple[str, ...]:
        """The fields (of ``TRACKED_FIELDS``: the step's, and the model) whose tensors noted since
        the last answer moved, and forget them. A parameter given another storage (``p.data =
        ...``) has the storages read again at the next :meth:`of`."""
        noted, fields = self.noted, set()
        if not noted:
            return ()
        self.noted = {}
        for tensor, version, storage, requires_grad in noted.values():
            if _storage(tensor) != storage:
                self.walk = None
            elif tensor._version == version and (requires_grad is None or tensor.requires_grad == requires_grad):
                continue
            if requires_grad is not None or storage in self._storages:
                fields.add("model")
            ids, storages = self.step_keys or ((), ())
            fields.update([field for field, step_id, step_storage in zip(_STEP_FIELDS, ids, storages)
                           if step_id == id(tensor) or (step_storage == storage and storage)])
        return tuple([field for field in TRACKED_FIELDS if field in fields])


def _differing(before: Fields, now: Fields, written: tuple[str, ...]) -> tuple[str, ...]:
    """The tracked fields whose object or data signature differs (where both are known), or
    that the call was seen to write."""
    was, now_is = before.signatures(), now.signatures()
    return tuple([name for i, name in enumerate(TRACKED_FIELDS)
                  if before[i] is not now[i] or name in written
                  or (was[i] != now_is[i] and was[i] is not None and now_is[i] is not None)])


class FieldWatcher:
    """Names the fields each call changed: :meth:`before` each call of an event, :meth:`changed`
    after it, :meth:`release` after the event's last (so that the loss and its autograd graph are
    not held). It keeps the last :class:`Fields`,
    and for the model the :class:`CallWrites` and :class:`Walk` of the hooked way or the last
    :class:`ModelSignature` of the other, and how the call under way is compared."""

    checks_all = False
    """Whether every call is compared on the model's signature, whatever it declares."""

    def __init__(self, state: Any, hooks: ModelHooks) -> None:
        self.state, self.hooks = state, hooks
        self.checks_all: bool = type(self).checks_all  # (read at every call: an instance's own attribute reads faster)
        self._fields, self._model, self._walk, self._trusted = _NOTHING, None, None, False
        self._call_writes = CallWrites()
        self._written: Any = None  # (how the call under way is compared: _WATCHED, _SIGNED, or None: trusted)
        self._writes: Any = None  # (what the call under way declares at this event)
        self._event: Any = None
        self._reads_versions: set = set()  # (under the hooks: the events with a call CallWrites does not watch)

    def release(self) -> None:
        """Let go of the fields after an event's calls: the trainer frees what it replaces (last
        step's loss, and its autograd graph) in its own time, not in the next event's."""
        call_writes, self._fields = self._call_writes, _NOTHING
        call_writes.step, call_writes.step_keys = (), ((), ())  # (nor the step's tensors)

    def before(self, obj: Any, event: Event) -> None:
        """Ready the check of ``obj``'s call at ``event``: watched by :class:`CallWrites` under the
        hooks unless its ``writes`` at this event leaves the model out (a declaration is trusted);
        else the step's versions are read, and the model's signature too unless it is left out.
        Before the event's first call, the fields are taken as they are now (under the hooks
        with the step's versions if a call :class:`CallWrites` does not watch ran at this event
        before, else they are read before such a call)."""
        if self._fields is _NOTHING:
            reads = self.checks_all or not self.hooks.depth or event in self._reads_versions
            self._fields, self._event = _fields(self.state, reads), event
            if event in _BOUNDARY_EVENTS:
                self._model = self._walk = None
        writes = getattr(obj, "writes", None)  # (a callback's own attribute may be anything)
        if type(writes) is dict:  # declared event by event (an event left out: unknown)
            writes = writes.get(self._event)
        self._writes = writes
        if self.checks_all:
            self._written = self._signed()
        elif type(writes) is frozenset and "model" not in writes:
            self._written, self._trusted = None, True
            if self._fields.versions is None:  # (the calls since the snapshot were watched: read now, as then)
                self._fields = self._fields.read()
                self._reads_versions.add(self._event)
        elif self.hooks.depth:
            walk, registered, call_writes = self._walk, self.hooks.registered, self._call_writes
            if walk is None or walk.model is not self.state.model or walk.registered != registered:
                self._walk = walk = _walk(self.state.model, registered)
            fields = self._fields
            step = fields.tensors if fields.data is None else ()
            if call_writes.walk is not walk:
                call_writes.of(walk)
            if call_writes.step is not step:  # (their ids and storages read when first needed)
                call_writes.step, call_writes.step_keys = step, None
            _push_mode(call_writes)
            self._written = _WATCHED
        else:
            self._written = self._signed()

    def _signed(self) -> object:
        """Compare the call on the model's signature: measured afresh after a trusted call (the
        next call is not blamed for what a trusted one did) or a hook."""
        model = self._model
        if self._trusted or model is None or model.fired != self.hooks.fired:
            self._model, self._trusted = self._signature(), False
        return _SIGNED

    def _registered(self, written: tuple[str, ...]) -> tuple[str, ...]:
        """``written`` and the model if the watched call just run registered a module or parameter
        that changed the model's structure (walked again)."""
        walk, self._walk = self._walk, _walk(self.state.model, self.hooks.registered)
        return (*written, "model") if self._walk.ids != walk.ids and "model" not in written else written

    def _signature(self) -> ModelSignature:
        """The model's signature, from the last walk while no module or parameter was registered."""
        model, last, hooks = self.state.model, self._model, self.hooks
        fired, registered = (hooks.fired, hooks.registered) if hooks.depth else UNHOOKED
        walk = last.walk if (last is not None and last.walk.model is model and last.walk.registered == registered
                             and registered != UNHOOKED[1]) else _walk(model, registered)
        return _new(ModelSignature, (walk.ids, tuple(map(_versions_and_flags, walk.params)), walk, fired))

    def _model_moved(self) -> tuple[str, ...]:
        """``('model',)`` if the model changed since its signature, which is then taken afresh;
        the usual answer, no, from the parameters' versions and flags alone while no hook fired."""
        last = self._model
        if last.fired == self.hooks.fired and last.walk.model is self.state.model:
            flags = tuple(map(_versions_and_flags, last.walk.params))
            if flags == last.flags:
                return ()
            self._model = _new(ModelSignature, (last.ids, flags, last.walk, last.fired))
            return _MODEL
        self._model = now = self._signature()
        return _MODEL if now.ids != last.ids or now.flags != last.flags else ()

    def changed(self) -> tuple[str, ...]:
        """The tracked fields the call replaced or mutated, in the order of ``TRACKED_FIELDS``
        (empty if none); the state now is what the next call is compared with. The usual answer,
        nothing, is told first, building nothing."""
        s, (batch, outputs, loss, model, optimizers, tensors, versions, lrs, _), written = (self.state, self._fields,
                                                                                         self._written)
        if written is _WATCHED:  # (the usual call, told here: what CallWrites saw, leaving it)
            _pop_mode()
            call_writes = self._call_writes
            written = call_writes.wrote() if call_writes.noted else ()  # (no torch function on them: nothing)
            if self._walk.registered != self.hooks.registered:
                written = self._registered(written)
        else:
            written = self._model_moved() if written is _SIGNED else ()
        if (not written and s.batch is batch and s.outputs is outputs and s.loss is loss and s.model is model
                and s.optimizers is optimizers and (versions is None or tuple(map(_version, tensors)) == versions)
                and (len(optimizers) == 1 and len(groups := optimizers[0].param_groups) == 1 == len(lrs)
                     and groups[0].get("lr") == lrs[0] or _learning_rates(optimizers) == lrs)):  # (one group: no call)
            return ()
        before, self._fields = self._fields, _fields(s, versions is not None)
        return _differing(before, self._fields, written)


class CheckedWatcher(FieldWatcher):
    """A :class:`FieldWatcher` that trusts no ``writes`` declaration: it compares the model's
    signature around every call and raises :class:`UndeclaredWrite` at the call that changed a
    field its declaration leaves out (where the cheap watcher would not see it). A debug mode:
    every call then reads every parameter."""

    checks_all = True

    def before(self, obj: Any, event: Event) -> None:
        super().before(obj, event)
        self._obj = obj

    def changed(self) -> tuple[str, ...]:
        fields, declared = super().changed(), self._writes
        undeclared = [field for field in fields if field not in declared] if type(declared) is frozenset else []
        if undeclared:
            name, event = type(self._obj).__name__, self._event.value
            raise UndeclaredWrite(f"{name} changed {undeclared} at {event}, but its writes declares "
                                  f"{sorted(declared)} there: add {undeclared} to {name}.writes (or set it to "
                                  f"None, unknown, to have every call watched)")
        return fields

"""The State: everything the training loop shares with algorithms and callbacks."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, Callable, Optional, Sequence, Union

import torch

from composer_lab.core.time import Time, Timestamp, TimeUnit, ensure_time

__all__ = ["State", "TRACKED_FIELDS", "BATCH_KEYS", "DICT_BATCH_KEYS", "BatchKey", "batch_key", "batch_item",
           "batch_with_item"]

TRACKED_FIELDS = ("batch", "outputs", "loss", "model", "optimizers")
"""The State fields an algorithm's ``writes`` names and the trace's ``changed`` column reports."""

BATCH_KEYS = ("input", "target")
"""Where a dict batch holds what an ``(input, target)`` batch holds at positions 0 and 1."""

DICT_BATCH_KEYS = (("input", "input_ids", "pixel_values"), ("target", "labels"))
"""The names a dict batch may give positions 0 and 1, the first present answering: ours, then
Hugging Face's (a tokenizer's 'input_ids', an image processor's 'pixel_values', 'labels')."""

BatchKey = Union[int, str, Callable[[Any], Any], tuple[Callable[[Any], Any], Callable[[Any, Any], Any]]]
"""A position or name in the batch, a function ``get(batch)``, or a pair ``(get(batch),
set(batch, value) -> new batch)``, as Composer's ``State.batch_get_item`` takes."""

_AUTOCAST_DTYPES = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}
NO_AUTOCAST = contextlib.nullcontext()
"""What :meth:`State.precision_context` gives in fp32: nothing to enter (one object, told by identity)."""


def batch_key(batch: Any, key: Union[int, str]) -> Union[int, str]:
    """The key under which ``batch`` holds ``key``: the one rule of what a batch is, read by the
    State and the trainer alike. Positions 0 and 1 of a dict batch are the first of its
    :data:`DICT_BATCH_KEYS` names ('input' / 'target', or Hugging Face's)."""
    if isinstance(key, int) and isinstance(batch, Mapping):
        names = DICT_BATCH_KEYS[key] if key in (0, 1) else ()
        for name in names:
            if name in batch:
                return name
        raise KeyError(f"dict batches need the keys 'input' and 'target' (or Hugging Face's 'input_ids' / "
                       f"'pixel_values' and 'labels'); this one has {sorted(batch)}: rename the dataset's keys "
                       f"(a model with its own forward(batch) and loss(outputs, batch) needs them only for "
                       f"algorithms that read inputs or targets)")
    return key


def _getter_setter(key: Any) -> Optional[tuple[Callable[[Any], Any], Optional[Callable[[Any, Any], Any]]]]:
    """``(get, set)`` for a function key (set None) or a ``(get, set)`` pair; None for a plain key."""
    if isinstance(key, tuple) and len(key) == 2 and all(callable(f) for f in key):
        return key
    return (key, None) if callable(key) else None


def batch_item(batch: Any, key: BatchKey) -> Any:
    """``batch[key]`` by the batch rule (:func:`batch_key`), or ``get(batch)`` for a function key."""
    functions = _getter_setter(key)
    if functions is not None:
        return functions[0](batch)
    return batch[batch_key(batch, key)]


def batch_with_item(batch: Any, key: BatchKey, value: Any) -> Any:
    """A batch like ``batch`` holding ``value`` at ``key``, of the same type (a dict or tuple is
    rebuilt, not changed in place); ``set(batch, value)`` for a ``(get, set)`` pair."""
    functions = _getter_setter(key)
    if functions is not None:
        if functions[1] is None:
            raise TypeError(f"cannot set an item of the batch through the function {getattr(key, '__name__', key)!r} "
                            f"alone: pass a pair (get_fn, set_fn), set_fn(batch, value) returning the new batch")
        return functions[1](batch, value)
    key = batch_key(batch, key)
    if isinstance(batch, Mapping):
        return {**batch, key: value}
    if isinstance(batch, (tuple, list)):
        items = list(batch)
        items[key] = value
        return items if isinstance(batch, list) else tuple(items)
    raise TypeError(f"cannot set item {key!r} of a batch of type {type(batch).__name__}; batches are "
                    f"(input, target) tuples or dicts with 'input' and 'target', or give a (get_fn, set_fn) pair")


def _as_list(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


class EditCountingList(list):
    """A list that moves the process-wide :attr:`generation` at each in-place edit and each new
    list: the engine works out the listeners of each event from ``state.algorithms`` and
    ``state.callbacks`` again only when the generation moved (another list assigned, or one
    edited), a check of one number however long the lists."""

    generation = 0
    """Moved after every edit of any such list and every new one (after: a reader that saw the
    new number sees the edit)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        EditCountingList.generation += 1


def _counting(name: str) -> Callable:
    edit = getattr(list, name)

    def counted(self: EditCountingList, *args: Any, **kwargs: Any) -> Any:
        try:
            return edit(self, *args, **kwargs)
        finally:
            EditCountingList.generation += 1

    counted.__name__ = counted.__qualname__ = name
    return counted


for _name in ("append", "extend", "insert", "remove", "pop", "clear", "sort", "reverse", "__setitem__",
              "__delitem__", "__iadd__", "__imul__"):
    setattr(EditCountingList, _name, _counting(_name))


class State:
    """The shared training state that algorithms read and change in place.

    Args:
        model: the module being trained.
        max_duration: how long ``fit`` trains, e.g. '3ep' or '600ba'.
        optimizers, schedulers: one object or a sequence of them.
        dataloader: the training dataloader (its length turns epochs into fractions).
        algorithms, callbacks: what the engine runs at each event.
        precision: 'fp32', 'amp_bf16' or 'amp_fp16'.
        device: where batches and model live.
        seed: seeds :meth:`generator`, so randomness in algorithms repeats run to run.
        rank: this process's rank in a distributed run (0 otherwise): :meth:`generator` draws
            from ``seed + rank``, as Composer seeds rank r, so the ranks draw differently.

    ``batch``, ``outputs`` and ``loss`` hold the current step's values; ``microbatch`` is the
    index of the microbatch being processed (None outside the microbatch loop); ``closure_call``
    which call of the optimizer's closure within the batch runs (0, and 1 for SAM's second
    forward/backward): the trace records it beside every event and call.

    ``algorithms`` may change at any point of a run, by assigning a list (as the lab's panels
    do) or by editing it in place: the engine runs the new list from the next event on.
    """

    def __init__(self, model: torch.nn.Module, max_duration: Union[str, Time] = "1ep", *,
                 optimizers: Any = None, schedulers: Any = None, dataloader: Any = None,
                 algorithms: Sequence[Any] = (), callbacks: Sequence[Any] = (),
                 precision: str = "fp32", device: Union[str, torch.device] = "cpu",
                 seed: int = 0, run_name: str = "run", rank: int = 0) -> None:
        self.model = model
        self.max_duration = max_duration
        self.optimizers = _as_list(optimizers)
        self.schedulers = _as_list(schedulers)
        self.dataloader = dataloader
        self.algorithms = algorithms
        self.callbacks = callbacks
        self.precision = precision
        self.device = torch.device(device)
        self.seed = seed
        self.rank = rank
        self.run_name = run_name
        self.timestamp = Timestamp()
        self.batch: Any = None
        self.outputs: Any = None
        self.loss: Any = None
        self.microbatch: Optional[int] = None
        self.closure_call: int = 0
        self.loss_fn: Any = None
        self._generators: dict[torch.device, torch.Generator] = {}

    @property
    def algorithms(self) -> list:
        """The algorithms the engine runs, in list order (the passes then order each event's)."""
        return self._algorithms

    @algorithms.setter
    def algorithms(self, algorithms: Sequence[Any]) -> None:
        self._algorithms = EditCountingList(algorithms)  # a list of its own: the engine keeps track of it

    @property
    def callbacks(self) -> list:
        """The callbacks the engine runs after the algorithms of each event (before them on INIT)."""
        return self._callbacks

    @callbacks.setter
    def callbacks(self, callbacks: Sequence[Any]) -> None:
        self._callbacks = EditCountingList(callbacks)

    # -- duration -------------------------------------------------------------------------
    @property
    def max_duration(self) -> Time:
        return self._max_duration

    @max_duration.setter
    def max_duration(self, value: Union[str, Time]) -> None:
        duration = ensure_time(value, "max_duration")
        if duration.unit is TimeUnit.DURATION:
            raise ValueError(f"max_duration: {duration} is a fraction of a run, not a length; "
                             f"give epochs, batches or samples, e.g. '3ep'")
        self._max_duration = duration

    @property
    def dataloader_len(self) -> Optional[int]:
        """Batches per epoch, or None if the dataloader has no length."""
        try:
            return len(self.dataloader)
        except TypeError:
            return None

    @property
    def closure_calls(self) -> int:
        """How many times a training step calls the optimizer's closure: 1, or an optimizer's
        ``closure_calls`` when it states more (a :class:`~composer_lab.algorithms.SAMOptimizer`'s 2)."""
        return max((getattr(optimizer, "closure_calls", 1) for optimizer in self.optimizers), default=1)

    def get_elapsed_duration(self) -> float:
        """The fraction of ``max_duration`` done, in [0, 1]; epochs count their finished
        batches, so the value moves every batch."""
        max_duration, ts = self.max_duration, self.timestamp
        done = float(ts.get(max_duration.unit))
        if max_duration.unit is TimeUnit.EPOCH and self.dataloader_len:
            done += ts.batch_in_epoch / self.dataloader_len
        return min(done / max_duration.value, 1.0) if max_duration.value else 1.0

    def stop_training(self) -> None:
        """End the fit after the batch under way (what early-stopping callbacks call, as in
        Composer): ``max_duration`` becomes the time trained so far, in its unit, or in batches
        when it was given in epochs, so the trainer stops at the next batch boundary; a later
        ``fit(duration)`` trains on from there."""
        unit = TimeUnit.BATCH if self.max_duration.unit is TimeUnit.EPOCH else self.max_duration.unit
        self.max_duration = Time(self.timestamp.get(unit), unit)

    # -- batch access ---------------------------------------------------------------------
    def batch_get_item(self, key: BatchKey) -> Any:
        """``batch[key]``; dict batches answer 0 and 1 by :func:`batch_key`; a function key, or a
        ``(get_fn, set_fn)`` pair, is called on the batch (as in Composer)."""
        return batch_item(self.batch, key)

    def batch_set_item(self, key: BatchKey, value: Any) -> None:
        """Replace ``batch[key]``, keeping the batch's type (tuples are rebuilt); a ``(get_fn,
        set_fn)`` key sets ``batch = set_fn(batch, value)``."""
        self.batch = batch_with_item(self.batch, key, value)

    @property
    def inputs(self) -> Any:
        return self.batch_get_item(0)

    @property
    def targets(self) -> Any:
        return self.batch_get_item(1)

    # -- precision ------------------------------------------------------------------------
    def precision_context(self) -> contextlib.AbstractContextManager:
        """Autocast for ``precision`` on ``device`` ('amp_bf16', 'amp_fp16'); nothing for 'fp32'.
        Algorithms that run extra forward passes (Selective Backprop) enter it too."""
        dtype = _AUTOCAST_DTYPES.get(self.precision)
        if dtype is not None:
            return torch.autocast(self.device.type, dtype=dtype)
        return NO_AUTOCAST

    # -- randomness -----------------------------------------------------------------------
    def generator(self, device: Union[str, torch.device, None] = None) -> torch.Generator:
        """A random generator on ``device`` seeded from ``seed + rank``: draw from it for repeatable runs."""
        device = torch.device(device) if device is not None else self.device
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        gen = self._generators.get(device)
        if gen is None:
            gen = self._generators[device] = torch.Generator(device=device)
            gen.manual_seed(self.seed + self.rank)
        return gen

    def generator_states(self) -> dict[str, torch.Tensor]:
        return {str(d): g.get_state() for d, g in self._generators.items()}

    def load_generator_states(self, states: dict[str, torch.Tensor]) -> None:
        for device, gen_state in states.items():
            self.generator(device).set_state(gen_state)

    # -- serialization, as Composer's State ----------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The state as Composer serializes it: ``model``, ``optimizers`` and ``schedulers`` (by
        class name), ``algorithms`` (a list of ``(class name, state)`` pairs, in order),
        ``callbacks`` (by class name), ``timestamp``, ``rank_zero_seed`` and ``run_name``; and,
        beyond Composer, the seeded ``generators`` (so a loaded run draws as the saved one)."""
        return {
            "model": self.model.state_dict(),
            "optimizers": _by_class(self.optimizers),
            "schedulers": _by_class(self.schedulers),
            "algorithms": [(type(a).__qualname__, a.state_dict()) for a in self.algorithms],
            "callbacks": _by_class(self.callbacks),
            "timestamp": self.timestamp.state_dict(),
            "rank_zero_seed": self.seed,
            "run_name": self.run_name,
            "generators": self.generator_states(),
        }

    def load_state_dict(self, state: dict[str, Any], logger: Any = None, strict: bool = False) -> None:
        """Load what :meth:`state_dict` gave, as Composer does: the model's weights (``strict``:
        every key must match), then each optimizer, scheduler, algorithm and callback whose class
        name is in ``state`` (the others are left as they are), the timestamp, seed and run name.
        ``logger`` is accepted for Composer's signature."""
        if "model" in state:
            self.model.load_state_dict(state["model"], strict=strict)
        for objs, key in ((self.optimizers, "optimizers"), (self.schedulers, "schedulers"),
                          (self.callbacks, "callbacks")):
            _load_by_class(objs, state.get(key, {}))
        _load_by_class(self.algorithms, dict(state.get("algorithms", [])))
        if "timestamp" in state:
            self.timestamp = Timestamp.from_state_dict(state["timestamp"])
        self.seed = state.get("rank_zero_seed", self.seed)
        self.run_name = state.get("run_name", self.run_name)
        self.load_generator_states(state.get("generators", {}))


def _by_class(objs: Sequence[Any]) -> dict[str, Any]:
    """Each object's ``state_dict()`` under its class's qualified name (Composer's keys)."""
    return {type(obj).__qualname__: obj.state_dict() for obj in objs}


def _load_by_class(objs: Sequence[Any], saved: dict[str, Any]) -> None:
    """``obj.load_state_dict`` of the state saved under each object's class name, where there is one."""
    for obj in objs:
        if type(obj).__qualname__ in saved:
            obj.load_state_dict(saved[type(obj).__qualname__])

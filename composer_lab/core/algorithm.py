"""The base class of every speed-up method: ``events`` and ``match`` say when, ``apply`` changes the State."""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Union

from composer_lab.core.state import TRACKED_FIELDS
from composer_lab.core.event import Event

if TYPE_CHECKING:
    from composer_lab.core.logger import Logger
    from composer_lab.core.state import State

__all__ = ["Algorithm", "hyperparameters", "describe"]

_JSON_SCALARS = (bool, int, float, str)


class Algorithm(ABC):
    """A method that runs at chosen events and changes the trainer's :class:`State` in place.

    Subclasses declare the events they act at in ``events`` and implement :meth:`apply`; they
    override :meth:`match` only for a condition beyond the event, and :meth:`active` for a
    schedule that ``apply`` itself follows. The class attributes below tell the default passes
    how to order an algorithm without the core importing any concrete algorithm:

    - ``selects_batch``: it prunes the batch (Selective Backprop): run before anything else
      touches the batch (``sort_selective_backprop_first``);
    - ``fuses_layernorm``: it swaps in fused LayerNorms: run after algorithms that add
      LayerNorms (``sort_fused_layernorm_last``);
    - ``mixes_examples``: it mixes examples (MixUp, CutMix); two at one event get a warning
      (``warn_if_multiple_mixers``). Composer's ``interpolate_loss`` is an instance attribute
      of MixUp and CutMix, read by ``warn_if_multiple_loss_interpolation``.
    """

    events: Optional[frozenset] = None
    """The events at which the algorithm acts, or None for any. Set it (on the class, or per
    instance in ``__init__``): the engine asks ``match`` only at those events (most algorithms
    sit out most events, and not asking is the cheapest way to hear no)."""

    selects_batch: ClassVar[bool] = False
    fuses_layernorm: ClassVar[bool] = False
    mixes_examples: ClassVar[bool] = False

    writes: ClassVar[Union[frozenset[str], dict[Event, frozenset[str]], None]] = None
    """The State fields ``apply`` may change (of ``batch``, ``outputs``, ``loss``, ``model``,
    ``optimizers``), or None: unknown; or, when they differ from event to event, a dict from each
    event to its fields (an event left out: unknown). The trace's ``changed`` column compares the
    model (an O(parameters) walk) only around calls that may write it; declaring a set without
    ``'model'`` makes the trace's cost per call independent of the model's size. EMA declares
    ``{Event.BATCH_END: frozenset(), Event.EVAL_BEFORE_ALL: frozenset({'model'}), ...}``: it only
    reads the model at every step, and swaps its weights in for evaluation."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse a ``writes`` that is neither None, a frozenset of tracked field names nor a dict
        of events to those: a misspelt name would silently turn the model check off. A dict's
        keys may be events or their names; they are kept as events."""
        super().__init_subclass__(**kwargs)
        writes = cls.__dict__.get("writes")
        if isinstance(writes, dict):
            cls.writes = {_declared_event(cls, event): _declared_fields(cls, fields)
                          for event, fields in writes.items()}
        elif writes is not None:
            _declared_fields(cls, writes)

    @property
    def find_unused_parameters(self) -> bool:
        """True if the algorithm may leave parameters without gradients (e.g. by freezing
        them), so DistributedDataParallel must not wait for them."""
        return False

    @property
    def backwards_create_graph(self) -> bool:
        """True if the backward pass must build a graph (second-order gradients)."""
        return False

    @staticmethod
    def required_on_load() -> bool:
        """True if a checkpoint written with this algorithm needs it again when loaded."""
        return False

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint stores of this algorithm: its class and hyperparameters, as data."""
        return describe(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`; stateless algorithms have nothing to restore."""

    def listens(self, event: Event) -> bool:
        """Whether the engine asks :meth:`match` at ``event``: one of the declared ``events``
        (None: every event). The one home of that rule: the engine, its plan and the explorer
        read it here."""
        return self.events is None or event in self.events

    def match(self, event: Event, state: State) -> bool:
        """Whether the algorithm should run at ``event`` given ``state``: at its declared
        ``events``. Override only for a condition the event alone does not tell."""
        return self.listens(event)

    def active(self, event: Event, state: State) -> bool:
        """Whether ``apply`` does its work at ``event`` now: :meth:`match`, unless a schedule
        ``apply`` follows lets some matched events through untouched (Selective Backprop off its
        interval). The order preview draws a matched but inactive algorithm dashed."""
        return self.match(event, state)

    @abstractmethod
    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        """Change ``state`` in place; the optional exit code goes into the trace."""

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={_qualified_name(v) or repr(v)}"
                           for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"


def _qualified_name(value: Any) -> Optional[str]:
    """A function's or class's ``module.qualname`` (what stays the same from one process to the
    next, unlike its repr's address); None for anything else."""
    if callable(value) and hasattr(value, "__qualname__") and hasattr(value, "__module__"):
        return f"{value.__module__}.{value.__qualname__}"
    return None


def hyperparameters(algorithm: Algorithm) -> dict[str, Any]:
    """The hyperparameters of ``algorithm``: its constructor's arguments that are plain scalar
    (JSON) attributes of the instance (``SelectiveBackprop``: start, end, keep, ...)."""
    return {name: getattr(algorithm, name) for name in _arguments(algorithm)
            if isinstance(getattr(algorithm, name, None), _JSON_SCALARS)}


def _arguments(algorithm: Algorithm) -> list[str]:
    """The names of ``algorithm``'s constructor arguments."""
    try:
        return list(inspect.signature(type(algorithm)).parameters)
    except (TypeError, ValueError):
        return []


def describe(algorithm: Algorithm) -> dict[str, Any]:
    """``{'class': name, 'hparams': {...}}``: what a run's config and a checkpoint keep of an
    algorithm, as JSON data (plots read the schedule back from it): its hyperparameters, an
    Event as its value, and its function or class arguments by qualified name."""
    hparams = {}
    for name in _arguments(algorithm):
        value = getattr(algorithm, name, None)
        value = value.value if isinstance(value, Enum) else _qualified_name(value) or value
        if isinstance(value, _JSON_SCALARS):
            hparams[name] = value
    return {"class": type(algorithm).__name__, "hparams": hparams}


def _declared_fields(cls: type, fields: Any) -> frozenset:
    """``fields`` if it is a frozenset of tracked field names, else a TypeError naming the fix."""
    if not (isinstance(fields, frozenset) and fields <= frozenset(TRACKED_FIELDS)):
        raise TypeError(f"{cls.__name__}.writes must be None (unknown), a frozenset of {TRACKED_FIELDS} or a dict "
                        f"of events to such frozensets, got {fields!r}; e.g. writes = frozenset({{'batch'}})")
    return fields


def _declared_event(cls: type, event: Any) -> Event:
    """The event a key of a ``writes`` dict names, else a TypeError naming the fix."""
    try:
        return Event(event)
    except ValueError as err:
        raise TypeError(f"{cls.__name__}.writes: {err}") from None

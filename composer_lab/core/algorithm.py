"""The base class of every speed-up method: ``match`` says when, ``apply`` changes the State."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Optional

if TYPE_CHECKING:
    from composer_lab.core.event import Event
    from composer_lab.core.logger import Logger
    from composer_lab.core.state import State

__all__ = ["Algorithm"]


class Algorithm(ABC):
    """A method that runs at chosen events and changes the trainer's :class:`State` in place.

    Subclasses implement :meth:`match` (should it run now?) and :meth:`apply` (run it).
    The class attributes below tell the default passes how to order an algorithm without
    the core importing any concrete algorithm:

    - ``selects_batch``: it prunes the batch (Selective Backprop): run before anything else
      touches the batch (``sort_selective_backprop_first``);
    - ``fuses_layernorm``: it swaps in fused LayerNorms: run after algorithms that add
      LayerNorms (``sort_fused_layernorm_last``);
    - ``interpolates_loss``: it mixes examples and their losses (MixUp, CutMix); two at once
      get a warning (``warn_if_multiple_loss_interpolation``).
    """

    events: Optional[frozenset] = None
    """The events at which ``match`` can say yes, or None for any. Set it (on the class, or per
    instance in ``__init__``) and the engine asks ``match`` only at those events: most
    algorithms sit out most events, and not asking is the cheapest way to hear no."""

    selects_batch: ClassVar[bool] = False
    fuses_layernorm: ClassVar[bool] = False
    interpolates_loss: ClassVar[bool] = False

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
        """What a checkpoint stores of this algorithm."""
        return {"repr": repr(self)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`; stateless algorithms have nothing to restore."""

    @abstractmethod
    def match(self, event: Event, state: State) -> bool:
        """Whether the algorithm should run at ``event`` given ``state``."""

    @abstractmethod
    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        """Change ``state`` in place; the optional exit code goes into the trace."""

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"

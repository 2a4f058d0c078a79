"""The Algorithm shape shared by model-surgery methods: change ``state.model`` once, at INIT."""

from __future__ import annotations

from abc import abstractmethod
from typing import Optional

from torch import nn

from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State

__all__ = ["SurgeryAlgorithm", "StateDictSurgery"]


class SurgeryAlgorithm(Algorithm):
    """Runs :meth:`operate` on the model at INIT; ``replaced`` lists the submodules it swapped
    (logged as ``<name>/num_replaced``)."""

    def __init__(self) -> None:
        self.replaced: list[str] = []

    events = frozenset({Event.INIT})
    writes = frozenset({"model", "optimizers"})

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        self.replaced = self.operate(state.model, state.optimizers)
        logger.log_metrics({f"{type(self).__name__}/num_replaced": float(len(self.replaced))})
        return None

    @abstractmethod
    def operate(self, model: nn.Module, optimizers: list) -> list[str]:
        """Change ``model`` in place; return the qualified names of the replaced submodules."""


class StateDictSurgery(SurgeryAlgorithm):
    """A surgery whose new modules change the model's ``state_dict``: ``required_on_load`` is True,
    as in Composer, so a checkpoint written with it needs it again when loaded."""

    @staticmethod
    def required_on_load() -> bool:
        """True, as in Composer: the surgery changes the model's ``state_dict``, so a checkpoint needs it."""
        return True

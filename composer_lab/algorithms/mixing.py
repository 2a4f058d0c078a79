"""Mixing two examples per slot (MixUp, CutMix): each example is combined with a partner drawn
by a permutation of the batch, and trained towards the partner's target in proportion.

By default the mixing happens at AFTER_DATALOADER and the batch's targets become the mixed
per-class values there, ``(1 - w) * values(y) + w * values(y[perm])`` (``w`` the partner's
weight), so whatever runs later (Selective Backprop, RandomSubset, a user's row selection,
the microbatch split, a second mixer) moves each example's target with it. Cross-entropy on
these targets equals the interpolated loss ``(1 - w) * CE(out, y) + w * CE(out, y[perm])``.

With ``interpolate_loss=True`` (Composer's argument) the targets stay as they are and the
loss is interpolated instead, for losses that take class indices only: as in Composer, each
microbatch is mixed at BEFORE_FORWARD and its loss interpolated at BEFORE_BACKWARD, so the
partner targets never outlive the rows they belong to.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Callable, ClassVar, NamedTuple, Optional, Sequence

import torch
from scipy.special import betaincinv

from composer_lab.algorithms.probe import probe_outputs
from composer_lab.algorithms.soft_targets import class_values, outputs_shape_for
from composer_lab.algorithms.validation import check_positive
from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State

__all__ = ["sample_beta", "random_permutation", "mix_values", "mixed_targets", "Mix", "MixingAlgorithm"]


def check_alpha(alpha: float) -> float:
    """``alpha`` > 0 as a float, else ValueError / TypeError."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise TypeError(f"alpha must be a positive number, got {type(alpha).__name__} {alpha!r}")
    if alpha <= 0:
        raise ValueError(f"alpha parameterises Beta(alpha, alpha) and must be > 0, got {alpha}")
    return float(alpha)


def sample_beta(alpha: float, generator: Optional[torch.Generator] = None) -> float:
    """One draw of Beta(alpha, alpha) from a CPU ``generator`` (inverse CDF of one uniform)."""
    uniform = torch.rand((), generator=generator).item()
    return float(betaincinv(alpha, alpha, uniform))


def random_permutation(n: int, device: torch.device, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """A permutation of ``range(n)`` drawn on the CPU ``generator``, moved to ``device``."""
    return torch.randperm(n, generator=generator).to(device, non_blocking=True)


def mix_values(values: torch.Tensor, indices: torch.Tensor, weight: float) -> torch.Tensor:
    """``(1 - weight) * values + weight * values[indices]``: each row moved towards its partner's."""
    return torch.lerp(values, values[indices], weight)


def mixed_targets(targets: torch.Tensor, mix: Mix, outputs_shape: Callable[[], Sequence[int]]) -> torch.Tensor:
    """``targets`` as per-class values, each row moved towards its partner's by ``mix.weight``;
    ``outputs_shape()`` (the model's outputs' shape, which tells the targets' form) is asked
    only here, so algorithms that need no class values never compute it."""
    return mix_values(class_values(targets, outputs_shape()), mix.indices, mix.weight)


class Mix(NamedTuple):
    """One mixing draw: the mixed inputs, each row's partner, the partner's weight in the
    target, and the pasted box ``(top, bottom, left, right)`` for CutMix (None for MixUp)."""

    inputs: torch.Tensor
    indices: torch.Tensor
    weight: float
    box: Optional[tuple[int, int, int, int]] = None


def model_outputs_shape(state: State) -> torch.Size:
    """The shape of the model's outputs for one example of ``state.batch`` (a probe forward,
    :func:`~composer_lab.algorithms.probe.probe_outputs`: the model's parameters, buffers and
    random state are left as they were, also when the forward fails). ``N`` reads 1."""
    outputs = probe_outputs(state, state.batch_get_item(0))
    if not isinstance(outputs, torch.Tensor):
        raise TypeError(f"the model returned {type(outputs).__name__}, not a tensor of class scores")
    return outputs.shape


_MIXING_EVENTS = frozenset({Event.AFTER_DATALOADER})
_INTERPOLATING_EVENTS = frozenset({Event.BEFORE_FORWARD, Event.BEFORE_BACKWARD})


class MixingAlgorithm(Algorithm):
    """Mixes the batch (:meth:`mix`) and trains towards the partners' targets in proportion.

    Args:
        interpolate_loss: interpolate the loss rather than the targets (Composer's argument).
        num_classes: the number of classes, to turn class-index targets into per-class values;
            None reads it from the model's output shape (a probe forward of one example without
            gradients, which changes nothing in the model; once per model and input shape).
    """

    mixes_examples: ClassVar[bool] = True
    writes = frozenset({"batch", "loss"})

    def __init__(self, interpolate_loss: bool = False, num_classes: Optional[int] = None) -> None:
        if not isinstance(interpolate_loss, bool):
            raise TypeError(f"interpolate_loss must be True or False, got {type(interpolate_loss).__name__} "
                            f"{interpolate_loss!r}")
        self.interpolate_loss = interpolate_loss
        self.num_classes = None if num_classes is None else check_positive("num_classes", num_classes, integer=True)
        self._shapes: dict[tuple, tuple[int, ...]] = {}
        self._partner: Optional[tuple[torch.Tensor, float]] = None

    @property
    def events(self) -> frozenset:  # type: ignore[override]
        """Read from ``interpolate_loss``, so a change of it (from the lab's widgets) moves the events too."""
        return _INTERPOLATING_EVENTS if self.interpolate_loss else _MIXING_EVENTS

    def match(self, event: Event, state: State) -> bool:
        """At the declared events (the engine asks only there); ``apply`` acts by the event, so
        an engine still holding the events of before a change of ``interpolate_loss`` gets the
        former mode, whole."""
        return event is not Event.BEFORE_BACKWARD or self._partner is not None

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        if event is Event.BEFORE_BACKWARD:
            state.loss = self.interpolated_loss(state)
            return None
        inputs, targets = state.batch_get_item(0), state.batch_get_item(1)
        mix = self.mix(inputs, state.generator("cpu"))
        if event is Event.BEFORE_FORWARD:
            self._partner = (self.partner_targets(targets, mix), mix.weight)
            state.batch_set_item(0, mix.inputs)
        else:
            mixed_targets = self.mix_targets(targets, mix, lambda: self.outputs_shape(state, targets))
            state.batch_set_item(0, mix.inputs)
            state.batch_set_item(1, mixed_targets)
        return None

    def mix_targets(self, targets: torch.Tensor, mix: Mix, outputs_shape: Callable[[], Sequence[int]]) -> torch.Tensor:
        """The targets of the mixed rows (:func:`mixed_targets`)."""
        return mixed_targets(targets, mix, outputs_shape)

    def partner_targets(self, targets: torch.Tensor, mix: Mix) -> torch.Tensor:
        """The partners' targets, for the interpolated loss."""
        return targets[mix.indices]

    def outputs_shape(self, state: State, targets: torch.Tensor) -> tuple[int, ...]:
        """The outputs' shape that says the targets' form: from ``num_classes``, else from the
        model (a probe forward, remembered per model and input shape)."""
        if self.num_classes is not None:
            return outputs_shape_for(targets, self.num_classes)
        inputs = state.batch_get_item(0)
        key = (id(state.model), tuple(inputs.shape[1:]))
        if key not in self._shapes:
            try:
                self._shapes[key] = tuple(model_outputs_shape(state)[1:])
            except Exception as err:  # any failure of the user's forward on one example
                raise ValueError(f"{type(self).__name__} could not read the number of classes from the model's "
                                 f"output shape ({type(err).__name__}: {err}); pass "
                                 f"{type(self).__name__}(num_classes=...)") from err
        return (inputs.shape[0], *self._shapes[key])

    def interpolated_loss(self, state: State) -> torch.Tensor:
        """``(1 - w) * loss(targets) + w * loss(partner targets)`` for this microbatch."""
        partner, weight = self._partner
        self._partner = None
        if partner.shape[0] != state.batch_get_item(1).shape[0]:
            raise ValueError(f"{type(self).__name__} mixed {partner.shape[0]} rows at BEFORE_FORWARD but the loss "
                             f"saw {state.batch_get_item(1).shape[0]}: an algorithm changed the rows in between; "
                             f"select rows at AFTER_DATALOADER instead")
        with state.precision_context():
            if state.loss_fn is not None:
                partner_loss = state.loss_fn(state.outputs, partner)
            else:
                original = state.batch
                state.batch_set_item(1, partner)
                partner_loss = state.model.loss(state.outputs, state.batch)
                state.batch = original
        return torch.lerp(state.loss, partner_loss, weight)

    @abstractmethod
    def mix(self, inputs: torch.Tensor, generator: torch.Generator) -> Mix:
        """Draw the partners and mix ``inputs``."""


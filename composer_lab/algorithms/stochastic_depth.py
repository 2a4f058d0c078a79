"""Stochastic depth (Huang et al., 2016): skip residual blocks at random while training.

torchvision's ResNet blocks (``Bottleneck``, and ``BasicBlock`` as an addition to Composer)
become stochastic: ``'block'`` skips a whole block's residual branch with probability
``drop_rate`` (the paper), ``'sample'`` zeroes the branch for each example with that
probability (EfficientNet's drop-path). At evaluation nothing is dropped: the branch is scaled
by its keep probability, its expected value in training. ``'linear'`` spreads the rate from
``drop_rate / n`` at the first block to ``drop_rate`` at the last; ``'uniform'`` gives each
``drop_rate``. The blocks keep their modules and Parameter objects (the same ``state_dict``
keys) and draw from the run's generator (``State.generator``), so a resumed run drops the
same blocks as an uninterrupted one.
"""

from __future__ import annotations

import warnings
from typing import Any, Optional, Union

import torch
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck

from composer_lab.algorithms.module_surgery import count_module_instances, replace_module_classes
from composer_lab.algorithms.validation import check_choice, check_fraction
from composer_lab.algorithms.warnings import NoEffectWarning
from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State
from composer_lab.core.time import Time, TimeUnit

__all__ = ["StochasticDepth", "apply_stochastic_depth", "StochasticBottleneck", "StochasticBasicBlock",
           "make_resnet_bottleneck_stochastic", "make_resnet_basicblock_stochastic"]

_VALID_STOCHASTIC_METHODS = ("block", "sample")
_VALID_LAYER_DISTRIBUTIONS = ("uniform", "linear")


class _Stochastic:
    """What the stochastic blocks share: ``drop_rate``, ``stochastic_method`` and ``generator``
    (None: torch's global one), and the draws made from them."""

    drop_rate: float = 0.0
    stochastic_method: str = "block"
    generator: Optional[torch.Generator] = None

    def _skips(self) -> bool:
        """Whether this training forward skips the residual branch ('block')."""
        return bool(torch.rand((), generator=self.generator).item() < self.drop_rate)

    def _scaled(self, branch: torch.Tensor) -> torch.Tensor:
        """The branch as it joins the shortcut: dropped per example ('sample', training) or scaled
        by the keep probability (evaluation)."""
        keep = 1.0 - self.drop_rate
        if not self.training:
            return branch * keep
        if self.stochastic_method == "block" or self.drop_rate == 0:
            return branch
        kept = torch.rand(branch.shape[0], generator=self.generator) < keep
        shape = (branch.shape[0],) + (1,) * (branch.dim() - 1)
        return branch * kept.to(branch.device, branch.dtype, non_blocking=True).reshape(shape)

    def _shortcut(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.downsample is None else self.downsample(x)

    def _skipped(self, x: torch.Tensor) -> torch.Tensor:
        """A block whose branch was skipped: its input, or the downsampled one after ReLU."""
        return x if self.downsample is None else self.relu(self.downsample(x))


class StochasticBottleneck(_Stochastic, Bottleneck):
    """A torchvision ``Bottleneck`` (same modules and parameters) whose residual branch is dropped
    at random in training."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and self.stochastic_method == "block" and self._skips():
            return self._skipped(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(self._scaled(out) + self._shortcut(x))


class StochasticBasicBlock(_Stochastic, BasicBlock):
    """A torchvision ``BasicBlock`` (same modules and parameters) whose residual branch is dropped
    at random in training."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and self.stochastic_method == "block" and self._skips():
            return self._skipped(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(self._scaled(out) + self._shortcut(x))


def _layer_rate(drop_rate: float, drop_distribution: str, module_index: int, module_count: int) -> float:
    if drop_distribution == "linear":
        return (module_index + 1) / module_count * drop_rate
    return drop_rate


def _make_stochastic(module: nn.Module, cls: type, module_index: int, module_count: int, drop_rate: float,
                     drop_distribution: str, stochastic_method: str,
                     generator: Optional[torch.Generator] = None) -> nn.Module:
    """``module`` itself, now of the stochastic class (same object, modules and parameters)."""
    module.__class__ = cls
    module.stochastic_method = stochastic_method
    module.target_drop_rate = _layer_rate(drop_rate, drop_distribution, module_index, module_count)
    module.drop_rate = module.target_drop_rate
    module.generator = generator
    return module


def make_resnet_bottleneck_stochastic(module: Bottleneck, module_index: int, module_count: int, drop_rate: float,
                                      drop_distribution: str, stochastic_method: str) -> nn.Module:
    """Surgery policy: ``module`` as a :class:`StochasticBottleneck`, the ``module_index``-th of
    ``module_count`` (Composer's name)."""
    return _make_stochastic(module, StochasticBottleneck, module_index, module_count, drop_rate, drop_distribution,
                            stochastic_method)


def make_resnet_basicblock_stochastic(module: BasicBlock, module_index: int, module_count: int, drop_rate: float,
                                      drop_distribution: str, stochastic_method: str) -> nn.Module:
    """Surgery policy: ``module`` as a :class:`StochasticBasicBlock`."""
    return _make_stochastic(module, StochasticBasicBlock, module_index, module_count, drop_rate, drop_distribution,
                            stochastic_method)


_STOCHASTIC_LAYER_MAPPING = {"ResNetBottleneck": (Bottleneck, StochasticBottleneck),
                             "ResNetBasicBlock": (BasicBlock, StochasticBasicBlock)}


def _validate_stochastic_hparams(target_layer_name: Any, stochastic_method: Any, drop_rate: Any,
                                 drop_distribution: Any, drop_warmup: float = 0.0) -> None:
    check_choice("target_layer_name", target_layer_name, tuple(_STOCHASTIC_LAYER_MAPPING))
    check_choice("stochastic_method", stochastic_method, _VALID_STOCHASTIC_METHODS)
    check_fraction("drop_rate", drop_rate)
    check_choice("drop_distribution", drop_distribution, _VALID_LAYER_DISTRIBUTIONS)
    if stochastic_method == "sample" and drop_warmup:
        raise ValueError(f"StochasticDepth: drop_warmup={drop_warmup} works with stochastic_method='block' only; "
                         f"pass drop_warmup=0.0 or stochastic_method='block'")


def apply_stochastic_depth(model: nn.Module, target_layer_name: str = "ResNetBottleneck",
                           stochastic_method: str = "block", drop_rate: float = 0.2,
                           drop_distribution: str = "linear", generator: Optional[torch.Generator] = None) -> None:
    """Make every ``target_layer_name`` block of ``model`` stochastic, in place (the same module
    objects and parameters, so optimizers stay valid); their draws come from ``generator`` (None:
    torch's global one). :class:`NoEffectWarning` when ``model`` has none."""
    _validate_stochastic_hparams(target_layer_name, stochastic_method, drop_rate, drop_distribution)
    target, stochastic = _STOCHASTIC_LAYER_MAPPING[target_layer_name]
    count = count_module_instances(model, target)
    if count == 0:
        warnings.warn(NoEffectWarning(f"StochasticDepth changed nothing in {type(model).__name__}: it has no "
                                      f"{target_layer_name} (torchvision {target.__name__}); pass target_layer_name="
                                      f"one of {tuple(_STOCHASTIC_LAYER_MAPPING)} that the model has"), stacklevel=2)
        return

    def policy(module: nn.Module, index: int) -> Optional[nn.Module]:
        if isinstance(module, _Stochastic):
            return None
        return _make_stochastic(module, stochastic, index, count, drop_rate, drop_distribution, stochastic_method,
                                generator)

    replace_module_classes(model, {target: policy})


def _set_drop_rates(model: nn.Module, fraction: float) -> None:
    """Each stochastic block's rate: ``fraction`` of the one it reaches after warm-up."""
    for module in model.modules():
        if isinstance(module, _Stochastic):
            module.drop_rate = fraction * module.target_drop_rate


def _warmup_fraction(drop_warmup: Union[float, Time, str]) -> Time:
    """``drop_warmup`` as a Time in 'dur' (a fraction of the run), else ValueError naming the fix."""
    time = Time.from_timestring(drop_warmup) if isinstance(drop_warmup, str) else drop_warmup
    if isinstance(time, (int, float)) and not isinstance(time, bool):
        time = Time(float(time), TimeUnit.DURATION)
    if not isinstance(time, Time) or time.unit is not TimeUnit.DURATION or not 0 <= float(time) <= 1:
        raise ValueError(f"StochasticDepth: drop_warmup must be a fraction of the run in [0, 1] (a float, or "
                         f"'0.1dur'), got {drop_warmup!r}; pass e.g. drop_warmup=0.1")
    return time


class StochasticDepth(Algorithm):
    """Applies :func:`apply_stochastic_depth` at INIT; with ``drop_warmup``, raises the drop rates
    linearly from 0 over that fraction of the run, at every BATCH_START.

    Logs ``stochastic_depth/num_stochastic_layers`` (through ``log_hyperparameters``) at INIT and
    ``stochastic_depth/drop_rate`` at each BATCH_START of a warm-up.

    Args:
        target_layer_name: ``'ResNetBottleneck'`` (Composer's only one) or ``'ResNetBasicBlock'``.
        stochastic_method: ``'block'`` or ``'sample'``.
        drop_rate: probability of dropping, in [0, 1] (the last block's, with ``'linear'``).
        drop_distribution: ``'linear'`` or ``'uniform'`` over the blocks.
        drop_warmup: fraction of the run (float or ``'0.1dur'``) over which the rates rise from 0.
    """

    def __init__(self, target_layer_name: str = "ResNetBottleneck", stochastic_method: str = "block",
                 drop_rate: float = 0.2, drop_distribution: str = "linear",
                 drop_warmup: Union[float, Time, str] = 0.0) -> None:
        self.drop_warmup = _warmup_fraction(drop_warmup)
        _validate_stochastic_hparams(target_layer_name, stochastic_method, drop_rate, drop_distribution,
                                     float(self.drop_warmup))
        self.target_layer_name = target_layer_name
        self.stochastic_method = stochastic_method
        self.drop_rate = drop_rate
        self.drop_distribution = drop_distribution
        self.num_stochastic_layers = 0
        if not float(self.drop_warmup):
            self.events = frozenset({Event.INIT})  # (no warm-up: nothing to do at BATCH_START)
        if drop_rate == 0:
            warnings.warn(NoEffectWarning("StochasticDepth with drop_rate=0 drops nothing; pass a drop_rate above 0"),
                          stacklevel=2)

    events = frozenset({Event.INIT, Event.BATCH_START})
    writes = frozenset({"model", "optimizers"})

    @property
    def find_unused_parameters(self) -> bool:
        return self.stochastic_method == "block"

    @staticmethod
    def required_on_load() -> bool:
        return True

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        target = _STOCHASTIC_LAYER_MAPPING[self.target_layer_name][0]
        if event is Event.INIT:
            apply_stochastic_depth(state.model, self.target_layer_name, self.stochastic_method, self.drop_rate,
                                   self.drop_distribution, state.generator("cpu"))
            self.num_stochastic_layers = count_module_instances(state.model, target)
            logger.log_hyperparameters({"stochastic_depth/num_stochastic_layers": self.num_stochastic_layers})
            return None
        if not self.num_stochastic_layers:
            return None
        fraction = min(1.0, state.get_elapsed_duration() / float(self.drop_warmup))
        _set_drop_rates(state.model, fraction)
        logger.log_metrics({"stochastic_depth/drop_rate": fraction * self.drop_rate})
        return None

    def state_dict(self) -> dict[str, Any]:
        """Its class and hyperparameters, ``drop_warmup`` as a time string (a checkpoint rebuilds it)."""
        described = super().state_dict()
        described["hparams"]["drop_warmup"] = str(self.drop_warmup)
        return described

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore: the drop rates follow the run's elapsed duration at each BATCH_START."""

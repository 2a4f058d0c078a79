"""Factorize: split wide ``Conv2d`` and ``Linear`` layers into two low-rank ones.

A ``Conv2d`` becomes a :class:`FactorizedConv2d` (a ``k x k`` convolution to ``latent_channels``
channels, then a ``1 x 1`` one back) and a ``Linear`` a :class:`FactorizedLinear`, where that
lowers the multiply-adds. Surgery starts the two layers from the truncated SVD of the original
weight (the best approximation of that rank) and keeps its bias, so a trained model stays close
to what it computed; the original parameters leave the optimizers and the new ones join them.
"""

from __future__ import annotations

import abc
import math
from typing import Any, Callable, Optional, Union

import torch
from torch import nn

from composer_lab.algorithms.factorize_core import (LowRankSolution, factorize_conv2d, factorize_matrix,
                                                    svd_factors)
from composer_lab.algorithms.module_surgery import (ReplacementFunction, count_module_instances,
                                                    replace_module_classes, replaced_names, warn_if_unchanged)
from composer_lab.algorithms.surgery_algorithm import StateDictSurgery
from composer_lab.algorithms.validation import check_positive
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State

__all__ = ["Factorize", "apply_factorization", "LowRankSolution", "factorize_conv2d", "factorize_matrix",
           "FactorizedConv2d", "FactorizedLinear", "factorizing_could_speedup"]

LOG_NUM_CONV2D_REPLACEMENTS_KEY = "factorize/num_conv2d_replacements"
LOG_NUM_LINEAR_REPLACEMENTS_KEY = "factorize/num_linear_replacements"


def _clean_latent_size(latent_size: Union[int, float], in_size: int, out_size: int) -> int:
    """``latent_size`` if >= 1, else that fraction of ``min(in_size, out_size)`` (at least 1)."""
    if latent_size < 1:
        return max(1, int(latent_size * min(in_size, out_size)))
    return int(latent_size)


def _max_rank_with_possible_speedup(in_size: int, out_size: int, kernel_size: Any = None) -> int:
    """The largest latent size whose two layers take fewer multiply-adds than the one."""
    fan_in = in_size * (math.prod(_pair(kernel_size)) if kernel_size is not None else 1)
    return int(math.ceil(fan_in * out_size / (fan_in + out_size) - 1))


def _pair(value: Any) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value, value)


def factorizing_could_speedup(module: nn.Module, latent_size: Union[int, float]) -> bool:
    """Whether factorizing ``module`` (``Conv2d``, ``Linear`` or a factorized one) to ``latent_size``
    lowers its multiply-adds; False for any other module and for grouped convolutions."""
    if isinstance(module, _FactorizedModule):
        return module.should_factorize(latent_size)
    if isinstance(module, nn.Conv2d):
        if module.groups > 1:
            return False
        size = _clean_latent_size(latent_size, module.in_channels, module.out_channels)
        return size <= _max_rank_with_possible_speedup(module.in_channels, module.out_channels, module.kernel_size)
    if isinstance(module, nn.Linear):
        size = _clean_latent_size(latent_size, module.in_features, module.out_features)
        return size <= _max_rank_with_possible_speedup(module.in_features, module.out_features)
    return False


def _alias(size: str) -> property:
    """A read-only property reading ``self.<size>``: a generic size under its Composer name."""
    return property(lambda self: getattr(self, size), doc=f"``{size}``, under its Composer name.")


class _FactorizedModule(nn.Module, abc.ABC):
    """Two layers ``module0`` (to ``latent_size``) then ``module1``, with no nonlinearity between."""

    def __init__(self, in_size: int, out_size: int, latent_size: Union[int, float], kernel_size: Any = 1) -> None:
        super().__init__()
        self.in_size, self.out_size, self.kernel_size = in_size, out_size, kernel_size
        self.latent_size = _clean_latent_size(latent_size, in_size, out_size)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.module1(self.module0(input))

    def reset_parameters(self) -> None:
        self.module0.reset_parameters()
        self.module1.reset_parameters()

    def _max_rank_with_speedup(self) -> int:
        if getattr(self, "module1", None) is not None:
            return self.latent_size - 1  # already factorized: any lower rank is cheaper
        return _max_rank_with_possible_speedup(self.in_size, self.out_size, self.kernel_size)

    def should_factorize(self, proposed_rank: Union[int, float]) -> bool:
        """Whether ``proposed_rank`` lowers the multiply-adds."""
        return _clean_latent_size(proposed_rank, self.in_size, self.out_size) <= self._max_rank_with_speedup()

    def _check_latent(self, name: str) -> None:
        if not self.should_factorize(self.latent_size):
            raise ValueError(f"{name} {self.latent_size} is not small enough to merit factorization; pass "
                             f"{name} <= {self._max_rank_with_speedup()}")

    def set_rank(self, input: torch.Tensor, rank: int) -> None:
        """Lower the latent size to ``rank``, fitting the new factors to this module's outputs on
        ``input``. New Parameter objects: give them to the optimizer (``update_params_in_optimizer``)."""
        if rank > self.latent_size:
            raise ValueError(f"requested rank {rank} exceeds the current rank {self.latent_size}; pass a rank "
                             f"<= {self.latent_size}")
        if rank < self.latent_size:
            self.apply_solution(self.solution_for_rank(input, rank))

    def _start_from(self, module: nn.Module) -> "_FactorizedModule":
        """Start the two layers from the truncated SVD of ``module``'s weight (one row per output)
        and keep its bias; returns this module, on that weight's device and dtype."""
        weight = module.weight.detach()
        with torch.no_grad():
            wa, wb = svd_factors(weight.reshape(weight.shape[0], -1).float(), self.latent_size)
        kernel = (None,) * (weight.dim() - 2)  # a convolution's 1 x 1 kernel dimensions (none for a Linear)
        _set_factors(self.module0, self.module1, wb.reshape(self.module0.weight.shape), wa[(..., *kernel)],
                     None if module.bias is None else module.bias.detach())
        return self.to(weight.device, weight.dtype)

    @abc.abstractmethod
    def solution_for_rank(self, input: torch.Tensor, rank: int) -> LowRankSolution:
        """The factors of rank ``rank`` that best keep this module's outputs on ``input``."""

    @abc.abstractmethod
    def apply_solution(self, solution: LowRankSolution) -> None:
        """Take the factors of ``solution`` as this module's weights."""


def _set_factors(module0: nn.Module, module1: nn.Module, wa: torch.Tensor, wb: torch.Tensor,
                 bias: Optional[torch.Tensor]) -> None:
    """Give ``module0`` the weight ``wa`` (no bias) and ``module1`` the weight ``wb`` and ``bias``,
    as new Parameters of the modules' device and dtype."""
    weight = module0.weight
    module0.weight = nn.Parameter(wa.to(weight.device, weight.dtype))
    module1.weight = nn.Parameter(wb.to(weight.device, weight.dtype))
    if module1.bias is not None:
        module1.bias = nn.Parameter(bias.to(weight.device, weight.dtype) if bias is not None
                                    else torch.zeros_like(module1.bias))


class FactorizedConv2d(_FactorizedModule):
    """A ``Conv2d`` as a ``kernel_size`` convolution to ``latent_channels`` channels (no bias), then
    a ``1 x 1`` convolution to ``out_channels`` (with the bias). ``latent_channels`` < 1 is a
    fraction of ``min(in_channels, out_channels)``; ``kwargs`` (stride, padding, ...) go to the
    first convolution; grouped convolutions are not supported."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any,
                 latent_channels: Union[int, float] = 0.25, **kwargs: Any) -> None:
        super().__init__(in_channels, out_channels, latent_channels, kernel_size)
        if kwargs.get("groups", 1) > 1:
            raise NotImplementedError("Factorizing grouped convolutions is not supported")
        self._check_latent("latent_channels")
        self.kwargs = kwargs
        self.convolution_kwargs = {k: v for k, v in kwargs.items() if k != "bias"}
        self.module0 = nn.Conv2d(in_channels, self.latent_size, kernel_size, bias=False, **self.convolution_kwargs)
        self.module1 = nn.Conv2d(self.latent_size, out_channels, kernel_size=1, bias=kwargs.get("bias", True))

    in_channels = _alias("in_size")
    out_channels = _alias("out_size")
    latent_channels = _alias("latent_size")

    def solution_for_rank(self, input: torch.Tensor, rank: int) -> LowRankSolution:
        kwargs = {k: v for k, v in self.convolution_kwargs.items() if k in ("padding", "padding_mode", "dilation")}
        return factorize_conv2d(input, self.module0.weight, self.module1.weight, rank=rank, biasA=self.module0.bias,
                                biasB=self.module1.bias, **kwargs)

    def apply_solution(self, solution: LowRankSolution) -> None:
        self.latent_size = solution.rank
        self.module0.out_channels = self.module1.in_channels = solution.rank
        _set_factors(self.module0, self.module1, solution.Wa, solution.Wb, solution.bias)

    @staticmethod
    def max_allowed_latent_features(in_features: int, out_features: int, kernel_size: Any) -> int:
        return _max_rank_with_possible_speedup(in_features, out_features, kernel_size)

    @staticmethod
    def from_conv2d(module: nn.Conv2d, module_ix: int = -1, **kwargs: Any) -> "FactorizedConv2d":
        """A factorized copy of ``module`` started from its weight's truncated SVD and its bias."""
        conv = FactorizedConv2d(module.in_channels, module.out_channels, module.kernel_size, stride=module.stride,
                                padding=module.padding, dilation=module.dilation, groups=module.groups,
                                padding_mode=module.padding_mode, bias=module.bias is not None, **kwargs)
        return conv._start_from(module)


class FactorizedLinear(_FactorizedModule):
    """A ``Linear`` as a ``Linear`` to ``latent_features`` (no bias) then one to ``out_features``
    (with the bias); ``latent_features`` < 1 is a fraction of ``min(in_features, out_features)``."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 latent_features: Union[int, float] = 0.25) -> None:
        super().__init__(in_features, out_features, latent_features)
        self._check_latent("latent_features")
        self.bias = bias
        self.module0 = nn.Linear(in_features, self.latent_size, bias=False)
        self.module1 = nn.Linear(self.latent_size, out_features, bias=bias)

    in_features = _alias("in_size")
    out_features = _alias("out_size")
    latent_features = _alias("latent_size")

    def solution_for_rank(self, input: torch.Tensor, rank: int) -> LowRankSolution:
        with torch.no_grad():
            target = self(input)
        return factorize_matrix(input, target, self.module0.weight.T, self.module1.weight.T, bias=self.module1.bias,
                                rank=rank)

    def apply_solution(self, solution: LowRankSolution) -> None:
        self.latent_size = solution.rank
        self.module0.out_features = self.module1.in_features = solution.rank
        _set_factors(self.module0, self.module1, solution.Wa.T, solution.Wb.T, solution.bias)

    @staticmethod
    def max_allowed_latent_channels(in_features: int, out_features: int) -> int:
        return _max_rank_with_possible_speedup(in_features, out_features)

    @staticmethod
    def from_linear(module: nn.Linear, module_ix: int = -1, **kwargs: Any) -> "FactorizedLinear":
        """A factorized copy of ``module`` started from its weight's truncated SVD and its bias."""
        linear = FactorizedLinear(module.in_features, module.out_features, bias=module.bias is not None, **kwargs)
        return linear._start_from(module)


def _check(min_channels: Any, latent_channels: Any, min_features: Any, latent_features: Any) -> None:
    check_positive("min_channels", min_channels, integer=True, allow_zero=True)
    check_positive("latent_channels", latent_channels)
    check_positive("min_features", min_features, integer=True, allow_zero=True)
    check_positive("latent_features", latent_features)


def _tied_weights(model: nn.Module) -> set[int]:
    """The ids of weights that more than one module holds (tied): factorizing would untie them."""
    seen: dict[int, int] = {}
    for module in {id(m): m for m in model.modules()}.values():
        weight = module._parameters.get("weight")
        if weight is not None:
            seen[id(weight)] = seen.get(id(weight), 0) + 1
    return {key for key, count in seen.items() if count > 1}


def _policy(kind: type, sizes: Callable[[nn.Module], tuple[int, int]], minimum: int, latent: Union[int, float],
            tied: set[int], factorized: Callable[[nn.Module, int], nn.Module]) -> ReplacementFunction:
    """The surgery policy replacing a ``kind`` (that class exactly) whose input and output ``sizes``
    are at least ``minimum`` by ``factorized(module, index)``, where factorizing to ``latent`` lowers
    its multiply-adds; a layer with a tied weight stays."""
    def policy(module: nn.Module, index: int) -> Optional[nn.Module]:
        if id(module.weight) in tied:
            return None
        if type(module) is kind and min(sizes(module)) >= minimum and factorizing_could_speedup(module, latent):
            return factorized(module, index)
        return None
    return policy


def apply_factorization(model: nn.Module, factorize_convs: bool = True, factorize_linears: bool = True,
                        min_channels: int = 512, latent_channels: Union[int, float] = 0.25, min_features: int = 512,
                        latent_features: Union[int, float] = 0.25,
                        optimizers: Any = None) -> dict[nn.Module, nn.Module]:
    """Replace, in place, each ``Conv2d`` with at least ``min_channels`` input and output channels
    and each ``Linear`` with at least ``min_features`` by its factorized form, where
    ``latent_channels`` / ``latent_features`` lowers its multiply-adds; layers sharing a weight
    (tied) are left alone, as factorizing would untie them. Pass the ``optimizers``
    built on ``model``. One surgery: if any replacement fails, none is made. Returns
    ``{original: factorized}``; :class:`NoEffectWarning` when nothing qualified."""
    _check(min_channels, latent_channels, min_features, latent_features)
    tied = _tied_weights(model)

    policies: dict[type, ReplacementFunction] = {}
    if factorize_convs:
        policies[nn.Conv2d] = _policy(nn.Conv2d, lambda m: (m.in_channels, m.out_channels), min_channels,
                                      latent_channels, tied, lambda m, i: FactorizedConv2d.from_conv2d(
                                          m, i, latent_channels=latent_channels))
    if factorize_linears:
        policies[nn.Linear] = _policy(nn.Linear, lambda m: (m.in_features, m.out_features), min_features,
                                      latent_features, tied, lambda m, i: FactorizedLinear.from_linear(
                                          m, i, latent_features=latent_features))
    replaced = replace_module_classes(model, policies, optimizers=optimizers)
    warn_if_unchanged(replaced, "Factorize", model, f"no Conv2d with at least min_channels={min_channels} channels "
                      f"nor Linear with at least min_features={min_features} features that latent_channels="
                      f"{latent_channels} / latent_features={latent_features} would make cheaper")
    return replaced


class Factorize(StateDictSurgery):
    """Applies :func:`apply_factorization` at INIT with the run's optimizers; logs
    ``factorize/num_conv2d_replacements`` and ``factorize/num_linear_replacements`` (those enabled)
    through ``log_hyperparameters``.

    Args:
        factorize_convs, factorize_linears: which layer kinds to factorize.
        min_channels, min_features: leave narrower layers alone.
        latent_channels, latent_features: the latent size, or a fraction (< 1) of the layer's.
    """

    def __init__(self, factorize_convs: bool = True, factorize_linears: bool = True, min_channels: int = 256,
                 latent_channels: Union[int, float] = 0.25, min_features: int = 256,
                 latent_features: Union[int, float] = 128) -> None:
        super().__init__()
        _check(min_channels, latent_channels, min_features, latent_features)
        if not (factorize_convs or factorize_linears):
            raise ValueError("Factorize with factorize_convs=False and factorize_linears=False does nothing; "
                             "enable at least one")
        self.factorize_convs = factorize_convs
        self.factorize_linears = factorize_linears
        self.min_channels = min_channels
        self.latent_channels = latent_channels
        self.min_features = min_features
        self.latent_features = latent_features

    def operate(self, model: nn.Module, optimizers: list) -> list[str]:
        return replaced_names(model, lambda: apply_factorization(
            model, self.factorize_convs, self.factorize_linears, self.min_channels, self.latent_channels,
            self.min_features, self.latent_features, optimizers))

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        super().apply(event, state, logger)
        if self.factorize_convs:
            logger.log_hyperparameters({LOG_NUM_CONV2D_REPLACEMENTS_KEY:
                                        count_module_instances(state.model, FactorizedConv2d)})
        if self.factorize_linears:
            logger.log_hyperparameters({LOG_NUM_LINEAR_REPLACEMENTS_KEY:
                                        count_module_instances(state.model, FactorizedLinear)})
        return None

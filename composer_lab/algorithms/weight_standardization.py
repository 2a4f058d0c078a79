"""WeightStandardization (Qiao et al., 2019): convolutions use standardized weights.

Each ``nn.Conv1d/2d/3d`` gets a ``torch.nn.utils.parametrize`` parametrization of its
``weight``: the forward reads ``(W - mean) / sqrt(var + 1e-10)``, per output channel, while the
trained Parameter (the same object, now ``parametrizations.weight.original``) stays in the
optimizers. ``parametrize.remove_parametrizations(conv, 'weight')`` takes it off again.
``n_last_layers_ignore`` leaves the last convolutions, in the order the forward calls them (read
with ``torch.fx``; in module order where the model cannot be traced, with a warning).
"""

from __future__ import annotations

import warnings
from typing import Optional

import torch
import torch.nn.utils.parametrize as parametrize
from torch import nn
from torch.fx import symbolic_trace

from composer_lab.algorithms.surgery_algorithm import SurgeryAlgorithm
from composer_lab.algorithms.validation import check_positive
from composer_lab.algorithms.warnings import NoEffectWarning
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State

__all__ = ["WeightStandardization", "apply_weight_standardization", "WeightStandardizer"]

_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def _standardize_weights(W: torch.Tensor) -> torch.Tensor:
    """``W`` with zero mean and unit variance over every dimension but the first (per output channel)."""
    var, mean = torch.var_mean(W, dim=list(range(1, W.dim())), keepdim=True, unbiased=False)
    return (W - mean) / torch.sqrt(var + 1e-10)


class WeightStandardizer(nn.Module):
    """The parametrization: standardizes the weight it is given."""

    def forward(self, W: torch.Tensor) -> torch.Tensor:
        return _standardize_weights(W)


def _convs_in_call_order(module: nn.Module, n_last_layers_ignore: int) -> list[nn.Module]:
    """The convolutions of ``module``, each once, in the order the forward calls them (by
    ``torch.fx``), or in module order (with a warning when layers are to be ignored)."""
    try:
        ordered = symbolic_trace(module).modules()
    except Exception as err:  # (any failure of tracing: the model's own code runs on proxies)
        if n_last_layers_ignore > 0:
            warnings.warn(f"WeightStandardization: {type(module).__name__} cannot be traced by torch.fx "
                          f"({type(err).__name__}), so the n_last_layers_ignore={n_last_layers_ignore} convolutions "
                          f"left alone are the last in module order, which may not be the last the forward calls",
                          stacklevel=3)
        ordered = module.modules()
    return [m for m in ordered if isinstance(m, _CONVS)]


def apply_weight_standardization(module: nn.Module, n_last_layers_ignore: int = 0) -> int:
    """Parametrize the convolution weights of ``module`` in place, all but the last
    ``n_last_layers_ignore``; returns how many. Convolutions already standardized are left as
    they are. Warns :class:`~composer_lab.algorithms.warnings.NoEffectWarning` when none was.
    If registering fails half-way, the ones registered are removed again before raising."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"apply_weight_standardization needs a torch.nn.Module, got {type(module).__name__}; "
                        f"pass the model itself")
    check_positive("n_last_layers_ignore", n_last_layers_ignore, integer=True, allow_zero=True)
    convs = _convs_in_call_order(module, n_last_layers_ignore)
    targets = [c for c in convs[:max(len(convs) - n_last_layers_ignore, 0)] if not _standardized(c)]
    done: list[nn.Module] = []
    try:
        for conv in targets:
            parametrize.register_parametrization(conv, "weight", WeightStandardizer())
            done.append(conv)
    except BaseException:
        for conv in done:
            parametrize.remove_parametrizations(conv, "weight", leave_parametrized=False)
        raise
    if not done:
        warnings.warn(NoEffectWarning(f"WeightStandardization changed nothing in {type(module).__name__}: "
                                      f"{len(convs)} convolution(s) (Conv1d/2d/3d), n_last_layers_ignore="
                                      f"{n_last_layers_ignore}"), stacklevel=2)
    return len(done)


def _standardized(conv: nn.Module) -> bool:
    return parametrize.is_parametrized(conv, "weight") and any(
        isinstance(p, WeightStandardizer) for p in conv.parametrizations["weight"])


class WeightStandardization(SurgeryAlgorithm):
    """Applies :func:`apply_weight_standardization` at INIT; logs
    ``WeightStandardization/num_weights_standardized`` with ``logger.log_hyperparameters``.

    Args:
        n_last_layers_ignore: how many of the last convolutions (the classifier, say) to leave.
    """

    def __init__(self, n_last_layers_ignore: int = 0) -> None:
        super().__init__()
        self.n_last_layers_ignore = check_positive("n_last_layers_ignore", n_last_layers_ignore, integer=True,
                                                   allow_zero=True)

    @staticmethod
    def required_on_load() -> bool:
        return True

    def operate(self, model: nn.Module, optimizers: list) -> list[str]:
        before = {id(m) for m in model.modules() if _standardized(m)}
        apply_weight_standardization(model, self.n_last_layers_ignore)
        return [name for name, m in model.named_modules() if _standardized(m) and id(m) not in before]

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        super().apply(event, state, logger)
        logger.log_hyperparameters({"WeightStandardization/num_weights_standardized": len(self.replaced)})
        return None

"""WeightStandardization: the forward sees standardized convolution weights, the trained
Parameter stays the optimizer's and gets gradients, the parametrization comes off again, the
last convolutions in call order are left, and a failure half-way leaves the model as it was."""

from __future__ import annotations

import warnings
from unittest.mock import Mock

import pytest
import torch
import torch.nn.utils.parametrize as parametrize
from torch import nn

import composer_lab.functional as cf
from composer_lab.algorithms import WeightStandardization
from composer_lab.algorithms.warnings import NoEffectWarning
from composer_lab.core import Event, State


class TwoConvs(nn.Module):
    """``head`` is registered first but called last, so module order and call order differ."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Conv2d(8, 4, 1)
        self.body = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(x))).mean((2, 3))


class Untraceable(TwoConvs):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # data-dependent control flow: torch.fx cannot trace it
            x = x + 1
        return super().forward(x)


def test_convolutions_see_standardized_weights_and_train_the_same_parameter():
    torch.manual_seed(0)
    model = TwoConvs()
    original = model.body.weight
    before = original.detach().clone()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    assert cf.apply_weight_standardization(model) == 2
    for conv in (model.head, model.body):
        var, mean = torch.var_mean(conv.weight, dim=[1, 2, 3], unbiased=False)
        torch.testing.assert_close(mean, torch.zeros_like(mean), atol=1e-6, rtol=0)
        torch.testing.assert_close(var, torch.ones_like(var), atol=1e-5, rtol=0)
    assert model.body.parametrizations.weight.original is original  # the optimizer's Parameter
    torch.testing.assert_close(original.detach(), before)  # the stored weight itself is unchanged
    model(torch.rand(4, 3, 8, 8)).sum().backward()
    assert original.grad is not None and original.grad.abs().sum() > 0
    optimizer.step()
    assert not torch.equal(original.detach(), before)


@pytest.mark.parametrize("leave", [False, True])
def test_the_parametrization_comes_off(leave):
    torch.manual_seed(0)
    model = TwoConvs()
    raw = model.body.weight.detach().clone()
    cf.apply_weight_standardization(model)
    standardized = model.body.weight.detach().clone()
    parametrize.remove_parametrizations(model.body, "weight", leave_parametrized=leave)
    assert not parametrize.is_parametrized(model.body)
    torch.testing.assert_close(model.body.weight.detach(), standardized if leave else raw)


@pytest.mark.parametrize("ignore, expected", [(0, {"head", "body"}), (1, {"body"}), (3, set())])
def test_n_last_layers_ignore_counts_in_call_order(ignore, expected):
    model = TwoConvs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoEffectWarning)
        assert cf.apply_weight_standardization(model, n_last_layers_ignore=ignore) == len(expected)
    assert {name for name in ("head", "body") if parametrize.is_parametrized(getattr(model, name))} == expected


def test_an_untraceable_model_falls_back_to_module_order_with_a_warning():
    model = Untraceable()
    with pytest.warns(UserWarning, match="cannot be traced by torch.fx"):
        assert cf.apply_weight_standardization(model, n_last_layers_ignore=1) == 1
    assert parametrize.is_parametrized(model.head) and not parametrize.is_parametrized(model.body)


def test_applying_twice_standardizes_once():
    model = TwoConvs()
    cf.apply_weight_standardization(model)
    with pytest.warns(NoEffectWarning):
        assert cf.apply_weight_standardization(model) == 0
    assert len(model.body.parametrizations.weight) == 1


def test_no_convolution_warns_no_effect():
    with pytest.warns(NoEffectWarning, match="0 convolution"):
        assert cf.apply_weight_standardization(nn.Sequential(nn.Linear(2, 2))) == 0


def test_a_failure_half_way_takes_off_what_was_registered(monkeypatch):
    model = TwoConvs()
    weights = {name: p.detach().clone() for name, p in model.named_parameters()}
    real = parametrize.register_parametrization
    calls = []

    def fail_second(module, name, parametrization, **kwargs):
        calls.append(module)
        if len(calls) == 2:
            raise RuntimeError("injected")
        return real(module, name, parametrization, **kwargs)

    monkeypatch.setattr(parametrize, "register_parametrization", fail_second)
    with pytest.raises(RuntimeError, match="injected"):
        cf.apply_weight_standardization(model)
    assert not any(parametrize.is_parametrized(m) for m in model.modules())
    assert {n: p.detach() for n, p in model.named_parameters()}.keys() == weights.keys()
    assert all(torch.equal(p.detach(), weights[n]) for n, p in model.named_parameters())


def test_algorithm_at_init_logs_composers_hyperparameter():
    state, logger = State(TwoConvs()), Mock()
    WeightStandardization(n_last_layers_ignore=1).apply(Event.INIT, state, logger)
    logger.log_hyperparameters.assert_called_once_with({"WeightStandardization/num_weights_standardized": 1})


@pytest.mark.parametrize("ignore", [-1, 0.5])
def test_bad_n_last_layers_ignore_is_refused(ignore):
    with pytest.raises((ValueError, TypeError), match="n_last_layers_ignore"):
        WeightStandardization(n_last_layers_ignore=ignore)

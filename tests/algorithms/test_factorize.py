"""Factorize (method card): wide convolutions and linears become two low-rank layers of the
requested rank where that lowers the multiply-adds, started from the original's truncated SVD
(so they approximate it: exactly at full rank), counts logged; Composer's factorization math."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import composer_lab.functional as cf
from composer_lab.algorithms import Factorize
from composer_lab.algorithms.factorize import (FactorizedConv2d, FactorizedLinear, factorize_conv2d, factorize_matrix,
                                               factorizing_could_speedup)
from composer_lab.algorithms.warnings import NoEffectWarning

from algo_helpers import Aliased, Tied, make_state
from surgery_models import one_thread, wide_cnn  # noqa: F401 (one_thread: an autouse fixture)


def test_wide_layers_are_factorized_to_the_requested_rank():
    model = wide_cnn()
    replaced = cf.apply_factorization(model, min_channels=16, latent_channels=4, min_features=32, latent_features=0.25)
    assert [type(m) for m in replaced.values()] == [FactorizedConv2d, FactorizedConv2d, FactorizedLinear]
    assert model[2].latent_channels == 4 and model[2].module0.weight.shape == (4, 16, 3, 3)
    assert model[2].module1.weight.shape == (32, 4, 1, 1) and model[2].module0.stride == (2, 2)
    assert model[8].latent_features == 8 and model[8].module0.weight.shape == (8, 32)
    assert model(torch.rand(2, 3, 8, 8)).shape == (2, 4)


def test_the_factorized_layer_approximates_the_original():
    torch.manual_seed(0)
    low_rank = nn.Linear(24, 24)
    with torch.no_grad():  # a weight of rank 4: factorized at rank 4 it is the same map
        low_rank.weight.copy_(torch.randn(24, 4) @ torch.randn(4, 24) / 4)
    x = torch.randn(16, 24)
    assert torch.allclose(FactorizedLinear.from_linear(low_rank, latent_features=4)(x), low_rank(x), atol=1e-4)
    conv = nn.Conv2d(16, 16, 3, padding=1)
    images = torch.randn(2, 16, 6, 6)
    errors = [((FactorizedConv2d.from_conv2d(conv, latent_channels=k)(images) - conv(images)) ** 2).mean()
              for k in (2, 6, 12)]
    assert errors[0] > errors[1] > errors[2]  # more rank, closer


def test_layers_too_narrow_or_not_worth_it_are_left_alone():
    assert not factorizing_could_speedup(nn.Linear(8, 8), 4)  # 4 + 4 multiply-adds per output: no saving
    assert not factorizing_could_speedup(nn.Conv2d(8, 8, 3, groups=2), 1)
    with pytest.raises(ValueError, match="latent_features 4 is not small enough to merit factorization; pass "
                                         "latent_features <= 3"):
        FactorizedLinear(8, 8, latent_features=4)
    with pytest.warns(NoEffectWarning, match="Factorize changed nothing in Sequential"):
        assert cf.apply_factorization(wide_cnn()) == {}


def test_the_algorithm_updates_the_optimizer_and_logs_both_counts():
    model = wide_cnn()
    algorithm = Factorize(min_channels=16, latent_channels=4, min_features=32, latent_features=8)
    state, engine = make_state(model, (torch.rand(2, 3, 8, 8), torch.zeros(2, dtype=torch.long)), [algorithm])
    held = [id(p) for g in state.optimizers[0].param_groups for p in g["params"]]
    assert sorted(held) == sorted(id(p) for p in model.parameters())
    assert engine.logger.hyperparameters == {"factorize/num_conv2d_replacements": 2,
                                             "factorize/num_linear_replacements": 1}


def test_set_rank_lowers_the_rank_keeping_the_outputs_close():
    torch.manual_seed(0)
    module = FactorizedLinear(36, 40, latent_features=16)
    x = torch.randn(64, 36)
    module.set_rank(x, 8)
    assert module.latent_features == 8 and module.module0.weight.shape == (8, 36)
    with pytest.raises(ValueError, match="requested rank 12 exceeds the current rank 8"):
        module.set_rank(x, 12)


def test_factorize_matrix_and_conv2d_explain_the_output():
    torch.manual_seed(0)
    x, w = torch.randn(100, 32), torch.randn(32, 64)
    solution = factorize_matrix(x, x @ w, w, rank=8)
    assert solution.Wa.shape == (32, 8) and solution.Wb.shape == (8, 64) and solution.nmse < 1
    conv = factorize_conv2d(torch.randn(1, 32, 4, 4), torch.randn(24, 32, 3, 3), rank=6, padding=1)
    assert conv.Wa.shape == (6, 32, 3, 3) and conv.Wb.shape == (24, 6, 1, 1) and conv.nmse < 1


@pytest.mark.parametrize("kwargs, message", [
    (dict(factorize_convs=False, factorize_linears=False), "does nothing; enable at least one"),
    (dict(latent_channels=0), "latent_channels must be > 0"),
    (dict(min_features=-2), "min_features must be >= 0"),
])
def test_bad_hyperparameters_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Factorize(**kwargs)


def test_tied_layers_stay_tied_and_aliased_ones_are_factorized_once():
    tied = Tied(3)
    replaced = cf.apply_factorization(tied, min_channels=1, latent_channels=2, min_features=3, latent_features=1)
    assert tied.unembed.weight is tied.project.weight and type(tied.project) is nn.Linear  # left alone: tied
    assert isinstance(tied.head, FactorizedLinear) and len(replaced) == 2  # the head and the conv
    aliased = Aliased(3)
    replaced = cf.apply_factorization(aliased, min_channels=3, latent_channels=2, factorize_linears=False)
    assert len(replaced) == 2 and isinstance(aliased.stem, FactorizedConv2d) and aliased.stem is aliased.features[0]
    assert aliased(torch.rand(2, 3, 8, 8)).shape == (2, 3)

"""SqueezeExcite (method card): an SE block after each wide enough convolution, the output shape
kept, each channel scaled by a sigmoid of the pooled features; the count logged."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import composer_lab.functional as cf
from composer_lab.algorithms import SqueezeExcite, SqueezeExcite2d, SqueezeExciteConv2d
from composer_lab.algorithms.module_surgery import count_module_instances
from composer_lab.algorithms.warnings import NoEffectWarning

from algo_helpers import make_state
from surgery_models import one_thread, wide_cnn  # noqa: F401 (one_thread: an autouse fixture)


def test_a_block_follows_each_wide_enough_conv_and_the_output_shape_is_kept():
    torch.manual_seed(0)
    model = wide_cnn()
    x = torch.rand(2, 3, 8, 8)
    shape = model(x).shape
    convs = [m for m in model if isinstance(m, nn.Conv2d)]
    replaced = cf.apply_squeeze_excite(model, latent_channels=4, min_channels=16)
    assert list(replaced) == convs[1:]  # the stem has 3 input channels
    assert count_module_instances(model, SqueezeExciteConv2d) == 2 and model[2].conv is convs[1]
    assert model(x).shape == shape


def test_applying_twice_adds_no_second_block():
    model = wide_cnn()
    cf.apply_squeeze_excite(model, latent_channels=4, min_channels=16)
    with pytest.warns(NoEffectWarning, match="SqueezeExcite changed nothing in Sequential"):
        assert cf.apply_squeeze_excite(model, latent_channels=4, min_channels=16) == {}
    assert count_module_instances(model, SqueezeExciteConv2d) == 2


def test_the_block_scales_each_channel_by_a_sigmoid_of_the_pooled_features():
    torch.manual_seed(0)
    se = SqueezeExcite2d(8, latent_channels=0.5)
    assert se.latent_channels == 4
    x = torch.rand(2, 8, 5, 5)
    _, _, down, relu, up, _ = se.pool_and_mlp
    scale = torch.sigmoid(up(relu(down(x.mean((2, 3))))))
    assert torch.allclose(se(x), x * scale[:, :, None, None], atol=1e-6)


def test_the_algorithm_joins_the_new_parameters_to_the_optimizer_and_logs_the_count():
    model = wide_cnn()
    state, engine = make_state(model, (torch.rand(2, 3, 8, 8), torch.zeros(2, dtype=torch.long)),
                               [SqueezeExcite(latent_channels=4, min_channels=16)])
    held = {id(p) for g in state.optimizers[0].param_groups for p in g["params"]}
    assert held == {id(p) for p in model.parameters()}
    assert engine.logger.hyperparameters == {"squeeze_excite/num_squeeze_excite_layers": 2}
    metrics = engine.logger.metrics.set_index("name").value
    assert metrics["squeeze_excite/num_squeeze_excite_layers"] == 2  # (a hyperparameter is a metric row too)


@pytest.mark.parametrize("kwargs, message", [(dict(latent_channels=0), "latent_channels must be > 0"),
                                             (dict(min_channels=-1), "min_channels must be >= 0"),
                                             (dict(min_channels=1.5), "min_channels must be an integer")])
def test_bad_hyperparameters_are_refused(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        SqueezeExcite(**kwargs)

"""LowPrecisionGroupNorm: under CPU bf16 autocast the GroupNorms compute and return bfloat16
(plain GroupNorm returns float32 there), close to the float32 norm; the Parameter objects are
kept; nothing changes outside amp precisions."""

from __future__ import annotations

from unittest.mock import Mock

import pytest
import torch
from torch import nn

import composer_lab.functional as cf
from composer_lab.algorithms import LowPrecisionGroupNorm
from composer_lab.algorithms.low_precision_groupnorm import LPGroupNorm
from composer_lab.algorithms.warnings import NoEffectWarning
from composer_lab.core import Event, State


def _model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.GroupNorm(2, 8), nn.ReLU(), nn.GroupNorm(4, 8, affine=False))
    with torch.no_grad():
        model[1].weight.uniform_(0.5, 1.5)
        model[1].bias.uniform_(-0.5, 0.5)
    return model


def test_under_cpu_bf16_autocast_the_norm_runs_in_bfloat16_close_to_float32():
    gn = _model()[1]
    lp = LPGroupNorm(2, 8)
    lp.load_state_dict(gn.state_dict())
    x = torch.randn(4, 8, 5, 5, generator=torch.Generator().manual_seed(0)) * 5 + 2
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain, low = gn(x), lp(x)
    assert plain.dtype == torch.float32 and low.dtype == torch.bfloat16
    torch.testing.assert_close(low.float(), gn(x), atol=0.05, rtol=0.02)
    torch.testing.assert_close(lp(x), gn(x))


def test_functional_replaces_every_groupnorm_keeping_parameters_under_amp():
    model = _model()
    params = [id(p) for p in model.parameters()]
    assert cf.apply_low_precision_groupnorm(model, "amp_fp16") is model
    assert [type(m) for m in model if isinstance(m, nn.GroupNorm)] == [LPGroupNorm, LPGroupNorm]
    assert [id(p) for p in model.parameters()] == params
    assert model[3].weight is None and model[3].affine is False and model[3].num_groups == 4
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(torch.randn(2, 3, 6, 6))
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_algorithm_reads_the_runs_precision():
    with pytest.warns(NoEffectWarning, match="got 'fp32'"):
        LowPrecisionGroupNorm().apply(Event.INIT, State(_model()), logger=Mock())
    state = State(_model(), precision="amp_bf16")
    algorithm = LowPrecisionGroupNorm()
    algorithm.apply(Event.INIT, state, logger=Mock())
    assert algorithm.replaced == ["1", "3"] and type(state.model[1]) is LPGroupNorm
    with pytest.raises(ValueError, match="LowPrecisionGroupNorm applies at Event.INIT"):
        LowPrecisionGroupNorm(apply_at="fit_start")


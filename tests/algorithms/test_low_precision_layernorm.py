"""LowPrecisionLayerNorm: under CPU bf16 autocast the LayerNorms compute and return bfloat16
(plain LayerNorm returns float32 there), close to the float32 norm; outside autocast they are
the plain norm; the Parameter objects are kept; nothing changes outside amp precisions."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import composer_lab.functional as cf
from composer_lab.algorithms import LowPrecisionLayerNorm
from composer_lab.algorithms.low_precision_layernorm import LPLayerNorm
from composer_lab.algorithms.warnings import NoEffectWarning
from composer_lab.core import Engine, Event, State
from composer_lab.trainer import Trainer


def _model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.ReLU(), nn.LayerNorm(8, bias=False), nn.Linear(8, 3))
    with torch.no_grad():
        model[1].weight.uniform_(0.5, 1.5)
        model[1].bias.uniform_(-0.5, 0.5)
    return model


def test_under_cpu_bf16_autocast_the_norm_runs_in_bfloat16_close_to_float32():
    ln = _model()[1]
    lp = LPLayerNorm(8)
    lp.load_state_dict(ln.state_dict())
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0)) * 5 + 2
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain, low = ln(x), lp(x)
    assert plain.dtype == torch.float32 and low.dtype == torch.bfloat16  # autocast keeps norms in float32
    torch.testing.assert_close(low.float(), ln(x), atol=0.05, rtol=0.02)
    torch.testing.assert_close(lp(x), ln(x))  # outside autocast: the plain norm


def test_functional_replaces_every_layernorm_keeping_parameters_under_amp():
    model = _model()
    params = [id(p) for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    assert cf.apply_low_precision_layernorm(model, "amp_bf16", optimizer) is model
    assert [type(m) for m in model if isinstance(m, nn.LayerNorm)] == [LPLayerNorm, LPLayerNorm]
    assert [id(p) for p in model.parameters()] == params
    assert model[3].bias is None and model[3].weight is not None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.randn(4, 6)).float().sum().backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("precision", [None, "fp32"])
def test_outside_amp_precisions_nothing_changes(precision):
    model = _model()
    with pytest.warns(NoEffectWarning, match="only applies under precision"):
        cf.apply_low_precision_layernorm(model, precision)
    assert type(model[1]) is nn.LayerNorm


def test_layernorm_subclasses_are_left_alone():
    class Channels(nn.LayerNorm):
        pass

    model = nn.Sequential(Channels(4))
    with pytest.warns(NoEffectWarning, match="no torch.nn.LayerNorm"):
        cf.apply_low_precision_layernorm(model, "amp_bf16")
    assert type(model[0]) is Channels


def test_trains_under_bf16_in_the_trainer():
    data = torch.utils.data.TensorDataset(torch.randn(12, 6), torch.randint(0, 3, (12,)))
    trainer = Trainer(_model(), torch.utils.data.DataLoader(data, batch_size=4), "3ba",
                      loss_fn=nn.functional.cross_entropy, algorithms=[LowPrecisionLayerNorm()], precision="amp_bf16",
                      progress_bar=False, seed=0)
    trainer.fit()
    assert type(trainer.state.model[1]) is LPLayerNorm
    assert all(p.isfinite().all() and p.dtype == torch.float32 for p in trainer.state.model.parameters())


def test_apply_at_after_load_and_bad_apply_at():
    algorithm = LowPrecisionLayerNorm(apply_at=Event.AFTER_LOAD)
    assert algorithm.events == frozenset({Event.AFTER_LOAD}) and LowPrecisionLayerNorm.required_on_load()
    state = State(_model(), precision="amp_bf16", algorithms=[algorithm])
    engine = Engine(state)
    engine.run_event(Event.INIT)
    assert type(state.model[1]) is nn.LayerNorm
    engine.run_event(Event.AFTER_LOAD)
    assert type(state.model[1]) is LPLayerNorm
    with pytest.raises(ValueError, match="Event.INIT, Event.BEFORE_LOAD or Event.AFTER_LOAD"):
        LowPrecisionLayerNorm(apply_at=Event.FIT_START)

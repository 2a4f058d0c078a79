"""Model surgery: BlurPool, ChannelsLast, GatedLinearUnits, FusedLayerNorm."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import composer_lab.functional as cf
from composer_lab.algorithms import BlurPool, ChannelsLast, FusedLayerNorm, GatedLinearUnits
from composer_lab.algorithms import fused_layernorm
from composer_lab.algorithms.blurpool import BlurConv2d, BlurMaxPool2d, blur_2d
from composer_lab.algorithms.warnings import NoEffectWarning
from composer_lab.core import Engine, Event, State

from algo_helpers import make_state


def conv_net() -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 16, 3, stride=2, padding=1),
                         nn.Conv2d(16, 16, 3, padding=1), nn.MaxPool2d(2), nn.Conv2d(3, 3, 3, stride=2),
                         nn.Conv2d(16, 32, 3, stride=2, padding=1))


def test_blurpool_replaces_exactly_the_strided_convs_and_pools_keeping_weights():
    model = conv_net()
    model[4] = nn.Identity()  # keep shapes valid; a strided conv below min_channels is tested apart
    params = [id(p) for p in model.parameters()]
    x = torch.randn(2, 3, 16, 16)
    shape = model(x).shape
    replaced = cf.apply_blurpool(model)
    assert replaced == ["1", "3", "5"]
    assert isinstance(model[1], BlurConv2d) and isinstance(model[3], BlurMaxPool2d)
    assert isinstance(model[5], BlurConv2d) and type(model[0]) is nn.Conv2d and type(model[2]) is nn.Conv2d
    assert [id(p) for p in model.parameters()] == params
    assert model(x).shape == shape


def test_blurpool_leaves_narrow_convs_and_honours_switches():
    narrow = nn.Sequential(nn.Conv2d(3, 3, 3, stride=2))
    with pytest.warns(NoEffectWarning, match="BlurPool changed nothing in Sequential"):
        assert cf.apply_blurpool(narrow) == []
    model = conv_net()
    assert cf.apply_blurpool(model, replace_maxpools=False) == ["1", "5"]
    with pytest.raises(ValueError, match="does nothing"):
        BlurPool(replace_convs=False, replace_maxpools=False)


@pytest.mark.parametrize("blur_first", [True, False])
def test_blur_conv_blurs_a_constant_image_to_the_same_conv_output(blur_first):
    conv = nn.Conv2d(16, 4, 3, stride=2, padding=1)
    x = torch.ones(1, 16, 9, 9)
    expected = conv(x)[..., 1:-1, 1:-1]
    blurred = BlurConv2d(conv, blur_first)(x)
    assert blurred.shape == conv(x).shape if blur_first else True
    assert torch.allclose(blurred[..., 1:-1, 1:-1], expected, atol=1e-5)  # interior: blur of a constant


def shared_conv_net(blur_first_alias: str) -> nn.Module:
    conv = nn.Conv2d(16, 16, 3, stride=2, padding=1)
    if blur_first_alias == "sequential":
        return nn.Sequential(conv, nn.ReLU(), conv)  # the same conv twice

    class Aliased(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.down = conv
            self.again = conv  # an attribute alias of the same module

        def forward(self, x):
            return self.again(torch.relu(self.down(x)))

    return Aliased()


@pytest.mark.parametrize("alias", ["sequential", "attribute"])
@pytest.mark.parametrize("blur_first", [True, False])
def test_a_module_reachable_under_two_names_is_wrapped_once(alias, blur_first):
    model = shared_conv_net(alias)
    conv = next(m for m in model.modules() if isinstance(m, nn.Conv2d))
    weight, bias = conv.weight.detach().clone(), conv.bias.detach().clone()
    x = torch.randn(2, 16, 16, 16)
    replaced = cf.apply_blurpool(model, blur_first=blur_first)
    assert len(replaced) == 1
    wrappers = [m for m in model.modules() if isinstance(m, BlurConv2d)]
    assert len(wrappers) == 1 and wrappers[0].conv is conv
    assert conv.stride == ((2, 2) if blur_first else (1, 1))

    def blurred_conv(t):  # the direct computation of one blurred strided convolution
        if blur_first:
            return nn.functional.conv2d(blur_2d(t, 1), weight, bias, stride=2, padding=1)
        return blur_2d(nn.functional.conv2d(t, weight, bias, stride=1, padding=1), 2)

    assert torch.allclose(model(x), blurred_conv(torch.relu(blurred_conv(x))), atol=1e-5)


def test_blurpool_algorithm_logs_composers_layer_counts_once_each():
    model = shared_conv_net("sequential")
    model.append(nn.MaxPool2d(2))
    state, engine = make_state(model, (torch.randn(2, 16, 16, 16), torch.zeros(2)), [BlurPool()])
    metrics = engine.logger.metrics.set_index("name").value
    assert metrics["BlurPool/num_replaced"] == 2
    assert metrics["blurpool/num_blurconv_layers"] == 1 and metrics["blurpool/num_blurpool_layers"] == 1


def test_blurpool_algorithm_warns_when_it_changes_nothing():
    with pytest.warns(NoEffectWarning, match="no strided Conv2d with at least 16 input channels"):
        make_state(nn.Sequential(nn.Conv2d(3, 3, 3)), (torch.randn(2, 3, 8, 8), torch.zeros(2)), [BlurPool()])


def test_blurpool_algorithm_changes_the_model_at_init_and_is_traced():
    model = conv_net()
    model[4] = nn.Identity()
    blur = BlurPool()
    state, engine = make_state(model, (torch.randn(2, 3, 16, 16), torch.zeros(2)), [blur])
    assert blur.replaced == ["1", "3", "5"]
    row = engine.trace.invocations.query("event == 'init' and matched")
    assert row.changed.item() == ("model",)


def test_channels_last_keeps_parameters_and_converts_4d_weights():
    model = conv_net()
    params = [id(p) for p in model.parameters()]
    state, engine = make_state(model, (torch.randn(2, 3, 16, 16), torch.zeros(2)), [ChannelsLast()])
    assert [id(p) for p in model.parameters()] == params
    assert model[1].weight.is_contiguous(memory_format=torch.channels_last)
    with pytest.raises(TypeError, match="nn.Module"):
        cf.apply_channels_last(lambda x: x)


def transformer() -> nn.Module:
    return nn.Sequential(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True),
                         nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True))


def test_gated_linear_units_gate_each_ffn_and_register_new_parameters():
    model = transformer()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    old = {id(p) for p in model.parameters()}
    glu = GatedLinearUnits()
    state, engine = make_state(model, (torch.randn(2, 5, 8), torch.zeros(2)), [glu])
    state.optimizers = [opt]
    assert glu.replaced == ["0.linear1", "1.linear1"]
    assert old <= {id(p) for p in model.parameters()}
    layer = model[0]
    x = torch.randn(2, 5, 8)
    h = layer.linear1(x)
    assert torch.allclose(h, torch.relu(layer.linear1.linear(x)) * layer.linear1.gate(x))
    model.eval()
    with torch.no_grad():
        assert model(x).shape == (2, 5, 8)  # also off the fused inference path


def test_gated_linear_units_new_parameters_join_the_optimizer():
    model = transformer()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cf.apply_gated_linear_units(model, [opt])
    in_opt = {id(p) for g in opt.param_groups for p in g["params"]}
    assert {id(p) for p in model.parameters()} == in_opt
    model(torch.randn(2, 5, 8)).sum().backward()
    opt.step()
    with pytest.raises(TypeError, match="callable"):
        GatedLinearUnits(act_fn="gelu")


def test_fused_layernorm_without_a_fused_kernel_warns_and_changes_nothing(monkeypatch):
    monkeypatch.setattr(fused_layernorm, "fused_layernorm_class", lambda: None)
    model = transformer()
    with pytest.warns(NoEffectWarning, match="Apex"):
        assert cf.apply_fused_layernorm(model) == []


def test_gated_linear_units_and_channels_last_that_find_nothing_say_so():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.warns(NoEffectWarning, match="GatedLinearUnits changed nothing in Sequential: no feed-forward block"):
        assert cf.apply_gated_linear_units(model) == []
    with pytest.warns(NoEffectWarning, match="ChannelsLast changed nothing in Sequential: it has no 4-D weight"):
        cf.apply_channels_last(model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_fused_layernorm_swaps_every_layernorm_keeping_parameters(monkeypatch):
    class Fused(nn.LayerNorm):
        pass

    monkeypatch.setattr(fused_layernorm, "fused_layernorm_class", lambda: Fused)
    model = transformer()
    weights = [id(m.weight) for m in model.modules() if isinstance(m, nn.LayerNorm)]
    replaced = cf.apply_fused_layernorm(model)
    assert len(replaced) == 4 and all(type(m) is Fused for m in model.modules() if isinstance(m, nn.LayerNorm))
    assert [id(m.weight) for m in model.modules() if isinstance(m, nn.LayerNorm)] == weights


def test_fused_layernorm_is_ordered_after_gated_linear_units():
    fused, glu = FusedLayerNorm(), GatedLinearUnits()
    engine = Engine(State(transformer(), "1ep", algorithms=[fused, glu]))
    assert engine.plan(Event.INIT) == [glu, fused]

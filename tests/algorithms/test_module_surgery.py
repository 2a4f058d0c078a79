"""Composer's module_surgery contract: replaced parameters reach the optimizers' param groups,
removed ones leave them, nothing is trained twice or orphaned, and a failed surgery changes
nothing; every surgery algorithm keeps a user's optimizer (built before INIT) right."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from composer_lab.algorithms import (Alibi, BlurPool, ChannelsLast, Factorize, FusedLayerNorm, GatedLinearUnits,
                                     NoOpModel, SqueezeExcite, StochasticDepth)
from composer_lab.algorithms.module_surgery import (_find_param_in_optimizer, count_module_instances,
                                                    replace_module_classes, update_params_in_optimizer)
from composer_lab.models import TinyGPT, language_model_loss
from composer_lab.trainer import Trainer

from algo_helpers import Tied
from surgery_models import loader, one_thread, optimizer_params, tiny_resnet, wide_cnn  # noqa: F401 (autouse)


class CopyLinear(nn.Module):
    """A Linear's replacement with a new weight Parameter (a copy) and the same bias Parameter."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight = nn.Parameter(linear.weight.detach().clone())
        self.bias = linear.bias

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


def two_linears() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_replaced_params_reach_the_optimizer_and_removed_ones_leave_it():
    model = two_linears()
    old = [model[0], model[2]]
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()  # (so the old weights have optimizer state)
    replaced = replace_module_classes(model, {nn.Linear: lambda m, i: CopyLinear(m)}, optimizers=opt)
    assert list(replaced) == old and [type(m) for m in replaced.values()] == [CopyLinear, CopyLinear]
    held = optimizer_params([opt])
    assert sorted(held) == sorted(id(p) for p in model.parameters()) and len(held) == len(set(held))
    assert all(_find_param_in_optimizer(m.weight, opt) == -1 and m.weight not in opt.state for m in old)
    assert all(_find_param_in_optimizer(m.bias, opt) == 0 for m in old)  # kept: the same object


def test_a_tied_weight_still_used_stays_in_the_optimizer():
    model = Tied(3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    shared = model.project.weight
    replace_module_classes(model, {nn.Linear: lambda m, i: CopyLinear(m) if m is model.unembed else None},
                           optimizers=opt)
    assert model.project.weight is shared and _find_param_in_optimizer(shared, opt) == 0
    assert sorted(optimizer_params([opt])) == sorted(id(p) for p in model.parameters())


def test_new_params_join_the_group_of_the_module_they_replace():
    model = two_linears()
    opt = torch.optim.SGD([{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.5}], lr=0.1)
    replace_module_classes(model, {nn.Linear: lambda m, i: CopyLinear(m) if i == 1 else None}, optimizers=opt)
    assert _find_param_in_optimizer(model[2].weight, opt) == 1 and _find_param_in_optimizer(model[0].weight, opt) == 0


def test_a_failed_surgery_changes_nothing():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4))
    modules, opt = list(model), torch.optim.SGD(model.parameters(), lr=0.1)
    groups = [list(g["params"]) for g in opt.param_groups]

    def fails_on_the_third(module, index):
        if index == 2:
            raise RuntimeError("out of memory halfway")
        return CopyLinear(module)

    with pytest.raises(RuntimeError, match="halfway"):
        replace_module_classes(model, {nn.Linear: fails_on_the_third}, optimizers=opt)
    assert list(model) == modules and [list(g["params"]) for g in opt.param_groups] == groups


def test_an_ambiguous_param_group_is_refused_before_any_change():
    model = two_linears()
    opt = torch.optim.SGD([{"params": [model[0].weight]}, {"params": [model[0].bias, *model[2].parameters()]}], lr=0.1)
    first = model[0]
    with pytest.raises(ValueError, match="cannot tell which optimizer param group gets 1 new parameters"):
        replace_module_classes(model, {nn.Linear: lambda m, i: CopyLinear(m) if i == 0 else None}, optimizers=opt)
    assert model[0] is first


def test_an_aliased_module_is_replaced_once_and_counted_once():
    linear = nn.Linear(4, 4)
    model = nn.Sequential(linear, nn.ReLU(), linear)
    assert count_module_instances(model, nn.Linear) == 1
    replaced = replace_module_classes(model, {nn.Linear: lambda m, i: CopyLinear(m)})
    assert len(replaced) == 1 and model[0] is model[2]


def test_recursion_visits_the_replacements():
    class Wrapper(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

    model = nn.Sequential(nn.Linear(2, 2))
    policy = {nn.Linear: lambda m, i: Wrapper(nn.Linear(2, 2)) if i == 0 else None}
    replaced = replace_module_classes(model, dict(policy), recurse_on_replacements=True)
    assert len(replaced) == 1 and isinstance(model[0].inner, nn.Linear)  # the inner Linear was offered (index 1)


def test_update_params_in_optimizer_keeps_the_new_order():
    a, b = two_linears(), two_linears()
    opt = torch.optim.Adam(a.parameters(), lr=0.1)
    update_params_in_optimizer(a.parameters(), b.parameters(), opt)
    assert [id(p) for p in opt.param_groups[0]["params"]] == [id(p) for p in b.parameters()]


SURGERIES = {
    "BlurPool": (lambda: BlurPool(min_channels=1), wide_cnn),
    "ChannelsLast": (ChannelsLast, wide_cnn),
    "GatedLinearUnits": (GatedLinearUnits, None),
    "FusedLayerNorm": (FusedLayerNorm, None),
    "Alibi": (None, None),
    "StochasticDepth": (lambda: StochasticDepth("ResNetBasicBlock", drop_rate=0.5), tiny_resnet),
    "SqueezeExcite": (lambda: SqueezeExcite(latent_channels=4, min_channels=16), wide_cnn),
    "Factorize": (lambda: Factorize(min_channels=16, latent_channels=4, min_features=32, latent_features=4), wide_cnn),
    "NoOpModel": (NoOpModel, wide_cnn),
}


def _case(name: str):
    """(model, data, loss_fn, algorithm) for the surgery ``name``."""
    if name == "Alibi":
        tokens = torch.randint(0, 16, (12, 9), generator=torch.Generator().manual_seed(0))
        data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=4)
        model = TinyGPT(vocab_size=16, max_sequence_length=8, d_model=8, n_layers=1, n_heads=2)
        return model, data, language_model_loss, Alibi(max_sequence_length=16)
    if name in ("GatedLinearUnits", "FusedLayerNorm"):
        pairs = torch.utils.data.TensorDataset(torch.randn(12, 3, 8), torch.randint(0, 4, (12,)))
        data = torch.utils.data.DataLoader(pairs, batch_size=4)
        model = nn.Sequential(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), nn.Flatten(),
                              nn.Linear(24, 4))
        return model, data, F.cross_entropy, SURGERIES[name][0]()
    make, build = SURGERIES[name]
    return build(), loader(), F.cross_entropy, make()


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", sorted(SURGERIES))
def test_a_users_optimizer_holds_exactly_the_trained_models_parameters(name):
    """A user-given optimizer exists at INIT: after the surgery it holds each parameter of the
    model once, and nothing else, and the new parameters train."""
    torch.manual_seed(0)
    model, data, loss_fn, algorithm = _case(name)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = Trainer(model, data, "3ba", loss_fn=loss_fn, algorithms=[algorithm], optimizers=opt, progress_bar=False)
    start = {id(p): p.detach().clone() for p in trainer.state.model.parameters()}
    trainer.fit()
    held = optimizer_params([opt])
    assert len(held) == len(set(held)), "a parameter is trained twice"
    assert set(held) == {id(p) for p in trainer.state.model.parameters()}, "an optimizer parameter is orphaned"
    if name != "NoOpModel":  # (its one weight scales constant logits: cross-entropy gives it no gradient)
        trained = [p for p in trainer.state.model.parameters() if p.requires_grad]
        assert any(not torch.equal(start[id(p)], p) for p in trained)

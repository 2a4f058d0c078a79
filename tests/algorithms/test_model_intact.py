"""MixUp and CutMix read the number of classes without touching the model: on models with
aliased submodules, tied weights or a parametrization, under fp32, amp_bf16 and microbatches,
the model's state_dict (values, devices, dtypes) and its Parameter objects are the same before
and after the read, also when the read fails; and such models train under both (issue 28)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

from composer_lab.algorithms import CutMix, MixUp
from composer_lab.core import Event

from algo_helpers import Aliased, Tied, make_state

Trainer = pytest.importorskip("composer_lab.trainer").Trainer

CLASSES = 5


class Symmetric(nn.Module):
    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight.triu() + weight.triu(1).transpose(0, 1)


def parametrized() -> nn.Module:
    model = Aliased(CLASSES)
    model.fc = nn.Sequential(nn.Linear(32, 32), nn.Linear(32, CLASSES))
    parametrize.register_parametrization(model.fc[0], "weight", Symmetric())
    return model


MODELS = {"aliased": lambda: Aliased(CLASSES), "tied": lambda: Tied(CLASSES), "parametrized": parametrized}
MIXERS = {"MixUp": lambda: MixUp(alpha=0.2), "CutMix": lambda: CutMix(alpha=1.0)}


def snapshot(model: nn.Module) -> tuple[dict, list]:
    """The state_dict as (value copy, device, dtype) per key, and the Parameter objects by name."""
    values = {k: (v.detach().clone(), v.device, v.dtype) for k, v in model.state_dict().items()}
    return values, [(name, p) for name, p in model.named_parameters(remove_duplicate=False)]


def assert_same(model: nn.Module, before: tuple[dict, list]) -> None:
    values, params = before
    now = model.state_dict()
    assert now.keys() == values.keys()
    for key, (value, device, dtype) in values.items():
        assert now[key].device == device and now[key].dtype == dtype, key
        assert torch.equal(now[key], value), key
    assert [(n, id(p)) for n, p in model.named_parameters(remove_duplicate=False)] == [(n, id(p)) for n, p in params]


def images(n: int = 8, side: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 3, side, side, generator=g), torch.randint(0, CLASSES, (n,), generator=g)


@pytest.mark.parametrize("precision", ["fp32", "amp_bf16"])
@pytest.mark.parametrize("mixer", sorted(MIXERS))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_reading_the_class_count_leaves_the_model_as_it_was(name, mixer, precision):
    model = MODELS[name]()
    before = snapshot(model)
    state, engine = make_state(model, images(), [MIXERS[mixer]()])
    state.precision = precision
    rng = torch.get_rng_state()
    engine.run_event(Event.AFTER_DATALOADER)
    assert state.batch[1].shape == (8, CLASSES)  # per-class values of the model's 5 classes
    assert_same(model, before)
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(m.training for m in model.modules())


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_failing_read_leaves_the_model_as_it_was(name):
    model = MODELS[name]()
    model.features[3].eval() if name != "tied" else model.project.eval()  # a module the user keeps in eval mode
    flags = [m.training for m in model.modules()]

    def fail(module, args, output):
        raise RuntimeError("boom in the forward")

    last = model.fc if name != "tied" else model.head
    handle = last.register_forward_hook(fail)
    before = snapshot(model)
    state, engine = make_state(model, images(), [MixUp(alpha=0.2)])
    with pytest.raises(ValueError, match=r"MixUp could not read the number of classes .*boom in the forward.*"
                                         r"pass MixUp\(num_classes=...\)"):
        engine.run_event(Event.AFTER_DATALOADER)
    handle.remove()
    assert_same(model, before)
    assert [m.training for m in model.modules()] == flags


@pytest.mark.parametrize("precision,microbatch", [("fp32", None), ("fp32", 2), ("amp_bf16", None), ("amp_bf16", 2)])
@pytest.mark.parametrize("mixer", sorted(MIXERS))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_with_shared_or_parametrized_weights_train_under_mixing(name, mixer, precision, microbatch):
    """The issue's reproduction: Trainer(model_with_alias, loader, '2ba', loss_fn=F.cross_entropy,
    algorithms=[MixUp(alpha=0.2)]).fit(), also with CutMix, bf16 autocast and microbatches."""
    torch.manual_seed(0)
    model = MODELS[name]()
    params = [(n, id(p)) for n, p in model.named_parameters(remove_duplicate=False)]
    start = {k: v.clone() for k, v in model.state_dict().items()}
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*images(16)), batch_size=8)
    trainer = Trainer(model, loader, "2ba", loss_fn=F.cross_entropy, algorithms=[MIXERS[mixer]()],
                      precision=precision, device_train_microbatch_size=microbatch, progress_bar=False)
    trainer.fit()
    assert [(n, id(p)) for n, p in model.named_parameters(remove_duplicate=False)] == params
    for key, value in model.state_dict().items():
        assert value.device.type == "cpu" and value.dtype == start[key].dtype and value.isfinite().all(), key
    assert any(not torch.equal(start[k], v) for k, v in model.state_dict().items())  # it trained
    if name == "tied":
        assert model.unembed.weight is model.project.weight
    if name == "aliased":
        assert model.stem is model.features[0]
    assert model(images(2)[0]).shape == (2, CLASSES)

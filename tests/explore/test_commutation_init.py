"""The commutation check at INIT: surgery pairs judged on the state INIT's algorithms find, in the
engine's order, and neither the live run nor the user's model changed by it."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from composer_lab.algorithms import BlurPool, GhostBatchNorm, SqueezeExcite
from composer_lab.algorithms.ghost_batchnorm import GhostBatchNorm2d
from composer_lab.algorithms.module_surgery import replace_modules
from composer_lab.algorithms.squeeze_excite import SqueezeExciteConv2d
from composer_lab.core import Algorithm, Event
from composer_lab.explore import commutation
from composer_lab.explore.commutation import FIELDS
from composer_lab.trainer import Trainer
from tests.explore.factories import images, make_trainer


def _strided_net() -> nn.Module:
    """A strided convolution wide enough for SqueezeExcite: BlurPool replaces it, SqueezeExcite wraps it."""
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 8, 3, stride=2, padding=1),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))


def strided(algorithms: list, seed: int) -> Trainer:
    """A trainer on :func:`_strided_net`, its model drawn from torch's generator as the factory
    finds it (not seeded first)."""
    loader = DataLoader(images(16), batch_size=8, shuffle=True)
    return Trainer(_strided_net(), loader, "2ba", loss_fn=F.cross_entropy, algorithms=algorithms, seed=seed,
                   progress_bar=False)


def reversing(algorithms: list, seed: int) -> Trainer:
    """:func:`strided` whose engine reverses every event's order."""
    trainer = strided(algorithms, seed)
    trainer.engine.passes = [lambda matched, event: matched[::-1]]
    return trainer


def sharing(model: nn.Module, algorithms: list, seed: int) -> Trainer:
    """A trainer on ``model``, one the factory shares between the trainers it builds (trained at lr 0)."""
    return Trainer(model, DataLoader(images(16), batch_size=8), "2ba", loss_fn=F.cross_entropy,
                   optimizers=torch.optim.SGD(model.parameters(), lr=0.0), algorithms=algorithms, seed=seed,
                   progress_bar=False)


class Activation(Algorithm):
    """A user's surgery at INIT: every ReLU still there becomes ``kind`` (no tensor changes)."""

    events = frozenset({Event.INIT})

    def __init__(self, kind: type) -> None:
        self.kind = kind

    def apply(self, event, state, logger) -> None:
        replace_modules(state.model, lambda m: self.kind() if type(m) is nn.ReLU else None)


class HalveUnlessGelu(Algorithm):
    """Halves the first layer's weights, then refuses a model with a GELU (after Activation(GELU))."""

    events = frozenset({Event.INIT})

    def apply(self, event, state, logger) -> None:
        with torch.no_grad():
            state.model[0].weight.mul_(0.5)
        if any(isinstance(m, nn.GELU) for m in state.model.modules()):
            raise RuntimeError("no GELU here")


def _init_rows(table):
    return table[table["event"] == "init"]


def _verdicts(table):
    return _init_rows(table).groupby(["first", "second"])["commutes"].all().to_dict()


def test_a_surgery_that_wraps_what_another_replaces_does_not_commute_at_init():
    se, blur = SqueezeExcite(latent_channels=2, min_channels=4), BlurPool(min_channels=1)
    table = commutation(strided, [se, blur], batches=1)
    rows = _init_rows(table).set_index("field")
    assert list(rows.index) == list(FIELDS) and (rows["points"] == 1).all()
    assert not rows.loc["model", "commutes"]  # SE around the blurred conv, or a blur around SE's block
    assert rows.drop(index="model")["commutes"].all()  # no batch yet at INIT: nothing else to differ
    # The pair is named in the order the engine runs INIT, under the factory's trainer's passes.
    assert set(_verdicts(commutation(reversing, [se, blur], batches=1))) == {("BlurPool", "SqueezeExcite")}


def test_surgeries_on_other_modules_commute_at_init():
    se, ghost = SqueezeExcite(latent_channels=2, min_channels=4), GhostBatchNorm(ghost_batch_size=2)
    table = commutation(make_trainer, [se, ghost], batches=1)
    assert _verdicts(table) == {("SqueezeExcite", "GhostBatchNorm"): True}
    model = make_trainer([se, ghost], 0).state.model  # both change the model: the verdict is not vacuous
    assert any(isinstance(m, SqueezeExciteConv2d) for m in model.modules())
    assert any(isinstance(m, GhostBatchNorm2d) for m in model.modules())


def test_models_whose_modules_differ_do_not_commute_even_with_equal_tensors():
    table = commutation(strided, [Activation(nn.GELU), Activation(nn.Tanh)], batches=1)
    rows = _init_rows(table).set_index("field")
    assert rows.loc["model", "max_abs_diff"] == float("inf") and not rows.loc["model", "commutes"]
    assert _verdicts(commutation(strided, [Activation(nn.GELU), Activation(nn.GELU)], batches=1)) == {
        ("Activation", "Activation#2"): True}
    slopes = [Activation(functools.partial(nn.LeakyReLU, 0.1)), Activation(functools.partial(nn.LeakyReLU, 0.2))]
    assert _verdicts(commutation(strided, slopes, batches=1)) == {("Activation", "Activation#2"): False}  # a setting


def test_the_init_check_leaves_the_live_run_as_it_would_have_been():
    """The factory draws its model from torch's generator as it finds it: the trainer that trains
    after the INIT check must find it as it would without the check, and train alike after it."""
    built = []

    def recording(algorithms, seed):
        built.append(strided(algorithms, seed))
        return built[-1]

    torch.manual_seed(7)
    table = commutation(recording, [SqueezeExcite(latent_channels=2, min_channels=4), BlurPool(min_channels=1)],
                        batches=2)
    assert set(_verdicts(table)) == {("SqueezeExcite", "BlurPool")}  # (SqueezeExcite draws its new layers)
    assert [len(t.state.algorithms) for t in built] == [0, 2]  # INIT's state: a trainer with none, built first
    torch.manual_seed(7)
    alone = strided([SqueezeExcite(latent_channels=2, min_channels=4), BlurPool(min_channels=1)], 0)
    alone.fit()
    checked = built[-1].state.model.state_dict()
    assert all(torch.equal(checked[k], v) for k, v in alone.state.model.state_dict().items())


def test_an_order_that_fails_only_on_the_copy_does_not_commute_and_leaves_the_users_model_alone():
    shared = _strided_net()
    before = {k: v.clone() for k, v in shared.state_dict().items()}
    factory = functools.partial(sharing, shared)
    with pytest.warns(UserWarning, match=r"Activation then HalveUnlessGelu at init .*no GELU here.*not commuting"):
        table = commutation(factory, [HalveUnlessGelu(), Activation(nn.GELU)], batches=1)
    assert _init_rows(table)["max_abs_diff"].tolist() == [float("inf")] * len(FIELDS)
    # Only the factory's trainer changed the shared model, at INIT in its order: halved once, GELUs in.
    assert torch.equal(shared[0].weight, before["0.weight"] * 0.5)
    assert isinstance(shared[1], nn.GELU)


def test_a_factory_that_needs_algorithms_is_told_why_it_gets_none():
    def first_only(algorithms, seed):
        return strided([algorithms[0], *algorithms[1:]], seed)  # (assumes one algorithm at least)

    with pytest.raises(IndexError) as raised:
        commutation(first_only, [Activation(nn.GELU), Activation(nn.Tanh)], batches=1)
    assert "builds make_trainer([], seed)" in "".join(raised.value.__notes__)

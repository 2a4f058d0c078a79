"""GyroDropout: ``sigma`` masks drawn once, ``tau`` of them picked every ``iter_num`` steps and
each applied to ``1 / tau`` of the batch, the identity in eval mode, masks from the generator it
is given (the run's), state saved and restored through the algorithm."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import composer_lab.functional as cf
from composer_lab.algorithms import GyroDropout
from composer_lab.algorithms.gyro_dropout import GyroDropoutLayer
from composer_lab.algorithms.warnings import NoEffectWarning

from tests.trainer.helpers import make_trainer, tiny_loader, tiny_model


def _layer(seed: int = 0, **kwargs) -> GyroDropoutLayer:
    settings = dict(iters_per_epoch=3, max_epoch=4, p=0.5, sigma=4, tau=2)
    return GyroDropoutLayer(**{**settings, **kwargs}, generator=torch.Generator().manual_seed(seed))


def test_masks_follow_the_schedule_and_each_covers_its_share_of_the_batch():
    layer = _layer()  # 12 steps / 4 masks * 2 at once: a new pick every 6 steps
    x = torch.randn(4, 16)
    picks = []
    for _ in range(12):
        y = layer(x)
        mask = layer.dropout_mask
        torch.testing.assert_close(y, x * mask * 2)
        assert torch.equal(mask[0], mask[1]) and torch.equal(mask[2], mask[3])  # 1/tau of the batch each
        assert all(any(torch.equal(row, m) for m in layer.preselect_masks) for row in mask)
        picks.append(mask.clone())
    assert layer.iter_num == 6 and layer.preselect_masks.shape == (4, 16)
    assert all(torch.equal(picks[0], p) for p in picks[1:6]) and all(torch.equal(picks[6], p) for p in picks[7:])
    assert 0.2 < 1 - layer.preselect_masks.mean() < 0.8  # about p of the features dropped


def test_identity_at_eval_and_uneven_or_small_batches_and_sequences():
    layer = _layer()
    x = torch.randn(3, 5, 16)  # a batch of 3 for tau=2, sequences of 5: mask per (row, feature)
    out = layer(x)
    assert layer.dropout_mask.shape == (3, 1, 16)
    torch.testing.assert_close(out, x * layer.dropout_mask * 2)
    assert layer.eval()(x) is x
    assert _layer(tau=4).train()(torch.randn(2, 16)).shape == (2, 16)  # fewer rows than tau


def test_masks_come_from_the_generator_given_not_the_global_one():
    torch.manual_seed(1)
    state = torch.get_rng_state()
    a, b, c = _layer(seed=5), _layer(seed=5), _layer(seed=6)
    x = torch.randn(4, 16)
    torch.set_rng_state(state)
    a(x), b(x), c(x)
    assert torch.equal(a.dropout_mask, b.dropout_mask) and not torch.equal(a.preselect_masks, c.preselect_masks)
    assert torch.equal(torch.get_rng_state(), state)


def test_a_dropout_reused_at_another_width_is_refused_with_the_fix():
    layer = _layer()
    layer(torch.randn(4, 16))
    with pytest.raises(ValueError, match="give each its own nn.Dropout"):
        layer(torch.randn(4, 8))


def test_functional_replaces_each_dropout_with_the_algorithms_p():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1), nn.Linear(4, 2))
    model.alias = model[1]
    assert cf.apply_gyro_dropout(model, 3, 2, p=0.3, sigma=4, tau=2) == ["1"]
    assert isinstance(model[1], GyroDropoutLayer) and model.alias is model[1] and model[1].p == 0.3
    with pytest.warns(NoEffectWarning, match="no torch.nn.Dropout"):
        cf.apply_gyro_dropout(nn.Linear(2, 2), 3, 2, p=0.3, sigma=4, tau=2)


def test_algorithm_replaces_at_fit_start_with_the_runs_length_and_generator():
    trainer = make_trainer(model=tiny_model(dropout=0.2), train_dataloader=tiny_loader(), max_duration="2ep",
                           algorithms=[GyroDropout(p=0.5, sigma=2, tau=2)], seed=0)
    assert isinstance(trainer.state.model[2], nn.Dropout)  # not yet at INIT
    trainer.fit()
    layer = trainer.state.model[2]
    assert isinstance(layer, GyroDropoutLayer) and layer.generator is trainer.state.generator("cpu")
    assert (layer.iters_per_epoch, layer.max_epoch, layer.iter_num, layer.training_step) == (3, 2, 6, 6)
    saved = trainer.state.algorithms[0].state_dict()
    fresh = GyroDropout(p=0.5, sigma=2, tau=2)
    fresh.load_state_dict(saved)  # before FIT_START: kept for the surgery
    other = make_trainer(model=tiny_model(dropout=0.2), algorithms=[fresh], max_duration="2ep", seed=0)
    other.state.timestamp = trainer.state.timestamp
    other.fit()  # (nothing left to train: FIT_START's surgery restores the layer)
    restored = other.state.model[2]
    assert torch.equal(restored.preselect_masks, layer.preselect_masks) and restored.training_step == 6
    trainer.fit("1ba")  # a later fit of the same run keeps its layers and their schedule
    assert trainer.state.model[2] is layer and layer.training_step == 7


@pytest.mark.parametrize("kwargs, match", [(dict(p=1.0), "p must lie in"), (dict(sigma=0), "sigma must be"),
                                           (dict(tau=1.5), "tau must be an integer")])
def test_bad_hyperparameters_are_refused(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        GyroDropout(**kwargs)


def test_a_duration_in_samples_is_refused_before_training():
    trainer = make_trainer(model=tiny_model(dropout=0.2), max_duration="48sp", algorithms=[GyroDropout()])
    with pytest.raises(ValueError, match="GyroDropout schedules its masks"):
        trainer.fit()
    assert trainer.state.timestamp.batch == 0

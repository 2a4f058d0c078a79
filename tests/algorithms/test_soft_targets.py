"""LabelSmoothing, MixUp and CutMix: soft targets swapped in for the loss and restored after."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import composer_lab.functional as cf
from composer_lab.algorithms import CutMix, LabelSmoothing, MixUp, SelectiveBackprop
from composer_lab.algorithms.soft_targets import one_hot
from composer_lab.core import Event

from algo_helpers import TinyCNN, make_state


def run_loss_events(state, engine, seen: list) -> None:
    """Fire BEFORE_LOSS / AFTER_LOSS around a loss computed on the targets of the moment."""
    state.outputs = state.model(state.batch[0])
    engine.run_event(Event.BEFORE_LOSS)
    seen.append(state.batch[1])
    state.loss = nn.functional.cross_entropy(state.outputs, state.batch[1])
    engine.run_event(Event.AFTER_LOSS)


def test_label_smoothing_targets_follow_the_formula_and_are_restored(images):
    state, engine = make_state(TinyCNN(), images, [LabelSmoothing(0.2)])
    seen = []
    run_loss_events(state, engine, seen)
    expected = nn.functional.one_hot(images[1], 4).float() * 0.8 + 0.2 / 4
    assert torch.allclose(seen[0], expected)
    assert state.batch[1] is images[1]


def test_functional_smooth_labels_matches_and_accepts_soft_targets():
    logits, y = torch.randn(5, 3), torch.tensor([0, 1, 2, 1, 0])
    smoothed = cf.smooth_labels(logits, y, 0.3)
    assert torch.allclose(smoothed, nn.functional.one_hot(y, 3) * 0.7 + 0.1)
    assert torch.allclose(cf.smooth_labels(logits, smoothed, 0.0), smoothed)


@pytest.mark.parametrize("bad", [1.0, -0.1])
def test_label_smoothing_rejects_bad_smoothing(bad):
    with pytest.raises(ValueError, match="smoothing"):
        LabelSmoothing(bad)


def test_soft_targets_of_the_wrong_width_are_rejected():
    with pytest.raises(ValueError, match="classes"):
        one_hot(torch.rand(4, 3), 5)


def test_mixup_inputs_are_the_stated_convex_combination(images):
    x, y = images
    perm = torch.randperm(16)
    mixed, y_perm, mixing = cf.mixup_batch(x, y, mixing=0.3, indices=perm)
    assert torch.allclose(mixed, 0.3 * x + 0.7 * x[perm], atol=1e-6)
    assert torch.equal(y_perm, y[perm]) and mixing == 0.3


def test_mixup_draws_mixing_from_beta_and_rejects_bad_input(images):
    draws = [cf.mixup_batch(*images, alpha=0.2, generator=torch.Generator().manual_seed(s))[2] for s in range(200)]
    near_edges = sum(d < 0.1 or d > 0.9 for d in draws)
    assert near_edges > 100  # Beta(0.2, 0.2) piles up near 0 and 1
    with pytest.raises(ValueError, match="alpha"):
        MixUp(alpha=0)
    with pytest.raises(TypeError, match="floating-point"):
        cf.mixup_batch(torch.ones(4, 2, dtype=torch.long), torch.zeros(4))


def test_mixup_algorithm_mixes_inputs_and_targets_consistently(images):
    x, y = images
    mixup = MixUp(alpha=1.0)
    state, engine = make_state(TinyCNN(), images, [mixup])
    engine.run_event(Event.AFTER_DATALOADER)
    m, perm_y = mixup._mixing, mixup._permuted
    seen = []
    run_loss_events(state, engine, seen)
    expected = m * nn.functional.one_hot(y, 4) + (1 - m) * nn.functional.one_hot(perm_y, 4)
    assert torch.allclose(seen[0], expected.float())
    assert torch.equal(state.batch[1], y)  # restored at AFTER_LOSS
    assert not torch.equal(state.batch[0], x)


def test_mixed_targets_follow_microbatches(images):
    y = images[1]
    mixup = MixUp(alpha=1.0)
    state, engine = make_state(TinyCNN(), images, [mixup])
    engine.run_event(Event.AFTER_DATALOADER)
    full = (state.batch[0], y)
    seen = []
    for rows in (slice(0, 6), slice(6, 16)):
        state.batch = (full[0][rows], y[rows])
        run_loss_events(state, engine, seen)
    expected = torch.lerp(one_hot(mixup._permuted, 4), one_hot(y, 4), mixup._mixing)
    assert torch.allclose(torch.cat(seen), expected)


def test_soft_target_cross_entropy_is_the_interpolated_loss(images):
    x, y = images
    out = TinyCNN()(x)
    perm = torch.randperm(16)
    soft = torch.lerp(one_hot(y[perm], 4), one_hot(y, 4), 0.3)
    ce = nn.functional.cross_entropy
    assert torch.allclose(ce(out, soft), 0.3 * ce(out, y) + 0.7 * ce(out, y[perm]))


def test_cutmix_pastes_the_box_from_the_permuted_images(images):
    x, y = images
    perm = torch.randperm(16)
    mixed, y_perm, share, box = cf.cutmix_batch(x, y, bbox=(2, 6, 1, 5), indices=perm)
    assert box == (2, 6, 1, 5) and share == pytest.approx(1 - 16 / 64)
    assert torch.equal(mixed[:, :, 2:6, 1:5], x[perm][:, :, 2:6, 1:5])
    outside = torch.ones(8, 8, dtype=torch.bool)
    outside[2:6, 1:5] = False
    assert torch.equal(mixed[:, :, outside], x[:, :, outside])
    assert torch.equal(y_perm, y[perm])


def test_cutmix_share_matches_the_box_area(images):
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        _, _, share, (top, bottom, left, right) = cf.cutmix_batch(*images, generator=gen)
        assert share == pytest.approx(1 - (bottom - top) * (right - left) / 64)
    with pytest.raises(ValueError, match="N, C, H, W"):
        cf.cutmix_batch(torch.randn(4, 8), torch.zeros(4))


def test_cutmix_algorithm_targets_weigh_by_area(images):
    cutmix = CutMix()
    state, engine = make_state(TinyCNN(), images, [cutmix])
    engine.run_event(Event.AFTER_DATALOADER)
    seen = []
    run_loss_events(state, engine, seen)
    assert torch.allclose(seen[0].sum(1), torch.ones(16))
    assert torch.allclose(seen[0], torch.lerp(one_hot(cutmix._permuted, 4), one_hot(images[1], 4), cutmix._mixing))


def test_mixup_and_cutmix_together_warn(images):
    state, engine = make_state(TinyCNN(), images, [MixUp(), CutMix()])
    with pytest.warns(UserWarning, match="interpolate the loss"):
        engine.run_event(Event.AFTER_DATALOADER)


def test_selective_backprop_runs_before_mixup(images):
    sb, mixup = SelectiveBackprop(start=0.0, interrupt=0), MixUp()
    state, engine = make_state(TinyCNN(), images, [mixup, sb])
    assert engine.plan(Event.AFTER_DATALOADER) == [sb, mixup]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        engine.run_event(Event.AFTER_DATALOADER)
    assert mixup._permuted.shape[0] == 8  # MixUp saw the pruned batch


def test_label_smoothing_and_mixup_restore_in_reverse(images):
    y = images[1]
    state, engine = make_state(TinyCNN(), images, [LabelSmoothing(0.1), MixUp()])
    engine.run_event(Event.AFTER_DATALOADER)
    seen = []
    run_loss_events(state, engine, seen)
    assert seen[0].shape == (16, 4) and torch.equal(state.batch[1], y)

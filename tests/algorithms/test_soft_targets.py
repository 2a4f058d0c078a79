"""Target forms (class indices vs per-class values) and LabelSmoothing on each of them."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import composer_lab.functional as cf
from composer_lab.algorithms import LabelSmoothing
from composer_lab.algorithms.soft_targets import class_values, outputs_shape_for
from composer_lab.core import Event

from algo_helpers import TinyCNN, make_state

F = nn.functional


def run_loss_events(state, engine, seen: list) -> None:
    """Fire BEFORE_LOSS / AFTER_LOSS around a loss computed on the targets of the moment."""
    state.outputs = state.model(state.batch[0])
    engine.run_event(Event.BEFORE_LOSS)
    seen.append(state.batch[1])
    state.loss = F.cross_entropy(state.outputs, state.batch[1])
    engine.run_event(Event.AFTER_LOSS)


def test_label_smoothing_targets_follow_the_formula_and_are_restored(images):
    state, engine = make_state(TinyCNN(), images, [LabelSmoothing(0.2)])
    seen = []
    run_loss_events(state, engine, seen)
    expected = F.one_hot(images[1], 4).float() * 0.8 + 0.2 / 4
    assert torch.allclose(seen[0], expected)
    assert state.batch[1] is images[1]


def test_functional_smooth_labels_matches_and_accepts_soft_targets():
    logits, y = torch.randn(5, 3), torch.tensor([0, 1, 2, 1, 0])
    smoothed = cf.smooth_labels(logits, y, 0.3)
    assert torch.allclose(smoothed, F.one_hot(y, 3) * 0.7 + 0.1)
    assert torch.allclose(cf.smooth_labels(logits, smoothed, 0.0), smoothed)


@pytest.mark.parametrize("dtype", [torch.long, torch.int32, torch.uint8, torch.bool])
def test_integer_one_hot_targets_are_per_class_values_not_indices(dtype):
    logits, y = torch.randn(6, 4), torch.tensor([0, 3, 1, 2, 2, 0])
    one_hot = F.one_hot(y, 4).to(dtype)
    smoothed = cf.smooth_labels(logits, one_hot, 0.2)
    assert smoothed.shape == (6, 4)
    assert torch.allclose(smoothed, cf.smooth_labels(logits, y, 0.2))


def test_segmentation_targets_have_the_class_dimension_at_1():
    logits = torch.randn(2, 3, 5, 7)  # (N, C, H, W)
    y = torch.randint(0, 3, (2, 5, 7))
    smoothed = cf.smooth_labels(logits, y, 0.3)
    expected = F.one_hot(y, 3).permute(0, 3, 1, 2).float() * 0.7 + 0.1
    assert smoothed.shape == (2, 3, 5, 7) and torch.allclose(smoothed, expected)
    assert torch.allclose(smoothed.sum(1), torch.ones(2, 5, 7))
    assert torch.allclose(cf.smooth_labels(logits, expected, 0.0), expected)  # per-class values pass


def test_label_smoothing_on_a_segmentation_model_trains_on_smoothed_maps():
    model = nn.Conv2d(3, 4, 1)
    y = torch.randint(0, 4, (2, 6, 6))
    state, engine = make_state(model, (torch.randn(2, 3, 6, 6), y), [LabelSmoothing(0.2)])
    seen = []
    run_loss_events(state, engine, seen)
    assert torch.allclose(seen[0], F.one_hot(y, 4).permute(0, 3, 1, 2).float() * 0.8 + 0.05)
    assert state.batch[1] is y


@pytest.mark.parametrize("target, message", [
    (torch.rand(4, 3), "cannot tell the form of targets of shape (4, 3) for outputs of shape (4, 10)"),
    (torch.randint(0, 2, (4, 3)), "cannot tell the form"),
    (torch.tensor([0.0, 1.0, 2.0, 3.0]), "class indices, which must be integers"),
])
def test_targets_of_neither_form_are_refused_with_the_shapes(target, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cf.smooth_labels(torch.rand(4, 10), target)


def test_scores_without_a_class_dimension_are_refused():
    with pytest.raises(ValueError, match=r"class scores of shape \(N, C, ...\)"):
        class_values(torch.zeros(4, dtype=torch.long), (4,))


def test_class_values_copy_so_the_dataset_targets_stay_untouched():
    values = torch.rand(3, 4)
    assert class_values(values, (3, 4)) is not values
    smoothed = cf.smooth_labels(torch.rand(3, 4), values, 0.5)
    assert not torch.equal(smoothed, values)


def test_num_classes_decides_the_shape_and_refuses_the_ambiguous():
    assert outputs_shape_for(torch.zeros(5, dtype=torch.long), 10) == (5, 10)
    assert outputs_shape_for(torch.zeros(5, 7, 7, dtype=torch.long), 10) == (5, 10, 7, 7)
    assert outputs_shape_for(torch.zeros(5, 10), 10) == (5, 10)
    with pytest.raises(ValueError, match="may be one-hot rows or 10 class indices per example"):
        outputs_shape_for(torch.zeros(5, 10, dtype=torch.long), 10)
    with pytest.raises(ValueError, match="need 10 classes in dimension 1"):
        outputs_shape_for(torch.zeros(5, 3), 10)


@pytest.mark.parametrize("bad", [1.0, -0.1])
def test_label_smoothing_rejects_bad_smoothing(bad):
    with pytest.raises(ValueError, match="smoothing"):
        LabelSmoothing(bad)

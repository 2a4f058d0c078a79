"""Adaptive gradient clipping (Brock et al., 2021) on convolutions, against a direct computation."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import composer_lab.functional as cf
from composer_lab.algorithms import GradientClipping
from composer_lab.core import Event
from composer_lab.models import CifarResNet

from algo_helpers import TinyCNN, make_state


def with_grads(model: nn.Module, scale: float = 100.0) -> nn.Module:
    torch.manual_seed(0)
    (model(torch.randn(4, 3, 8, 8)).sum() * scale).backward()
    return model


def direct_agc(weight: torch.Tensor, grad: torch.Tensor, threshold: float) -> torch.Tensor:
    """Each unit (row of dim 0; the whole tensor if 1-D) scaled, unit by unit, in a plain loop."""
    units = [(weight, grad)] if weight.dim() <= 1 else list(zip(weight, grad))
    clipped = []
    for w, g in units:
        max_norm = threshold * max(w.flatten().norm().item(), 1e-3)
        g_norm = max(g.flatten().norm().item(), 1e-6)
        clipped.append(g * min(1.0, max_norm / g_norm))
    return clipped[0] if weight.dim() <= 1 else torch.stack(clipped)


@pytest.mark.parametrize("make_model", [TinyCNN, lambda: CifarResNet(in_channels=3, num_classes=4, depth=8)],
                         ids=["cnn", "resnet"])
def test_adaptive_clipping_of_every_parameter_matches_the_direct_computation(make_model):
    model = with_grads(make_model())
    expected = {name: direct_agc(p.detach(), p.grad, 0.01) for name, p in model.named_parameters()}
    assert any(p.dim() == 4 for p in model.parameters())
    cf.apply_gradient_clipping(model, "adaptive", 0.01)
    for name, p in model.named_parameters():
        assert torch.allclose(p.grad, expected[name], rtol=1e-5, atol=1e-8), name
    ratios = [(p.grad.flatten(1).norm(dim=1) / p.detach().flatten(1).norm(dim=1).clamp_min(1e-3)).max()
              for p in model.parameters() if p.dim() == 4]
    assert max(ratios) == pytest.approx(0.01, rel=1e-4)  # some conv unit was at the bound


def test_gradient_clipping_algorithm_clips_a_cnn_adaptively():
    model = with_grads(TinyCNN())
    reference = copy.deepcopy(model)
    for p, q in zip(model.parameters(), reference.parameters()):
        q.grad = p.grad.clone()
    state, engine = make_state(model, None, [GradientClipping("adaptive", 0.05)])
    engine.run_event(Event.AFTER_TRAIN_BATCH)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert torch.allclose(p.grad, direct_agc(q.detach(), q.grad, 0.05), rtol=1e-5, atol=1e-8), name

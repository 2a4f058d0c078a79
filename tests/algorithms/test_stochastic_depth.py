"""StochasticDepth (method card): torchvision ResNet blocks drop their residual branch with the
right probability, per block or per example, deterministically at evaluation (the branch
scaled by its keep probability), with linear or uniform rates and a warm-up, drawing from the
run's generator."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck

import composer_lab.functional as cf
from composer_lab.algorithms import StochasticDepth
from composer_lab.algorithms.stochastic_depth import (StochasticBasicBlock, StochasticBottleneck,
                                                      make_resnet_bottleneck_stochastic)
from composer_lab.algorithms.warnings import NoEffectWarning
from composer_lab.core import Event
from composer_lab.trainer import Trainer

from algo_helpers import at_batch, make_state
from surgery_models import loader, one_thread, tiny_resnet  # noqa: F401 (one_thread: an autouse fixture)

TRIALS = 300


def _within(count: int, n: int, p: float) -> bool:
    """``count`` of ``n`` draws is within 4.5 standard deviations of ``n * p``."""
    return abs(count - n * p) <= 4.5 * math.sqrt(n * p * (1 - p)) + 1e-9


def test_every_target_block_becomes_stochastic_keeping_its_parameters():
    model = tiny_resnet()
    params, keys = [id(p) for p in model.parameters()], list(model.state_dict())
    cf.apply_stochastic_depth(model, "ResNetBasicBlock", drop_rate=0.5)
    assert [type(m) for m in model if isinstance(m, BasicBlock)] == [StochasticBasicBlock, StochasticBasicBlock]
    assert type(model[3]) is Bottleneck  # another target leaves it alone
    assert [id(p) for p in model.parameters()] == params and list(model.state_dict()) == keys
    cf.apply_stochastic_depth(model, "ResNetBottleneck")
    assert type(model[3]) is StochasticBottleneck


@pytest.mark.parametrize("method", ["block", "sample"])
@pytest.mark.parametrize("drop_rate", [0.25, 0.75])
def test_branches_drop_with_the_right_probability(method, drop_rate):
    block = BasicBlock(1, 1)
    gen = torch.Generator().manual_seed(0)
    cf.apply_stochastic_depth(nn.Sequential(block), "ResNetBasicBlock", method, drop_rate, "uniform", gen)
    branch = nn.Sequential(block.conv1, block.bn1, block.relu, block.conv2, block.bn2)
    x = torch.rand(2, 1, 2, 2)
    with torch.no_grad():
        drops = 0
        for _ in range(TRIALS):
            out = block(x)
            for i in range(2):  # an example whose branch was dropped gives relu(x) = x
                drops += bool(torch.equal(out[i], x[i]))
        assert not torch.equal(branch(x), torch.zeros_like(x))
    assert _within(drops, 2 * TRIALS, drop_rate)


def test_block_mode_drops_the_whole_batch_together():
    block = BasicBlock(4, 4)
    cf.apply_stochastic_depth(nn.Sequential(block), "ResNetBasicBlock", "block", 0.5, "uniform",
                              torch.Generator().manual_seed(1))
    x = torch.rand(6, 4, 4, 4)
    with torch.no_grad():
        kinds = {tuple(torch.equal(o, xi) for o, xi in zip(block(x), x)) for _ in range(40)}
    assert kinds == {(True,) * 6, (False,) * 6}


@pytest.mark.parametrize("method", ["block", "sample"])
def test_evaluation_is_deterministic_and_scales_the_branch_by_its_keep_probability(method):
    torch.manual_seed(0)
    block = BasicBlock(4, 4).eval()
    x = torch.rand(3, 4, 4, 4)
    with torch.no_grad():
        branch = block.bn2(block.conv2(block.relu(block.bn1(block.conv1(x)))))
        cf.apply_stochastic_depth(nn.Sequential(block), "ResNetBasicBlock", method, 0.3, "uniform")
        rng = torch.get_rng_state()
        assert torch.allclose(block(x), F.relu(x + 0.7 * branch), atol=1e-6)
        assert torch.equal(block(x), block(x)) and torch.equal(torch.get_rng_state(), rng)


def test_drop_rate_zero_computes_the_original_block():
    torch.manual_seed(0)
    model = tiny_resnet()
    x = torch.rand(2, 3, 8, 8)
    expected = model(x)
    with pytest.warns(NoEffectWarning, match="drop_rate=0 drops nothing"):
        algorithm = StochasticDepth("ResNetBasicBlock", drop_rate=0.0)
    make_state(model, (x, torch.zeros(2, dtype=torch.long)), [algorithm])
    assert torch.equal(model(x), expected)


def test_composers_drop_everything_returns_the_input_itself():
    block = make_resnet_bottleneck_stochastic(Bottleneck(4, 1), module_index=0, module_count=1, drop_rate=1.0,
                                              drop_distribution="linear", stochastic_method="block")
    x = torch.randn(2, 4, 8, 8)
    assert block(x) is x


def test_linear_distribution_rises_to_the_drop_rate_and_warmup_scales_it():
    model = tiny_resnet()
    sd = StochasticDepth("ResNetBasicBlock", drop_rate=0.4, drop_warmup="0.5dur")
    state, engine = make_state(model, (torch.rand(2, 3, 8, 8), torch.zeros(2, dtype=torch.long)), [sd],
                               max_duration="10ba")
    blocks = [m for m in model.modules() if isinstance(m, StochasticBasicBlock)]
    assert [b.drop_rate for b in blocks] == pytest.approx([0.2, 0.4])
    assert engine.logger.hyperparameters == {"stochastic_depth/num_stochastic_layers": 2}
    at_batch(state, 2)
    engine.run_event(Event.BATCH_START)
    assert [b.drop_rate for b in blocks] == pytest.approx([0.2 * 0.4, 0.4 * 0.4])  # 2 of 5 warm-up batches
    at_batch(state, 7)
    engine.run_event(Event.BATCH_START)
    assert [b.drop_rate for b in blocks] == pytest.approx([0.2, 0.4])
    logged = engine.logger.metrics.query("name == 'stochastic_depth/drop_rate'").value.tolist()
    assert logged == pytest.approx([0.16, 0.4])


def _run(seed: int) -> Trainer:
    torch.manual_seed(0)
    trainer = Trainer(tiny_resnet(), loader(), "2ba", loss_fn=F.cross_entropy, seed=seed, progress_bar=False,
                      algorithms=[StochasticDepth("ResNetBasicBlock", stochastic_method="sample", drop_rate=0.5)])
    trainer.fit()
    return trainer


def test_drops_come_from_the_runs_generator():
    a, b, other = _run(1), _run(1), _run(2)
    same = [torch.equal(x, y) for x, y in zip(a.state.model.state_dict().values(), b.state.model.state_dict().values())]
    assert all(same)
    differ = [torch.equal(x, y) for x, y in zip(a.state.model.state_dict().values(),
                                                other.state.model.state_dict().values())]
    assert not all(differ)
    block = next(m for m in a.state.model.modules() if isinstance(m, StochasticBasicBlock))
    assert block.generator is a.state.generator("cpu")


def test_a_model_without_the_target_blocks_is_left_alone_with_a_warning():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    with pytest.warns(NoEffectWarning, match="StochasticDepth changed nothing in Sequential: it has no "
                                             "ResNetBottleneck"):
        cf.apply_stochastic_depth(model)
    assert type(model[0]) is nn.Conv2d


@pytest.mark.parametrize("kwargs, message", [
    (dict(target_layer_name="ResNetBlock"),
     r"target_layer_name must be one of \('ResNetBottleneck', 'ResNetBasicBlock'\)"),
    (dict(stochastic_method="row"), "stochastic_method must be one of"),
    (dict(drop_rate=1.5), r"drop_rate must lie in \[0, 1\]"),
    (dict(drop_distribution="cosine"), "drop_distribution must be one of"),
    (dict(stochastic_method="sample", drop_warmup=0.1), "drop_warmup=0.1 works with stochastic_method='block' only"),
    (dict(drop_warmup="10ba"), "drop_warmup must be a fraction of the run"),
])
def test_bad_hyperparameters_are_refused_with_the_fix(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StochasticDepth(**kwargs)

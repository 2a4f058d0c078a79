"""GhostBatchNorm: each ghost batch normalized with its own statistics, the running statistics
moved by a whole batch as much as plain BatchNorm moves them, eval on the running statistics,
the BatchNorm's Parameter objects kept, Composer's logging."""

from __future__ import annotations

import math
import warnings
from unittest.mock import Mock

import pytest
import torch
from torch import nn

import composer_lab.functional as cf
from composer_lab.algorithms import GhostBatchNorm
from composer_lab.algorithms.ghost_batchnorm import GhostBatchNorm1d, GhostBatchNorm2d, GhostBatchNorm3d
from composer_lab.algorithms.warnings import NoEffectWarning
from composer_lab.core import Event, State

from algo_helpers import Aliased


def _bn_model(dims: int) -> nn.Module:
    bn = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}[dims](4, eps=1e-12)
    return nn.Sequential(bn)


def _input(n: int, dims: int) -> torch.Tensor:
    return torch.randn(n, 4, *[3] * dims, generator=torch.Generator().manual_seed(0)) * 3 + 1


@pytest.mark.parametrize("dims, cls", [(1, GhostBatchNorm1d), (2, GhostBatchNorm2d), (3, GhostBatchNorm3d)])
@pytest.mark.parametrize("ghost_batch_size", [2, 3, 5])
def test_each_ghost_batch_is_normalized_with_its_own_statistics(dims, cls, ghost_batch_size):
    model = _bn_model(dims)
    assert cf.apply_ghost_batchnorm(model, ghost_batch_size=ghost_batch_size) == ["0"]
    assert type(model[0]) is cls
    out = model.train()(_input(12, dims))
    reduce = (0, *range(2, out.dim()))
    chunks = out.chunk(math.ceil(12 / ghost_batch_size))  # (as Composer: 5 gives 3 chunks of 4)
    assert max(len(c) for c in chunks) <= ghost_batch_size
    for chunk in chunks:
        var, mean = torch.var_mean(chunk, dim=reduce, unbiased=False)
        torch.testing.assert_close(mean, torch.zeros(4), atol=1e-5, rtol=0)
        torch.testing.assert_close(var, torch.ones(4), atol=1e-4, rtol=0)
    assert not torch.allclose(out, _bn_model(dims).train()(_input(12, dims)), atol=1e-3)  # (not one over all 12)


def test_running_statistics_move_by_momentum_over_chunks_and_eval_uses_them():
    torch.manual_seed(0)
    plain, ghost = nn.BatchNorm2d(4, momentum=0.3), nn.BatchNorm2d(4, momentum=0.3)
    model = nn.Sequential(ghost)
    cf.apply_ghost_batchnorm(model, ghost_batch_size=4)
    x = _input(12, 2)
    model.train()(x)
    expected = nn.BatchNorm2d(4, momentum=0.1)  # each of 3 chunks moves the average by 0.3 / 3
    for chunk in x.chunk(3):
        expected.train()(chunk)
    torch.testing.assert_close(ghost.running_mean, expected.running_mean)
    torch.testing.assert_close(ghost.running_var, expected.running_var)
    assert ghost.momentum == 0.3  # restored after the forward
    plain.load_state_dict(ghost.state_dict())
    model.eval()
    torch.testing.assert_close(model(x), plain.eval()(x))  # the running statistics, not the batch's
    torch.testing.assert_close(model(x[:1]), model(x)[:1])  # each sample on its own


def test_cumulative_average_momentum_none_counts_every_chunk():
    model = nn.Sequential(nn.BatchNorm1d(4, momentum=None))
    cf.apply_ghost_batchnorm(model, ghost_batch_size=2)
    x = _input(6, 1)
    model.train()(x)
    bn = model[0].batchnorm
    assert int(bn.num_batches_tracked) == 3
    torch.testing.assert_close(bn.running_mean, torch.stack([c.mean(dim=(0, 2)) for c in x.chunk(3)]).mean(0))


def test_a_batch_smaller_than_the_ghost_batch_is_one_batch_with_a_warning_once():
    model = _bn_model(2)
    reference = _bn_model(2)
    cf.apply_ghost_batchnorm(model, ghost_batch_size=8)
    x = _input(4, 2)
    with pytest.warns(NoEffectWarning, match="smaller than ghost_batch_size=8"):
        out = model.train()(x)
    torch.testing.assert_close(out, reference.train()(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model(x)


def test_parameters_kept_aliases_once_and_no_second_wrapping():
    model = Aliased(4)
    params = list(model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    assert cf.apply_ghost_batchnorm(model, 2, optimizers=optimizer) == ["features.1"]
    assert [id(p) for p in model.parameters()] == [id(p) for p in params]
    with pytest.warns(NoEffectWarning):
        assert cf.apply_ghost_batchnorm(model, 2) == []  # the wrapped BatchNorm is not wrapped again
    loss = model(torch.rand(4, 3, 8, 8)).sum()
    loss.backward()
    assert model.features[1].batchnorm.weight.grad is not None


def test_no_batchnorm_warns_no_effect():
    with pytest.warns(NoEffectWarning, match="no torch.nn.BatchNorm1d"):
        assert cf.apply_ghost_batchnorm(nn.Sequential(nn.Linear(2, 2))) == []


def test_algorithm_at_init_logs_composers_hyperparameter_once():
    algorithm = GhostBatchNorm(ghost_batch_size=4)
    assert algorithm.match(Event.INIT, Mock()) and not algorithm.match(Event.FIT_START, Mock())
    state = State(_bn_model(2))
    logger = Mock()
    algorithm.apply(Event.INIT, state, logger)
    logger.log_hyperparameters.assert_called_once_with({"GhostBatchNorm/num_new_modules": 1})
    assert isinstance(state.model[0], GhostBatchNorm2d) and GhostBatchNorm.required_on_load()


@pytest.mark.parametrize("size", [0, 1.5, "2"])
def test_bad_ghost_batch_size_is_refused(size):
    with pytest.raises((ValueError, TypeError), match="ghost_batch_size"):
        GhostBatchNorm(ghost_batch_size=size)

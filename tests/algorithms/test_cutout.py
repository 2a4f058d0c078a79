"""CutOut: square holes of zeros, one per image by default."""

import pytest
import torch

import composer_lab.functional as cf
from composer_lab.algorithms import CutOut
from composer_lab.core import Event

from algo_helpers import TinyCNN, make_state


def test_cutout_zeroes_one_square_per_image():
    x = torch.ones(32, 2, 12, 12)
    out = cf.cutout_batch(x, num_holes=1, length=4, generator=torch.Generator().manual_seed(0))
    zeros = (out[:, 0] == 0)
    assert torch.equal(zeros, out[:, 1] == 0)  # same hole in every channel
    for mask in zeros:
        rows, cols = mask.any(1).nonzero().flatten(), mask.any(0).nonzero().flatten()
        assert 1 <= len(rows) <= 4 and 1 <= len(cols) <= 4  # clipped at borders
        assert mask.sum() == len(rows) * len(cols)  # a rectangle
    assert (zeros.sum((1, 2)) == 16).float().mean() > 0.3  # most holes are whole squares


def test_cutout_length_as_fraction_and_errors():
    out = cf.cutout_batch(torch.ones(64, 1, 8, 8), length=0.5, generator=torch.Generator().manual_seed(1))
    assert (out == 0).sum((1, 2, 3)).max() == 16
    with pytest.raises(ValueError, match="N, C, H, W"):
        cf.cutout_batch(torch.ones(4, 8))
    with pytest.raises(ValueError, match="num_holes"):
        CutOut(num_holes=0)


def test_cutout_algorithm_changes_inputs_only(images):
    x, y = images
    state, engine = make_state(TinyCNN(), images, [CutOut(num_holes=2, length=3)])
    engine.run_event(Event.AFTER_DATALOADER)
    assert (state.batch[0] == 0).any() and state.batch[1] is y and not (x == 0).any()

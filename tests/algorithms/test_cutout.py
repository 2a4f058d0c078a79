"""CutOut: square holes of zeros, one per image by default."""

import numpy as np
import pytest
import torch
from PIL import Image

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


def test_cutout_takes_a_single_image_and_gives_one_back():
    image = torch.ones(3, 10, 10)
    gen_a, gen_b = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    out = cf.cutout_batch(image, length=4, generator=gen_a)
    assert out.shape == (3, 10, 10) and (out == 0).any()
    assert torch.equal(out, cf.cutout_batch(image[None], length=4, generator=gen_b)[0])


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_cutout_takes_a_pil_image_and_gives_one_back(mode):
    pixels = np.full((12, 12, 3) if mode == "RGB" else (12, 12), 200, dtype=np.uint8)
    image = Image.fromarray(pixels, mode=mode)
    out = cf.cutout_batch(image, length=4, generator=torch.Generator().manual_seed(0))
    assert isinstance(out, Image.Image) and out.mode == mode and out.size == image.size
    array = np.asarray(out)
    assert (array == 0).any() and (array == 200).any() and set(np.unique(array)) == {0, 200}
    with pytest.raises(ValueError, match="a PIL image, got str"):
        cf.cutout_batch("image.png")

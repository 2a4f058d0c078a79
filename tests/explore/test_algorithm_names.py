"""The Python API has "did you mean", as the command line does: a misspelt name given where the
API takes algorithms, and a name missing from ``ALGORITHMS``, are answered with the closest names."""

from __future__ import annotations

import pytest

from composer_lab.algorithms import ALGORITHMS, CutOut
from composer_lab.explore import Sweep, orderings
from tests.explore.factories import make_trainer


def test_a_missing_algorithm_name_names_the_closest_ones():
    with pytest.raises(KeyError, match=r"no algorithm is named 'cutuot' \(did you mean 'cutout'\?\); the names are"):
        ALGORITHMS["cutuot"]
    assert ALGORITHMS["cutout"] is CutOut


@pytest.mark.parametrize("build", [lambda algorithms: orderings(algorithms),
                                   lambda algorithms: Sweep(make_trainer, algorithms, seeds=[0])])
def test_a_misspelt_name_among_the_algorithms_names_the_closest(build):
    with pytest.raises(TypeError, match=r"algorithms\[1\] is str 'mixpu'.*\(did you mean 'mixup'\?\)"):
        build([CutOut(), "mixpu"])
    with pytest.raises(TypeError, match=r"for the name 'mixup': ALGORITHMS\['mixup'\]\(\) or MixUp\(\)"):
        build([CutOut(), "mixup"])

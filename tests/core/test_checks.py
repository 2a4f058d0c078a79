"""The whole-number rules every layer checks arguments by (core/checks.py), and Time.is_period."""

import pytest

from composer_lab.core import Time
from composer_lab.core.checks import check_positive_int, is_int, is_positive_int


@pytest.mark.parametrize("value, integer, positive", [
    (1, True, True), (7, True, True), (0, True, False), (-3, True, False), (True, False, False),
    (False, False, False), (2.0, False, False), ("3", False, False), (None, False, False),
])
def test_a_count_is_an_int_at_least_one_and_never_a_bool(value, integer, positive):
    assert is_int(value) is integer
    assert is_positive_int(value) is positive


def test_the_message_names_the_argument_its_rule_and_the_fix():
    assert check_positive_int("n", 3) == 3
    with pytest.raises(ValueError, match=r"^n must be a positive integer, got 0$"):
        check_positive_int("n", 0)
    message = r"^workers is how many processes, a positive int, got True; e\.g\. workers=2$"
    with pytest.raises(ValueError, match=message):
        check_positive_int("workers", True, "is how many processes, a positive int", "e.g. workers=2")


@pytest.mark.parametrize("text, period", [("1ep", True), ("100ba", True), ("0ba", False), ("0ep", False),
                                          ("64sp", False), ("0.5dur", False)])
def test_a_period_is_at_least_one_epoch_or_batch(text, period):
    assert Time.from_timestring(text).is_period() is period

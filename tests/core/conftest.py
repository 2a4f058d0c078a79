"""A small state that core tests share."""

import pytest
import torch

from composer_lab.core import State


@pytest.fixture
def state() -> State:
    s = State(torch.nn.Linear(4, 2), "2ep")
    s.batch = (torch.zeros(3, 4), torch.zeros(3, dtype=torch.long))
    return s

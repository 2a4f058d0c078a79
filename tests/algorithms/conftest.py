"""Fixtures shared by the algorithm tests."""

import pytest
import torch


@pytest.fixture
def images() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return torch.randn(16, 3, 8, 8, generator=gen), torch.randint(0, 4, (16,), generator=gen)

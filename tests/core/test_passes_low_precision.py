"""sort_low_precision_layernorm_last: LowPrecisionLayerNorm runs after algorithms that add
LayerNorms, in Composer's place among the default passes (right after the FusedLayerNorm pass)."""

from __future__ import annotations

from torch import nn

from composer_lab.algorithms import LowPrecisionLayerNorm
from composer_lab.algorithms.low_precision_layernorm import LPLayerNorm
from composer_lab.core import COMPOSER_PASSES, DEFAULT_PASSES, Algorithm, Engine, Event, State
from composer_lab.core.passes import sort_fused_layernorm_last, sort_low_precision_layernorm_last


class AddsLayerNorm(Algorithm):
    """Adds a LayerNorm after the model at INIT, as an algorithm that inserts norms would."""

    events = frozenset({Event.INIT})
    writes = frozenset({"model"})

    def apply(self, event, state, logger) -> None:
        state.model = nn.Sequential(state.model, nn.LayerNorm(4))


def _run_init(passes) -> nn.Module:
    state = State(nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)), precision="amp_bf16",
                  algorithms=[LowPrecisionLayerNorm(), AddsLayerNorm()])
    engine = Engine(state)
    engine.passes = passes
    engine.run_event(Event.INIT)
    return state.model


def test_every_layernorm_an_earlier_listed_algorithm_adds_is_converted():
    norms = [type(m) for m in _run_init(DEFAULT_PASSES).modules() if isinstance(m, nn.LayerNorm)]
    assert norms == [LPLayerNorm, LPLayerNorm]
    without = [p for p in DEFAULT_PASSES if p is not sort_low_precision_layernorm_last]
    norms = [type(m) for m in _run_init(without).modules() if isinstance(m, nn.LayerNorm)]
    assert norms == [LPLayerNorm, nn.LayerNorm]  # (what the pass prevents)


def test_the_pass_sorts_by_the_flag_and_keeps_the_rest_in_order():
    lpln, a, b = LowPrecisionLayerNorm(), AddsLayerNorm(), AddsLayerNorm()
    assert sort_low_precision_layernorm_last([lpln, a, b], Event.INIT) == [a, b, lpln]
    assert sort_low_precision_layernorm_last([a, b], Event.INIT) == [a, b]


def test_its_place_follows_composers_among_the_default_passes():
    """Composer (when it had both): SB-first, fused-last, low-precision-last, then FILO."""
    for passes in (DEFAULT_PASSES, COMPOSER_PASSES):
        index = passes.index(sort_fused_layernorm_last)
        assert passes[index + 1] is sort_low_precision_layernorm_last

"""State: batch access for tuples and dicts, seeded generators, precision."""

import pytest
import torch

from composer_lab.core import State


def test_tuple_batch_items_are_replaced_not_mutated(state):
    old = state.batch
    state.batch_set_item(1, torch.ones(3))
    assert state.batch is not old and isinstance(state.batch, tuple)
    assert torch.equal(state.targets, torch.ones(3)) and state.inputs is old[0]


def test_dict_batches_answer_0_and_1_with_input_and_target(state):
    state.batch = {"input": torch.zeros(2, 4), "target": torch.ones(2), "mask": None}
    assert state.batch_get_item(1) is state.batch["target"]
    state.batch_set_item(0, torch.ones(2, 4))
    assert torch.equal(state.batch["input"], torch.ones(2, 4)) and "mask" in state.batch


def test_dict_batch_without_input_key_is_a_clear_error(state):
    state.batch = {"x": torch.zeros(2)}
    with pytest.raises(KeyError, match="'input' and 'target'"):
        state.inputs


def test_generators_repeat_under_a_seed():
    draws = [State(torch.nn.Linear(1, 1), seed=7).generator().initial_seed() for _ in range(2)]
    a, b = (torch.rand(3, generator=State(torch.nn.Linear(1, 1), seed=7).generator()) for _ in range(2))
    assert draws == [7, 7] and torch.equal(a, b)


def test_generator_state_round_trip():
    s = State(torch.nn.Linear(1, 1), seed=3)
    torch.rand(2, generator=s.generator())
    saved = s.generator_states()
    expected = torch.rand(2, generator=s.generator())
    s2 = State(torch.nn.Linear(1, 1), seed=99)
    s2.load_generator_states(saved)
    assert torch.equal(torch.rand(2, generator=s2.generator()), expected)


def test_precision_context_autocasts_bf16_on_cpu():
    s = State(torch.nn.Linear(4, 4), precision="amp_bf16")
    with s.precision_context():
        out = s.model(torch.ones(1, 4))
    assert out.dtype == torch.bfloat16
    with State(torch.nn.Linear(4, 4)).precision_context():
        assert torch.ones(1).dtype == torch.float32

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


def test_batch_items_by_function_or_getter_setter_pair_as_in_composer():
    state = State(torch.nn.Linear(2, 2))
    state.batch = [{"image": torch.zeros(2, 3)}, torch.tensor([1, 0])]
    get = lambda batch: batch[0]["image"]  # noqa: E731
    assert state.batch_get_item(get) is state.batch[0]["image"]
    assert state.batch_get_item((get, lambda batch, value: batch)) is state.batch[0]["image"]
    before = state.batch
    state.batch_set_item((get, lambda batch, value: [{**batch[0], "image": value}, batch[1]]), torch.ones(2, 3))
    assert torch.equal(state.batch[0]["image"], torch.ones(2, 3)) and before[0]["image"].sum() == 0
    with pytest.raises(TypeError, match=r"through the function '<lambda>' alone: pass a pair \(get_fn, set_fn\)"):
        state.batch_set_item(get, torch.ones(2, 3))


def test_hugging_face_dict_batches_answer_positions_by_their_names():
    state = State(torch.nn.Linear(2, 2))
    state.batch = {"input_ids": torch.zeros(2, 4, dtype=torch.long), "attention_mask": torch.ones(2, 4),
                   "labels": torch.ones(2, 4, dtype=torch.long)}
    assert state.inputs is state.batch["input_ids"] and state.targets is state.batch["labels"]
    state.batch_set_item(1, torch.zeros(2, 4))
    assert sorted(state.batch) == ["attention_mask", "input_ids", "labels"] and state.batch["labels"].sum() == 0
    state.batch = {"pixel_values": torch.zeros(2, 3, 4, 4), "labels": torch.zeros(2)}
    assert state.inputs is state.batch["pixel_values"]


def test_stop_training_ends_the_fit_after_the_batch_under_way():
    from composer_lab.core import Callback, Event
    from composer_lab.trainer import Trainer

    class EarlyStop(Callback):
        def run_event(self, event, state, logger):
            if event is Event.AFTER_LOSS and state.timestamp.batch == 2:
                state.stop_training()

    data = torch.utils.data.TensorDataset(torch.randn(40, 2), torch.randint(0, 2, (40,)))
    for duration in ("3ep", "100ba", "1000sp"):
        trainer = Trainer(torch.nn.Linear(2, 2), torch.utils.data.DataLoader(data, batch_size=4), duration,
                          loss_fn=torch.nn.functional.cross_entropy, callbacks=[EarlyStop()], progress_bar=False)
        trainer.fit()
        assert trainer.state.timestamp.batch == 3, duration  # batch 2 finished, no batch after it
        assert trainer.state.get_elapsed_duration() == 1.0
    trainer.fit("2ba")  # a later fit trains on from there
    assert trainer.state.timestamp.batch == 5

"""Composer's core contracts a Composer user meets (issue 46), each after Composer's own tests
(tests/test_engine.py, tests/test_time.py, tests/test_state.py)."""

import gc
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from composer_lab.core import Algorithm, Callback, Engine, Event, State, Time, Timestamp, TimeUnit
from composer_lab.core.passes import sort_to_front

from .helpers import Recorder

ROOT = Path(__file__).resolve().parents[2]


class IsClosedCallback(Callback):
    """Open from INIT until closed (Composer's test callback)."""

    def __init__(self) -> None:
        self.is_closed = True

    def init(self, state, logger) -> None:
        assert self.is_closed
        self.is_closed = False

    def close(self, state, logger) -> None:
        self.is_closed = True


def test_an_engine_dropped_without_close_closes_its_callbacks(state):
    callback = IsClosedCallback()
    state.callbacks = [callback]
    engine = Engine(state)
    engine.run_event(Event.INIT)
    assert sys.getrefcount(engine) == 2 and not callback.is_closed  # (nothing else holds the engine)
    del engine
    gc.collect()
    assert callback.is_closed


def test_a_closed_engine_is_closed_once_and_its_callbacks_can_serve_a_new_one(state):
    callback = IsClosedCallback()
    state.callbacks = [callback]
    first = Engine(state)
    first.run_event(Event.INIT)
    first.close()
    assert callback.is_closed
    second = Engine(state)
    second.run_event(Event.INIT)  # (the callback was closed: accepted)
    del first
    gc.collect()
    assert not callback.is_closed  # (the first engine, collected, closes nothing again)
    second.close()


def test_a_callback_still_open_in_another_engine_is_refused(state):
    state.callbacks = [IsClosedCallback()]
    first = Engine(state)
    first.run_event(Event.INIT)
    with pytest.raises(RuntimeError, match="open callback or logger from a previous trainer.*close()"):
        Engine(state).run_event(Event.INIT)
    first.run_event(Event.INIT)  # its own engine may fire INIT again over it
    first.close()


def test_a_callback_that_does_not_listen_at_init_is_refused_too(state):
    class BatchEndOnly(Callback):
        def batch_end(self, state, logger):
            pass

    state.callbacks = [BatchEndOnly()]
    first = Engine(state)
    first.run_event(Event.INIT)
    with pytest.raises(RuntimeError, match="open callback or logger from a previous trainer"):
        Engine(state).run_event(Event.INIT)
    first.close()


def test_an_engine_alive_at_exit_closes_its_callbacks():
    code = textwrap.dedent("""
        import torch
        from composer_lab.core import Callback, Engine, Event, State

        class Says(Callback):
            def close(self, state, logger):
                print("closed")

            def post_close(self):
                import json  # (an import at exit still works: the engine closes before shutdown)
                print("post-closed")

        state = State(torch.nn.Linear(2, 2), "1ep", callbacks=[Says()])
        engine = Engine(state)
        engine.run_event(Event.INIT)
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["closed", "post-closed"]


@pytest.mark.parametrize("spec", ["tuple", "list"])
def test_algorithm_passes_take_f_and_index_as_a_tuple_or_a_list(state, spec):
    def front(algorithms, event):
        return sort_to_front(algorithms, Recorder)

    engine = Engine(state, algorithm_passes=(front, 0) if spec == "tuple" else [front, 0])
    assert engine.passes[0] is front and engine.passes[1:] == Engine(state).passes


class Pulls(Algorithm):
    """Composer's closure-call scenario: an event fired while ``state.closure_call`` is 1."""

    events = frozenset({Event.BEFORE_FORWARD})

    def apply(self, event, state, logger) -> None:
        return None


def test_closure_call_is_recorded_on_events_and_calls(state):
    state.algorithms = [Pulls()]
    engine = Engine(state)
    engine.run_event(Event.BEFORE_FORWARD)
    state.closure_call = 1  # (what the trainer sets while the optimizer's closure runs again)
    engine.run_event(Event.BEFORE_FORWARD)
    events, calls = engine.trace.events, engine.trace.invocations
    assert list(events.closure_call) == [0, 1] and list(calls.closure_call) == [0, 1]
    assert events.closure_call.dtype == "int64" == calls.closure_call.dtype


# -- time ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, value, unit", [("3e10sp", 3 * 10**10, "sp"), ("3_0sp", 30, "sp"),
                                               ("3_0e10sp", 30 * 10**10, "sp"), ("4_00_0ba", 4000, "ba")])
def test_time_strings_with_an_exponent_or_underscores(text, value, unit):
    assert Time.from_timestring(text) == Time(value, unit)


def test_time_from_input():
    expected = Time(1, TimeUnit.EPOCH)
    assert Time.from_input(expected) is expected
    assert Time.from_input("1ep") == Time.from_input(1, TimeUnit.EPOCH) == Time.from_input(1, "ep") == expected
    for bad in (None, [123]):
        with pytest.raises(RuntimeError, match="Time.from_input cannot read"):
            Time.from_input(bad)
    with pytest.raises(TypeError, match="default_int_unit"):
        Time.from_input(1)


def test_timestamp_copy_and_comparison_with_a_time():
    timestamp = Timestamp(epoch=1)
    copied = timestamp.copy(batch=2)
    assert (copied.epoch, copied.batch, copied.sample) == (1, 2, 0) and copied is not timestamp
    assert timestamp.copy() == timestamp and Timestamp().copy(epoch=Time(3, "ep")).epoch == 3
    assert Timestamp() < Time(10, "ep") and copied >= Time(2, "ba") and copied == "2ba" and copied != "3ba"
    assert copied > "1ba" and copied <= Time(1, "ep") and not copied < "2ba"


# -- state ---------------------------------------------------------------------------------------
def _trained_state(seed: int) -> State:
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = State(model, "2ep", optimizers=optimizer, schedulers=torch.optim.lr_scheduler.StepLR(optimizer, 3),
                  seed=seed, run_name=f"run{seed}")
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    state.schedulers[0].step()
    state.timestamp = state.timestamp.to_next_batch(3)
    return state


def test_state_dict_round_trip_is_exact(tmp_path):
    saved, loaded = _trained_state(1), _trained_state(2)
    torch.save(saved.state_dict(), tmp_path / "state.pt")
    loaded.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=False))
    assert (loaded.timestamp, loaded.seed, loaded.run_name) == (saved.timestamp, 1, "run1")
    assert all(torch.equal(a, b) for a, b in zip(saved.model.state_dict().values(), loaded.model.state_dict().values()))
    assert loaded.schedulers[0].state_dict() == saved.schedulers[0].state_dict()
    batch = torch.randn(3, 4)
    for state in (saved, loaded):  # (a step more: the optimizers' momentum was restored too)
        state.optimizers[0].zero_grad()
        state.model(batch).sum().backward()
        state.optimizers[0].step()
    assert torch.equal(saved.model.weight, loaded.model.weight)
    assert set(saved.state_dict()) >= {"model", "optimizers", "schedulers", "algorithms", "callbacks", "timestamp",
                                       "rank_zero_seed", "run_name"}

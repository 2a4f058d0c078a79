"""Change detection: what a ``writes`` declaration buys (no model walk) and what stays exact."""

import pytest
import torch
from torch import nn

from composer_lab.core import Algorithm, Callback, Engine, Event, State

STEP = (Event.BATCH_START, Event.BEFORE_FORWARD, Event.AFTER_FORWARD, Event.BEFORE_LOSS, Event.AFTER_LOSS,
        Event.BEFORE_BACKWARD, Event.AFTER_BACKWARD, Event.BATCH_END)


class Counted(nn.Parameter):
    """A parameter that counts how often its version counter is read from Python."""

    reads = 0

    @property
    def _version(self):
        Counted.reads += 1
        return super()._version


def counted_mlp(tensors: int) -> nn.Sequential:
    """``tensors // 2`` Linear layers whose weights and biases count their reads."""
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(tensors // 2)])
    for layer in model:
        layer.weight, layer.bias = Counted(layer.weight.detach()), Counted(layer.bias.detach())
    return model


class Bump(Algorithm):
    """Adds 1 in place to the first parameter at AFTER_LOSS (``writes`` undeclared)."""

    events = frozenset({Event.AFTER_LOSS})

    def apply(self, event, state, logger):
        with torch.no_grad():
            next(state.model.parameters()).add_(1)


class DeclaredBump(Bump):
    writes = frozenset({"model"})


class Touch(Algorithm):
    """Runs at one event and changes nothing."""

    def __init__(self, event):
        self.events = frozenset({event})

    def apply(self, event, state, logger):
        return None


class DeclaredTouch(Touch):
    writes = frozenset()


class Quiet(Callback):
    writes = frozenset()

    def batch_end(self, state, logger):
        return None


def engine_over(model: nn.Module, algorithms: list, callbacks: list = ()) -> Engine:
    state = State(model, "10ba", optimizers=torch.optim.SGD(model.parameters(), lr=0.1))
    state.batch = (torch.zeros(3, 4), torch.zeros(3, dtype=torch.long))
    state.algorithms, state.callbacks = algorithms, list(callbacks)
    return Engine(state, trace="all")


def changed_by(engine: Engine) -> dict:
    calls = engine.trace.invocations
    return calls[calls.matched].set_index("name").changed.to_dict()


@pytest.mark.parametrize("algorithm", [Bump(), DeclaredBump()], ids=["undeclared", "declares model"])
def test_a_parameter_changed_in_place_is_reported_as_model(algorithm):
    engine = engine_over(nn.Linear(4, 2), [DeclaredTouch(Event.AFTER_LOSS), algorithm, Touch(Event.AFTER_LOSS)])
    engine.run_event(Event.AFTER_LOSS)
    assert changed_by(engine) == {"DeclaredTouch": (), type(algorithm).__name__: ("model",), "Touch": ()}


def test_a_module_added_between_events_is_blamed_on_no_call():
    model = nn.Sequential(nn.Linear(4, 2))
    engine = engine_over(model, [Touch(Event.AFTER_LOSS)])
    model.add_module("extra", nn.ReLU())
    engine.run_event(Event.AFTER_LOSS)
    assert changed_by(engine) == {"Touch": ()}


def test_an_optimizer_step_between_events_is_blamed_on_no_call():
    """Inside ``watching()`` the model's signature is reused across events until a hook fires."""
    model = nn.Linear(4, 2)
    engine = engine_over(model, [Touch(Event.AFTER_LOSS), Touch(Event.BATCH_END)])
    with engine.watching():
        engine.run_event(Event.AFTER_LOSS)
        model(torch.ones(1, 4)).sum().backward()
        engine.state.optimizers[0].step()
        engine.run_event(Event.BATCH_END)
    calls = engine.trace.invocations
    assert list(calls[calls.matched].changed) == [(), ()]



class Deletes(Algorithm):
    """Deletes the model's last layer at AFTER_LOSS (``writes`` undeclared)."""

    events = frozenset({Event.AFTER_LOSS})

    def apply(self, event, state, logger):
        del state.model[1]


class DropsBias(Algorithm):
    """Sets the first layer's bias to None at AFTER_LOSS (``writes`` undeclared)."""

    events = frozenset({Event.AFTER_LOSS})

    def apply(self, event, state, logger):
        state.model[0].bias = None


def _module_and_hooks() -> tuple:
    """Module's and Tensor's methods, and PyTorch's global module and parameter registration hooks now."""
    hooks = torch.nn.modules.module
    return (dict(nn.Module.__dict__), dict(torch.Tensor.__dict__), dict(hooks._global_module_registration_hooks),
            dict(hooks._global_parameter_registration_hooks))


def test_watching_patches_no_torch_class_and_removes_its_hooks_after():
    """Change detection uses PyTorch's own hook APIs only: while an engine watches, Module and
    Tensor have their own methods, and leaving watching() removes the global hooks it registered
    (nested and overlapping uses too). A removal inside watching() is then a limit: not seen."""
    before = _module_and_hooks()
    first, second = (engine_over(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)), [DropsBias()]) for _ in range(2))
    watching_first, watching_second = first.watching(), second.watching()
    watching_first.__enter__()
    watching_second.__enter__()
    during = _module_and_hooks()
    assert during[:2] == before[:2]  # (no method of Module's or Tensor's replaced)
    assert len(during[2]) - len(before[2]) == len(during[3]) - len(before[3]) == 2  # (each engine's own)
    watching_first.__exit__(None, None, None)  # (the first leaves while the second still watches)
    second.run_event(Event.AFTER_LOSS)
    watching_second.__exit__(None, None, None)
    assert _module_and_hooks() == before
    first.run_event(Event.AFTER_LOSS)  # (outside watching(): the model is walked around the call)
    assert changed_by(first) == {"DropsBias": ("model",)}
    assert changed_by(second) == {"DropsBias": ()}  # the limit (docs/trace.md): a removal fires no hook


@pytest.mark.parametrize("tensors", [4, 322])
def test_calls_declaring_no_model_read_no_parameter(tensors):
    """The cost of a declared call does not grow with the model: not one parameter is read.
    The same calls undeclared read every parameter, before and after each call."""
    model = counted_mlp(tensors)
    declared = engine_over(model, [DeclaredTouch(e) for e in STEP], [Quiet()])
    undeclared = engine_over(model, [Touch(e) for e in STEP])
    Counted.reads = 0
    for event in STEP:
        declared.run_event(event)
    assert Counted.reads == 0
    for event in STEP:
        undeclared.run_event(event)
    assert Counted.reads == 2 * tensors * len(STEP)


class OwnWrites(Callback):
    """A callback with an attribute of its own named ``writes`` (the name is free on Callback)."""

    def __init__(self):
        self.writes = ["log.txt"]

    def batch_end(self, state, logger):
        with torch.no_grad():
            state.model.weight.mul_(2)


def test_a_callbacks_own_writes_attribute_is_no_declaration():
    engine = engine_over(nn.Linear(4, 2), [], [OwnWrites()])
    engine.run_event(Event.BATCH_END)
    assert changed_by(engine) == {"OwnWrites": ("model",)}


@pytest.mark.parametrize("writes", [frozenset({"models"}), {"batch"}, ("batch",),
                                    {Event.AFTER_LOSS: frozenset({"models"})}, {Event.AFTER_LOSS: {"model"}}])
def test_an_algorithm_declaring_anything_but_tracked_field_names_is_refused(writes):
    with pytest.raises(TypeError, match="frozenset of"):
        type("Typo", (Touch,), {"writes": writes})


def test_a_per_event_declaration_keyed_by_anything_but_an_event_is_refused():
    with pytest.raises(TypeError, match=r"'after_losss' is not an event \(did you mean 'after_loss'\?\)"):
        type("Typo", (Touch,), {"writes": {"after_losss": frozenset()}})


class BumpEverywhere(Bump):
    """Adds 1 to the first parameter wherever it runs; says it writes the model only at AFTER_LOSS
    and nothing at BATCH_END (a lie there, which the trace then believes), and leaves BEFORE_LOSS out."""

    events = frozenset({Event.BEFORE_LOSS, Event.AFTER_LOSS, Event.BATCH_END})
    writes = {"after_loss": frozenset({"model"}), Event.BATCH_END: frozenset()}


def test_a_per_event_declaration_is_read_at_each_event():
    assert BumpEverywhere.writes == {Event.AFTER_LOSS: frozenset({"model"}), Event.BATCH_END: frozenset()}
    model = counted_mlp(4)
    engine = engine_over(model, [BumpEverywhere()])
    reads = {}
    for event in (Event.BEFORE_LOSS, Event.AFTER_LOSS, Event.BATCH_END):
        Counted.reads = 0
        engine.run_event(event)
        reads[event.value] = Counted.reads
    calls = engine.trace.invocations
    assert calls.set_index("event").changed.to_dict() == {  # (BATCH_END: declared nothing, so trusted)
        "before_loss": ("model",), "after_loss": ("model",), "batch_end": ()}
    assert reads["batch_end"] == 0 < reads["after_loss"] and reads["before_loss"] > 0


class BumpThenRaise(Bump):
    def apply(self, event, state, logger):
        super().apply(event, state, logger)
        raise RuntimeError("after the write")


def test_a_call_that_raises_leaves_no_watch_behind_and_its_write_is_reported():
    """Inside ``watching()`` an undeclared call is watched by a torch function mode entered
    around it: a call that raises leaves it all the same, its write recorded."""
    engine = engine_over(nn.Linear(4, 2), [BumpThenRaise()])
    with engine.watching(), pytest.raises(RuntimeError, match="after the write"):
        engine.run_event(Event.AFTER_LOSS)
    assert torch._C._len_torch_function_stack() == 0
    calls = engine.trace.invocations
    assert list(zip(calls.changed, calls.error)) == [(("model",), "RuntimeError: after the write")]


class FireAndBump(Algorithm):
    """At AFTER_LOSS, fires BATCH_END from its ``apply``; Bump writes the model there."""

    events = frozenset({Event.AFTER_LOSS})

    def __init__(self, engine):
        self.engine = engine

    def apply(self, event, state, logger):
        self.engine.run_event(Event.BATCH_END)


def test_a_write_in_an_event_fired_from_a_call_is_that_calls_change_too():
    model = nn.Linear(4, 2)
    engine = engine_over(model, [])
    bump_at_batch_end = type("BumpAtEnd", (Bump,), {"events": frozenset({Event.BATCH_END})})()
    engine.state.algorithms = [FireAndBump(engine), bump_at_batch_end]
    with engine.watching():
        engine.run_event(Event.AFTER_LOSS)
    assert changed_by(engine) == {"FireAndBump": ("model",), "BumpAtEnd": ("model",)}


class SwapClass(Algorithm):
    """Swaps the class of the model's first layer in place at INIT (as StochasticDepth makes a
    torchvision Bottleneck stochastic): same module object, same parameters."""

    events = frozenset({Event.INIT})
    writes = frozenset({"model"})

    def apply(self, event, state, logger):
        layer = state.model[0]
        layer.__class__ = type("SwappedLinear", (nn.Linear,), {})


def test_a_module_class_swapped_in_place_is_reported_as_model():
    engine = engine_over(nn.Sequential(nn.Linear(4, 2)), [DeclaredTouch(Event.INIT), SwapClass()])
    engine.run_event(Event.INIT)
    assert changed_by(engine) == {"DeclaredTouch": (), "SwapClass": ("model",)}


def test_a_module_class_swapped_in_place_inside_a_fit_is_not_seen():
    """The documented limit (docs/trace.md): inside ``watching()`` a class swap fires no hook and
    runs no torch function, so it goes unreported."""
    swap = SwapClass()
    swap.events = frozenset({Event.AFTER_LOSS})
    engine = engine_over(nn.Sequential(nn.Linear(4, 2)), [swap])
    with engine.watching():
        engine.run_event(Event.AFTER_LOSS)
    assert changed_by(engine) == {"SwapClass": ()}

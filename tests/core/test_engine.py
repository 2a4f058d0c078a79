"""The engine: match, passes, apply, callbacks, plan, and pass registration."""

import pytest

from composer_lab.core import Algorithm, Callback, Engine, Event, set_filo_order, sort_to_back
from composer_lab.core.algorithm import describe, hyperparameters
from composer_lab.core.callback import listened_events
from composer_lab.core.engine import AlgorithmTrace

from .helpers import FakeSelectiveBackprop, Recorder

ALL = list(Event)


class LogCallback(Callback):
    def __init__(self, log):
        self.log = log

    def init(self, state, logger):
        self.log.append("cb:init")

    def after_loss(self, state, logger):
        self.log.append("cb:after_loss")


def test_algorithms_apply_in_pass_order_then_callbacks(state):
    log = []
    state.algorithms = [Recorder("A", ALL, log), Recorder("B", ALL, log)]
    state.callbacks = [LogCallback(log)]
    engine = Engine(state)
    engine.run_event(Event.BEFORE_LOSS)
    engine.run_event(Event.AFTER_LOSS)
    assert log == ["A", "B", "B", "A", "cb:after_loss"]


def test_callbacks_run_first_on_init(state):
    log = []
    state.algorithms = [Recorder("A", [Event.INIT], log)]
    state.callbacks = [LogCallback(log)]
    Engine(state).run_event(Event.INIT)
    assert log == ["cb:init", "A"]


def test_callback_methods_and_run_event_dispatch(state):
    log = []
    cb = LogCallback(log)
    cb.after_loss(state, None)
    cb.run_event(Event.AFTER_LOSS, state, None)
    cb.run_event(Event.BATCH_END, state, None)  # not overridden: a no-op
    assert log == ["cb:after_loss", "cb:after_loss"]
    assert listened_events(cb) == {Event.INIT, Event.AFTER_LOSS}


def test_string_events_are_accepted(state):
    log = []
    state.algorithms = [Recorder("A", [Event.AFTER_LOSS], log)]
    engine = Engine(state)
    traces = engine.run_event("after_loss")
    assert log == ["A"] and engine.event is Event.AFTER_LOSS  # (the Event itself, not the string)
    assert list(traces) == ["Recorder/after_loss"] and traces["Recorder/after_loss"] == AlgorithmTrace(None, 0)


@pytest.mark.parametrize("warm", [False, True])  # (the first event works the listeners out; later ones look them up)
@pytest.mark.parametrize("bad, message", [("after_losss", "did you mean 'after_loss'"),
                                          (["after_loss"], "not an event")])
def test_an_unknown_event_is_refused_naming_the_closest(state, warm, bad, message):
    engine = Engine(state)
    if warm:
        engine.run_event(Event.AFTER_LOSS)
    with pytest.raises(ValueError, match=message):
        engine.run_event(bad)


def test_a_pass_registered_between_events_runs_where_nobody_listens(state):
    """Who asks at an event is worked out once; a pass registered later may add an algorithm at an
    event no algorithm listens at, and must run there from the next event on."""
    log = []
    extra = Recorder("X", [Event.BATCH_END], log)
    engine = Engine(state)
    assert engine.run_event(Event.BATCH_END) == {}
    engine.register_pass(lambda algorithms, event: [*algorithms, extra] if event is Event.BATCH_END else algorithms)
    assert list(engine.run_event(Event.BATCH_END)) == ["Recorder/batch_end"] and log == ["X"]


def test_a_closed_engine_refuses_events_also_after_its_passes_change(state):
    engine = Engine(state)
    engine.close()
    engine.passes = engine.passes  # (a pass change makes the next event work its listeners out again)
    with pytest.raises(RuntimeError, match="closed"):
        engine.run_event(Event.BATCH_END)


def test_traces_is_a_read_only_mapping(state):
    state.algorithms = [Recorder("A", [Event.AFTER_LOSS], []), Recorder("B", [Event.AFTER_LOSS], [])]
    traces = Engine(state).run_event(Event.AFTER_LOSS)
    assert sorted(traces) == ["Recorder#2/after_loss", "Recorder/after_loss"]
    assert sorted(t.order for t in traces.values()) == [0, 1]
    assert list(traces) == sorted(traces, key=lambda k: traces[k].order)
    assert "Recorder/after_loss" in traces and "Recorder" not in traces and len(traces) == 2 and traces == dict(traces)
    assert not hasattr(traces, "__setitem__") and Engine(state).run_event(Event.BATCH_END) == {}
    with pytest.raises(TypeError):
        hash(traces)


def last(algorithms, event):
    return sort_to_back(algorithms, lambda a: a.name == "A")


def first(algorithms, event):
    return sorted(algorithms, key=lambda a: a.name != "C")


@pytest.mark.parametrize("spec, expected", [
    (None, 6),
    (last, 7),
    ([last], 7),
    ((last, 0), 7),
    ([(last, 0), first], 8),
])
def test_algorithm_passes_forms(state, spec, expected):
    engine = Engine(state, algorithm_passes=spec)
    assert len(engine.passes) == expected
    if isinstance(spec, tuple):
        assert engine.passes[0] is last
    if isinstance(spec, list) and len(spec) == 2:
        assert engine.passes[0] is last and engine.passes[-1] is first


def test_bad_pass_specs_are_type_errors(state):
    with pytest.raises(TypeError, match="algorithm_passes"):
        Engine(state, algorithm_passes=[("not a pass", 1)])
    with pytest.raises(TypeError, match="is a function"):
        Engine(state).register_pass("nope")


def test_a_pass_returning_none_is_named_in_the_error(state):
    def broken(algorithms, event):
        algorithms.sort(key=str)

    log = []
    state.algorithms = [Recorder("A", ALL, log)]
    engine = Engine(state, algorithm_passes=broken)
    with pytest.raises(TypeError, match="broken returned NoneType"):
        engine.run_event(Event.BATCH_START)


def test_pass_change_between_events_holds_from_the_next_event(state):
    log = []
    state.algorithms = [Recorder("A", ALL, log), Recorder("B", ALL, log), Recorder("C", ALL, log)]
    engine = Engine(state)
    engine.run_event(Event.BATCH_START)
    engine.register_pass(last)
    engine.run_event(Event.BATCH_START)
    engine.register_pass(first, index=0)  # runs before `last`: C first, then A moved last
    engine.run_event(Event.BATCH_START)
    engine.remove_pass("last")
    engine.remove_pass(first)
    engine.run_event(Event.BATCH_START)
    assert log == list("ABC") + list("BCA") + list("CBA") + list("ABC")
    with pytest.raises(ValueError, match="no pass"):
        engine.remove_pass("last")


def test_passes_setter_replaces_the_list(state):
    log = []
    state.algorithms = [Recorder("A", ALL, log), Recorder("B", ALL, log)]
    engine = Engine(state)
    engine.passes = []
    engine.run_event(Event.AFTER_LOSS)  # no FILO any more
    engine.passes = [set_filo_order]
    engine.run_event(Event.AFTER_LOSS)
    assert log == ["A", "B", "B", "A"]


@pytest.mark.parametrize("event", ALL)
def test_plan_equals_what_run_event_does(state, event):
    log = []
    state.algorithms = [Recorder("A", ALL, log), FakeSelectiveBackprop("SB", [Event.AFTER_DATALOADER, Event.INIT], log),
                        Recorder("B", [Event.AFTER_LOSS, Event.BEFORE_LOSS, Event.INIT], log),
                        Recorder("C", ALL, log)]
    engine = Engine(state, algorithm_passes=last)
    planned = [a.name for a in engine.plan(event)]
    assert log == []  # plan applies nothing
    engine.run_event(event)
    assert planned == log


def test_plan_steps_show_each_pass(state):
    log = []
    state.algorithms = [Recorder("A", ALL, log), FakeSelectiveBackprop("SB", ALL, log), Recorder("B", ALL, log)]
    steps = Engine(state).plan_steps(Event.AFTER_DATALOADER)
    names = [(name, [a.name for a in order]) for name, order in steps]
    assert names == [("match", ["A", "SB", "B"]), ("set_filo_order", ["B", "SB", "A"]),
                     ("sort_selective_backprop_first", ["SB", "B", "A"]),
                     ("sort_fused_layernorm_last", ["SB", "B", "A"]),
                     ("sort_low_precision_layernorm_last", ["SB", "B", "A"]),
                     ("warn_if_multiple_loss_interpolation", ["SB", "B", "A"]),
                     ("warn_if_multiple_mixers", ["SB", "B", "A"])]


def test_algorithms_list_swap_takes_effect_at_the_next_event(state):
    log = []
    a, b = Recorder("A", ALL, log), Recorder("B", ALL, log)
    state.algorithms = [a, b]
    engine = Engine(state)
    engine.run_event(Event.BATCH_START)
    state.algorithms = [b]
    engine.run_event(Event.BATCH_START)
    assert log == ["A", "B", "B"]


EDITS = {
    "swap": lambda algos, c: algos.__setitem__(0, c),
    "reverse": lambda algos, c: algos.reverse(),
    "remove": lambda algos, c: algos.remove(algos[0]),
    "pop": lambda algos, c: algos.pop(0),
    "delete": lambda algos, c: algos.__delitem__(0),
    "sort": lambda algos, c: algos.sort(key=lambda a: a.name, reverse=True),
    "append": lambda algos, c: algos.append(c),
    "insert": lambda algos, c: algos.insert(0, c),
    "extend": lambda algos, c: algos.extend([c]),
    "clear": lambda algos, c: algos.clear(),
    "slice": lambda algos, c: algos.__setitem__(slice(0, 2), [c]),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_in_place_edit_of_the_algorithms_takes_effect_at_the_next_event(state, edit):
    """The engine caches who listens at each event; an edit of the same list must not leave
    it running the old list (each case fails if that mutator goes uncounted)."""
    log = []
    a, b, c = Recorder("A", ALL, log), Recorder("B", ALL, log), Recorder("C", ALL, log)
    state.algorithms = [a, b]
    engine = Engine(state, algorithm_passes=lambda algos, event: list(algos))  # keep list order
    engine.run_event(Event.BATCH_START)
    expected = list(state.algorithms)
    EDITS[edit](expected, c)
    EDITS[edit](state.algorithms, c)
    del log[:]
    engine.run_event(Event.BATCH_START)
    assert log == [algo.name for algo in expected]


class EqualByValue(Recorder):
    """An algorithm whose instances compare equal by their fields, as a dataclass's do."""

    def __eq__(self, other):
        return type(other) is type(self) and other.name == self.name

    __hash__ = Recorder.__hash__


def test_an_equal_but_new_instance_swapped_in_is_the_one_that_runs(state):
    """The engine notices edits by identity, not ``==``: an algorithm replaced by an equal
    instance (a dataclass with the same fields) must stop running; its replacement runs."""
    old_log, new_log = [], []
    state.algorithms = [EqualByValue("A", ALL, old_log)]
    engine = Engine(state)
    engine.run_event(Event.BATCH_START)
    state.algorithms[0] = EqualByValue("A", ALL, new_log)
    engine.run_event(Event.BATCH_START)
    assert (old_log, new_log) == (["A"], ["A"])


def test_augmented_assignment_to_the_algorithms_keeps_a_counting_list(state):
    log = []
    state.algorithms = [Recorder("A", ALL, log)]
    engine = Engine(state)
    engine.run_event(Event.BATCH_START)
    state.algorithms += [Recorder("B", ALL, log)]
    state.algorithms[1] = Recorder("C", ALL, log)
    engine.run_event(Event.BATCH_START)
    assert log == ["A", "A", "C"]


class CountingMatch(Recorder):
    """Declares its events; counts how often the engine asks ``match``."""

    def __init__(self, name, events, log, declare):
        super().__init__(name, events, log)
        self.asked = 0
        if not declare:
            self.events_matched = self.events
            self.events = None

    def match(self, event, state):
        self.asked += 1
        return event in (self.events if self.events is not None else self.events_matched)


@pytest.mark.parametrize("declare", [True, False])
def test_declared_events_spare_match_calls_and_leave_no_unasked_rows(state, declare):
    """An algorithm not asked at an event (its ``events`` leave it out) is not recorded as
    matched=False there (issue 32); one asked that said no is."""
    log = []
    algo = CountingMatch("A", [Event.BATCH_START], log, declare)
    state.algorithms = [algo]
    engine = Engine(state)
    assert engine.plan(Event.BATCH_END) == [] and engine.plan(Event.BATCH_START) == [algo]
    algo.asked = 0
    for event in (Event.BATCH_START, Event.BATCH_END, Event.AFTER_LOSS):
        engine.run_event(event)
    assert log == ["A"]
    assert algo.asked == (1 if declare else 3)
    inv = engine.trace.invocations
    said_no = [] if declare else [("batch_end", False), ("after_loss", False)]
    assert list(zip(inv.event, inv.matched)) == [("batch_start", True), *said_no]


# -- one path for plan and run (issue 19.4) -------------------------------------------------------
def test_a_pass_that_inserts_an_algorithm_runs_it_even_when_nothing_matched(state):
    """The plan and the run agree: an algorithm a pass adds runs also at an event where no
    algorithm matched (the engine used to skip the passes there)."""
    log = []
    inserted = Recorder("inserted", [], log)

    def insert(algorithms, event):
        return [*algorithms, inserted] if event is Event.BATCH_END else algorithms

    state.algorithms = [Recorder("A", [Event.BEFORE_LOSS], log)]
    engine = Engine(state, algorithm_passes=insert)
    for event in (Event.BATCH_END, Event.BEFORE_LOSS):
        planned = [a.name for a in engine.plan(event)]
        before = len(log)
        engine.run_event(event)
        assert log[before:] == planned
    assert log == ["inserted", "A"]


@pytest.mark.parametrize("listening", [1, 2])
def test_a_pass_of_the_user_sees_a_lone_matched_algorithm_and_order_only_passes_need_two(state, listening):
    """Only order-only passes may skip an event where fewer than two algorithms matched: a pass of
    the user's runs at every event, and one that drops the lone matched algorithm drops it."""
    log, seen = [], []
    state.algorithms = [Recorder(name, [Event.BEFORE_LOSS] * (i < listening), log) for i, name in enumerate("AB")]

    def drop_all(algorithms, event):
        seen.append((event, [a.name for a in algorithms]))
        return []

    engine = Engine(state)
    engine.run_event(Event.BEFORE_LOSS)
    assert log == ["A", "B"][:listening]
    engine.register_pass(drop_all)
    engine.run_event(Event.BEFORE_LOSS)
    assert log == ["A", "B"][:listening]  # (dropped: nothing ran the second time)
    assert (Event.BEFORE_LOSS, ["A", "B"][:listening]) in seen


# -- what run_event returns (Composer's Traces) ---------------------------------------------------
class Returns(Recorder):
    def __init__(self, name, code, log):
        super().__init__(name, [Event.BEFORE_LOSS, Event.AFTER_LOSS], log)
        self.code = code

    def apply(self, event, state, logger):
        super().apply(event, state, logger)
        return self.code


def test_run_event_returns_each_algorithms_exit_code_and_order(state):
    log = []
    state.algorithms = [Returns("A", 3, log), Returns("B", "done", log)]
    engine = Engine(state)
    traces = engine.run_event(Event.AFTER_LOSS)
    assert list(traces) == ["Returns#2/after_loss", "Returns/after_loss"]  # run order: FILO
    assert traces["Returns#2/after_loss"] == AlgorithmTrace(exit_code="done", order=0, run=True)
    assert traces["Returns/after_loss"].exit_code == 3 and traces["Returns/after_loss"].order == 1
    assert engine.run_event(Event.BATCH_END) == {}
    assert Engine(state, trace="off").run_event(Event.BEFORE_LOSS)["Returns/before_loss"].exit_code == 3


class Sometimes(Returns):
    """Matches only while ``on``."""

    on = True

    def match(self, event, state):
        return self.on and super().match(event, state)


@pytest.mark.parametrize("trace", ["all", "off"])
def test_an_event_of_one_algorithm_runs_as_any_other_traced_or_not(state, trace):
    """The untraced run answers an event where one algorithm listens and nothing else happens in a
    few lines: it returns what a traced one does, applies nothing when the algorithm does not
    match, and leaves that way once a callback or a pass of the user's is there too."""
    log = []
    algorithm = Sometimes("A", 7, log)
    state.algorithms = [algorithm]
    engine = Engine(state, trace=trace)
    assert engine.run_event(Event.BEFORE_LOSS) == {"Sometimes/before_loss": AlgorithmTrace(7, 0)} and log == ["A"]
    algorithm.on = False
    assert engine.run_event(Event.BEFORE_LOSS) == {} and log == ["A"]
    algorithm.on = True
    state.callbacks = [LogCallback(log)]
    engine.run_event(Event.AFTER_LOSS)
    assert log == ["A", "A", "cb:after_loss"]
    engine.register_pass(lambda algorithms, event: [*algorithms, Returns("B", 0, log)])
    assert list(engine.run_event(Event.BEFORE_LOSS)) == ["Sometimes/before_loss", "Returns/before_loss"]
    assert log[3:] == ["A", "B"]


# -- Algorithm.match from the declared events -----------------------------------------------------
class Declares(Algorithm):
    events = frozenset({Event.AFTER_LOSS})

    def apply(self, event, state, logger):
        return None


def test_base_match_answers_from_declared_events(state):
    algorithm = Declares()
    assert {e for e in ALL if algorithm.match(e, state)} == {Event.AFTER_LOSS}
    algorithm.events = None
    assert all(algorithm.match(e, state) for e in ALL)
    assert algorithm.active(Event.AFTER_LOSS, state)


# -- callbacks' names (issue 19.7) and lifecycle ----------------------------------------------------
LIFECYCLE = {"run_event", "state_dict", "load_state_dict", "close", "post_close", "attach", "fit_failed"}


def test_callback_public_names_are_the_events_and_the_lifecycle():
    public = {name for name in dir(Callback) if not name.startswith("_")}
    assert public == {e.value for e in Event} | LIFECYCLE


class Named(Callback):
    """Attributes a subclass names naturally, none of them engine machinery."""

    def __init__(self, log):
        self.events, self.listens, self.log = ["mine"], "x", log

    def after_loss(self, state, logger):
        self.log.append(list(self.events))


def test_a_callback_attribute_named_events_does_not_reach_the_engine(state):
    log = []
    state.callbacks = [Named(log)]
    engine = Engine(state)
    engine.run_event(Event.AFTER_LOSS)
    engine.run_event(Event.BEFORE_LOSS)
    assert log == [["mine"]]


class Closing(Callback):
    def __init__(self, name, log, fail=False):
        self.name, self.log, self.fail = name, log, fail

    def close(self, state, logger):
        self.log.append(f"close {self.name}")
        assert state is not None and logger is not None
        if self.fail:
            raise OSError(f"{self.name} cannot close")

    def post_close(self):
        self.log.append(f"post_close {self.name}")


def test_close_closes_every_callback_then_post_closes_and_refuses_events(state):
    log = []
    state.callbacks = [Closing("a", log), Closing("b", log)]
    engine = Engine(state)
    engine.run_event(Event.FIT_START)
    engine.close()
    engine.close()  # once only
    assert log == ["close a", "close b", "post_close a", "post_close b"]
    assert engine.closed
    with pytest.raises(RuntimeError, match="closed"):
        engine.run_event(Event.FIT_START)


def test_close_closes_the_others_when_one_raises(state):
    log = []
    state.callbacks = [Closing("a", log, fail=True), Closing("b", log)]
    with pytest.raises(OSError, match="a cannot close"):
        Engine(state).close()
    assert log == ["close a", "close b", "post_close b"]


# -- hyperparameters as data --------------------------------------------------------------------
def scaled_attention(query, key, value):
    return value


class TakesFunctions(Algorithm):
    events = frozenset({Event.AFTER_LOSS})

    def __init__(self, attention=scaled_attention, module=Algorithm, rate=0.5, event=Event.AFTER_LOSS):
        self.attention, self.module, self.rate, self.event = attention, module, rate, event

    def apply(self, event, state, logger):
        return None


def test_a_function_or_class_argument_is_kept_by_qualified_name_never_its_address():
    algorithm = TakesFunctions()
    assert describe(algorithm) == {"class": "TakesFunctions", "hparams": {
        "rate": 0.5, "event": "after_loss", "attention": f"{__name__}.scaled_attention",
        "module": "composer_lab.core.algorithm.Algorithm"}}
    assert hyperparameters(algorithm) == {"rate": 0.5, "event": Event.AFTER_LOSS}  # what the panels edit
    assert " at 0x" not in repr(algorithm) and f"attention={__name__}.scaled_attention" in repr(algorithm)


IN_PLACE_EDITS = {
    "append": lambda lst, new: lst.append(new), "extend": lambda lst, new: lst.extend([new]),
    "insert": lambda lst, new: lst.insert(0, new), "+=": lambda lst, new: lst.__iadd__([new]),
    "item set": lambda lst, new: lst.__setitem__(0, new), "slice set": lambda lst, new: lst.__setitem__(
        slice(None), [new]), "*=": lambda lst, new: (lst.clear(), lst.append(new), lst.__imul__(2)),
    "pop, append": lambda lst, new: (lst.pop(), lst.append(new)),
    "remove, append": lambda lst, new: (lst.remove(lst[0]), lst.append(new)),
    "del, append": lambda lst, new: (lst.__delitem__(0), lst.append(new)),
    "clear, append": lambda lst, new: (lst.clear(), lst.append(new)),
    "reverse": lambda lst, new: (lst.append(new), lst.reverse()),
    "sort": lambda lst, new: (lst.append(new), lst.sort(key=lambda a: a.name != "new")),
}


@pytest.mark.parametrize("kind", ["algorithms", "callbacks"])
@pytest.mark.parametrize("edit", IN_PLACE_EDITS)
def test_an_in_place_edit_of_the_lists_holds_from_the_next_event(state, edit, kind):
    """The engine works each event's listeners out again only when the list changed: every way
    of editing ``state.algorithms`` or ``state.callbacks`` in place counts."""
    log = []
    make = (lambda name: Recorder(name, [Event.BATCH_END], log)) if kind == "algorithms" else (
        lambda name: type("Logged", (Callback,), {"name": name, "batch_end": lambda self, s, logger: log.append(
            self.name)})())
    setattr(state, kind, [make("old")])
    engine = Engine(state)
    engine.run_event(Event.BATCH_END)
    IN_PLACE_EDITS[edit](getattr(state, kind), make("new"))
    engine.run_event(Event.BATCH_END)
    ran_second = log[1:]
    assert "new" in ran_second and ran_second.count("new") == sum(o.name == "new" for o in getattr(state, kind))


@pytest.mark.parametrize("method, args", [
    ("append", (4,)), ("extend", ([4],)), ("insert", (0, 4)), ("remove", (1,)), ("pop", ()), ("clear", ()),
    ("sort", ()), ("reverse", ()), ("__setitem__", (0, 4)), ("__delitem__", (0,)), ("__iadd__", ([4],)),
    ("__imul__", (2,))])
def test_every_in_place_edit_of_a_state_list_is_counted(method, args):
    from composer_lab.core.state import EditCountingList

    items = EditCountingList([3, 1, 2])
    before = EditCountingList.generation
    getattr(items, method)(*args)
    assert EditCountingList.generation == before + 1 and isinstance(items, list)
    EditCountingList([])
    assert EditCountingList.generation == before + 2  # (a new list, as State's setters make, moves it too)

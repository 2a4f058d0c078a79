"""The trace: rows, dtypes, instance identity, levels, errors, changed fields, save / load."""

import pandas as pd
import pytest
import torch

from composer_lab.core import Algorithm, Callback, Engine, Event, Trace
from composer_lab.core.trace import EVENT_COLUMNS, INVOCATION_COLUMNS, EventRecord, InvocationRecord, read_parquet

from .helpers import Recorder

ALL = list(Event)


class Smooth(Algorithm):
    """Replaces the targets with a new tensor at BEFORE_LOSS (as LabelSmoothing does)."""

    def match(self, event, state):
        return event == Event.BEFORE_LOSS

    def apply(self, event, state, logger):
        state.batch_set_item(1, state.targets.float() * 0.9)
        return 7


class ScaleLossInPlace(Algorithm):
    def match(self, event, state):
        return event == Event.AFTER_LOSS

    def apply(self, event, state, logger):
        state.loss.mul_(2)


class Freeze(Algorithm):
    def match(self, event, state):
        return event == Event.BATCH_END

    def apply(self, event, state, logger):
        state.model.weight.requires_grad_(False)


class Explode(Algorithm):
    def match(self, event, state):
        return event == Event.AFTER_FORWARD

    def apply(self, event, state, logger):
        state.outputs = None
        raise RuntimeError("boom")


def run(state, events, level="all"):
    engine = Engine(state, trace=level)
    for e in events:
        engine.run_event(e)
    return engine.trace


def test_event_rows_and_dtypes(state):
    state.microbatch = 1
    trace = run(state, [Event.BEFORE_FORWARD, Event.AFTER_FORWARD, Event.EVAL_START])
    ev = trace.events
    assert tuple(ev.columns) == EVENT_COLUMNS
    assert list(ev.seq) == [0, 1, 2]
    assert list(ev.event) == ["before_forward", "after_forward", "eval_start"]
    assert list(ev.phase) == ["fit", "fit", "eval"]
    assert list(ev.microbatch) == [1, 1, 1]
    assert isinstance(ev.event.dtype, pd.CategoricalDtype) and len(ev.event.cat.categories) == 37
    assert str(ev.microbatch.dtype) == "Int64" and ev.duration.dtype == "float64"
    assert (ev.duration >= 0).all() and ev.t_start.is_monotonic_increasing


def test_two_instances_of_one_class_are_two_rows(state):
    state.algorithms = [Smooth(), Smooth()]
    inv = run(state, [Event.BEFORE_LOSS]).invocations
    assert tuple(inv.columns) == INVOCATION_COLUMNS
    assert list(inv.name) == ["Smooth", "Smooth#2"] and list(inv.cls) == ["Smooth", "Smooth"]
    assert list(inv.order) == [0, 1] and list(inv.exit_code) == [7, 7]
    assert isinstance(inv.name.dtype, pd.CategoricalDtype) and str(inv.order.dtype) == "Int64"


def test_instances_are_named_in_list_order_even_when_run_reversed(state):
    a, b = Recorder("a", ALL, []), Recorder("b", ALL, [])
    state.algorithms = [a, b]
    inv = run(state, [Event.AFTER_LOSS]).invocations
    assert list(inv.name) == ["Recorder#2", "Recorder"]  # FILO: b ran first


def test_changed_names_replaced_and_in_place_fields(state):
    state.loss = torch.tensor(1.0)
    state.algorithms = [Smooth(), ScaleLossInPlace(), Freeze(), Recorder("noop", [Event.BATCH_END], [])]
    inv = run(state, [Event.BEFORE_LOSS, Event.AFTER_LOSS, Event.BATCH_END]).invocations
    ran = inv[inv.matched].set_index("name").changed.to_dict()
    assert ran == {"Smooth": ("batch",), "ScaleLossInPlace": ("loss",), "Freeze": ("model",), "Recorder": ()}


class FireBeforeBackward(Algorithm):
    """At AFTER_LOSS, fires BEFORE_BACKWARD from its ``apply`` (an event fired from a call, as Composer allows)."""

    def __init__(self, engine):
        self.engine = engine

    def match(self, event, state):
        return event == Event.AFTER_LOSS

    def apply(self, event, state, logger):
        self.engine.run_event(Event.BEFORE_BACKWARD)


class ReplaceLoss(Algorithm):
    def match(self, event, state):
        return event == Event.BEFORE_BACKWARD

    def apply(self, event, state, logger):
        state.loss = state.loss * 2


def test_a_call_that_fires_an_event_changed_what_that_event_changed(state):
    state.loss = torch.tensor(1.0)
    engine = Engine(state)
    state.algorithms = [Recorder("noop", [Event.AFTER_LOSS], []), FireBeforeBackward(engine), ReplaceLoss(),
                        ScaleLossInPlace(), Freeze()]
    engine.run_event(Event.AFTER_LOSS)  # (an 'after' event: run in reverse list order)
    engine.run_event(Event.BATCH_END)
    ran = engine.trace.query(matched=True)
    assert list(zip(ran.seq, ran.name, ran.changed)) == [
        (0, "ScaleLossInPlace", ("loss",)), (0, "FireBeforeBackward", ("loss",)), (0, "Recorder", ()),
        (1, "ReplaceLoss", ("loss",)), (2, "Freeze", ("model",))]


class StepInside(Algorithm):
    """Takes an optimizer step inside its call (as SAM-like methods do)."""

    def match(self, event, state):
        return event == Event.AFTER_BACKWARD

    def apply(self, event, state, logger):
        state.optimizers[0].step()


def _with_gradients(state):
    state.optimizers = [torch.optim.SGD(state.model.parameters(), lr=0.1)]
    for p in state.model.parameters():
        p.grad = torch.ones_like(p)


def test_the_loops_own_work_between_events_is_not_blamed_on_the_next_call(state):
    """Between events the loop replaces batch, outputs and loss and steps the optimizer; the
    call after that is compared with the state the loop left, not the state before it."""
    _with_gradients(state)
    state.algorithms = [Recorder(e.value, [e], []) for e in (Event.BEFORE_LOSS, Event.AFTER_LOSS, Event.BATCH_END)]
    engine = Engine(state)
    engine.run_event(Event.BEFORE_LOSS)
    state.outputs, state.loss = torch.zeros(3, 2), torch.tensor(0.5)  # the loop's forward and loss
    state.batch = (torch.ones(3, 4), torch.zeros(3, dtype=torch.long))
    engine.run_event(Event.AFTER_LOSS)
    state.optimizers[0].step()  # the loop's step: parameters written in place
    engine.run_event(Event.BATCH_END)
    inv = engine.trace.invocations
    assert list(inv[inv.matched].changed) == [(), (), ()]


def test_an_optimizer_step_inside_a_call_is_a_model_change(state):
    _with_gradients(state)
    state.algorithms = [StepInside(), Recorder("next", [Event.AFTER_BACKWARD], [])]
    trace = run(state, [Event.AFTER_BACKWARD])
    ran = trace.invocations.set_index("name").changed.to_dict()
    assert ran == {"StepInside": ("model",), "Recorder": ()}  # (the call after it sees the new weights as given)


def asked_everywhere_matching_init() -> Recorder:
    """Listens at every event (asked ``match`` everywhere), says yes at INIT only."""
    recorder = Recorder("r", ALL, [])
    recorder.match = lambda event, state: event is Event.INIT
    return recorder


def test_level_all_records_match_calls_that_said_no(state):
    state.algorithms = [Smooth(), asked_everywhere_matching_init()]
    inv = run(state, [Event.BEFORE_LOSS, Event.INIT]).invocations
    assert list(zip(inv.seq, inv.name, inv.matched)) == [
        (0, "Smooth", True), (0, "Recorder", False), (1, "Recorder", True), (1, "Smooth", False)]
    assert inv[~inv.matched].order.isna().all()


def test_an_algorithm_not_listening_at_an_event_is_not_recorded_as_said_no(state):
    """Only algorithms asked ``match`` appear with matched=False (issue 32)."""
    state.algorithms = [Smooth(), Recorder("r", [Event.INIT], [])]
    inv = run(state, [Event.BEFORE_LOSS, Event.INIT]).invocations
    expected = [(0, "Smooth", True), (1, "Recorder", True), (1, "Smooth", False)]
    assert list(zip(inv.seq, inv.name, inv.matched)) == expected


def test_level_ran_and_off(state):
    state.algorithms = [Smooth(), Recorder("r", [Event.INIT], [])]
    ran = run(state, [Event.BEFORE_LOSS, Event.INIT], level="ran")
    assert list(ran.invocations.name) == ["Smooth", "Recorder"] and ran.invocations.matched.all()
    off = run(state, [Event.BEFORE_LOSS, Event.INIT], level="off")
    assert off.events.empty and off.invocations.empty


def test_bad_level_is_a_value_error():
    with pytest.raises(ValueError, match="'all'"):
        Trace("everything")


def test_raising_apply_is_recorded_and_the_trace_stays_readable(state):
    state.algorithms = [Explode()]
    state.outputs = torch.zeros(3, 2)
    engine = Engine(state)
    engine.run_event(Event.BEFORE_FORWARD)
    with pytest.raises(RuntimeError, match="boom"):
        engine.run_event(Event.AFTER_FORWARD)
    inv = engine.trace.invocations
    row = inv[inv.matched].iloc[-1]
    assert row.error == "RuntimeError: boom" and row.changed == ("outputs",) and pd.isna(row.exit_code)
    assert list(engine.trace.events.event) == ["before_forward", "after_forward"]


def test_callbacks_are_recorded_on_their_events_only(state):
    class OnLoss(Callback):
        def after_loss(self, state, logger):
            pass

    state.callbacks = [OnLoss()]
    inv = run(state, [Event.BEFORE_LOSS, Event.AFTER_LOSS]).invocations
    assert list(zip(inv.event, inv.name, inv.kind)) == [("after_loss", "OnLoss", "callback")]


def test_notes_are_tied_to_the_last_event(state):
    engine = Engine(state)
    engine.run_event(Event.BATCH_START)
    engine.trace.note("setting", "switched MixUp off", state.timestamp)
    notes = engine.trace.notes
    assert list(zip(notes.seq, notes.kind, notes.text)) == [(0, "setting", "switched MixUp off")]


def test_save_load_round_trip(state, tmp_path):
    state.algorithms = [Smooth(), Smooth(), Explode()]
    engine = Engine(state)
    engine.run_event(Event.BEFORE_LOSS)
    with pytest.raises(RuntimeError):
        engine.run_event(Event.AFTER_FORWARD)
    engine.trace.note("setting", "x", state.timestamp)
    engine.trace.save(tmp_path / "t")
    loaded = Trace.load(tmp_path / "t")
    for name in ("events", "invocations", "notes"):
        pd.testing.assert_frame_equal(getattr(loaded, name), getattr(engine.trace, name))


def test_loading_a_folder_that_is_not_a_trace_names_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="trace.json missing"):
        Trace.load(tmp_path)


def test_frames_are_rebuilt_only_after_new_rows(state):
    engine = Engine(state)
    engine.run_event(Event.BATCH_START)
    first = engine.trace.events
    assert engine.trace.events is first
    engine.run_event(Event.BATCH_END)
    assert len(engine.trace.events) == 2


# -- exit codes of any type (issue 19.5) ------------------------------------------------------------
class ReturnsThis(Algorithm):
    events = frozenset({Event.BEFORE_LOSS})

    def __init__(self, code):
        self.code = code

    def apply(self, event, state, logger):
        return self.code


class Opaque:
    def __repr__(self):
        return "Opaque()"


CODES = [3, "skipped: too small", 0.5, True, None, [1, "a"], {"kept": 32}]


def test_any_exit_code_is_kept_and_saved(state, tmp_path):
    state.algorithms = [ReturnsThis(code) for code in CODES] + [ReturnsThis(Opaque())]
    engine = Engine(state)
    engine.run_event(Event.BEFORE_LOSS)
    codes = list(engine.trace.invocations.exit_code)
    assert codes == CODES + ["Opaque()"]  # read back as JSON values, spilled or not: what JSON cannot hold as its repr
    assert type(codes[0]) is int and type(codes[3]) is bool
    loaded = Trace.load(engine.trace.save(tmp_path / "t")).invocations
    assert list(loaded.exit_code) == CODES + ["Opaque()"]  # what JSON cannot hold is saved as its repr
    assert type(list(loaded.exit_code)[0]) is int


def test_changed_is_a_tuple_of_field_names_saved_as_a_list_column(state, tmp_path):
    import pyarrow.parquet as pq

    state.loss = torch.tensor(1.0)
    state.algorithms = [Smooth(), ScaleLossInPlace()]
    engine = Engine(state)
    engine.run_event(Event.BEFORE_LOSS)
    engine.run_event(Event.AFTER_LOSS)
    inv = engine.trace.invocations
    assert list(inv[inv.matched].changed) == [("batch",), ("loss",)]
    assert list(inv[~inv.matched].changed) == [(), ()]
    engine.trace.save(tmp_path / "t")
    (chunk,) = (tmp_path / "t").glob("invocations-*.parquet")
    schema = pq.read_schema(chunk)
    assert str(schema.field("changed").type) == "list<element: string>"
    assert list(Trace.load(tmp_path / "t").invocations.changed) == list(inv.changed)


def test_records_are_named(state):
    state.algorithms = [Smooth()]
    engine = Engine(state)
    engine.run_event(Event.BEFORE_LOSS)
    (event,) = engine.trace.event_rows  # the records in memory, as the engine built them: by name
    (call,) = engine.trace.invocation_rows
    assert isinstance(event, EventRecord) and isinstance(call, InvocationRecord)
    assert (event.event, call.name, call.exit_code, call.changed) == ("before_loss", "Smooth", 7, ("batch",))


class SaysWhy(Algorithm):
    """Returns a string, as user code does (Composer allows any exit code)."""

    events = frozenset({Event.AFTER_LOSS})

    def apply(self, event, state, logger):
        return "skipped: loss already small"


class Counts(Algorithm):
    events = frozenset({Event.AFTER_LOSS})

    def apply(self, event, state, logger):
        return 3


def test_a_fit_with_string_exit_codes_checkpoints_and_saves_its_trace(tmp_path):
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    from composer_lab import Run, Trainer

    data = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))), batch_size=4)
    trainer = Trainer(torch.nn.Linear(4, 2), data, "1ep", loss_fn=F.cross_entropy, algorithms=[SaysWhy(), Counts()],
                      save_folder=tmp_path / "ckpt", progress_bar=False)
    trainer.fit()
    assert trainer.checkpoints
    codes = trainer.trace.invocations.query("name == 'SaysWhy' and matched").exit_code
    assert list(codes) == ["skipped: loss already small"] * 2
    saved = Trace.load(trainer.trace.save(tmp_path / "trace")).invocations
    assert list(saved.query("name == 'SaysWhy' and matched").exit_code) == list(codes)
    assert list(saved.query("name == 'Counts' and matched").exit_code) == [3, 3]
    run = Run.load(trainer.to_run().save(tmp_path / "run"))
    assert list(run.trace.invocations.query("name == 'SaysWhy' and matched").exit_code) == list(codes)
    resumed = Trainer(torch.nn.Linear(4, 2), data, "2ep", loss_fn=F.cross_entropy, algorithms=[SaysWhy(), Counts()],
                      load_path=trainer.checkpoints[-1], progress_bar=False)
    saved_calls = resumed.resumed_from["trace"].invocations
    assert list(saved_calls.query("name == 'Counts' and matched").exit_code) == [3, 3]


def test_a_trace_saved_by_an_older_version_is_refused_not_misread(state, tmp_path):
    import json

    engine = Engine(state)
    engine.run_event(Event.BATCH_START)
    folder = engine.trace.save(tmp_path / "t")
    info = json.loads((folder / "trace.json").read_text())
    del info["format"]
    (folder / "trace.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match="older composer_lab"):
        Trace.load(folder)
    legacy = pd.DataFrame({"changed": ["batch,loss", ""]})
    legacy.to_parquet(tmp_path / "legacy.parquet")
    with pytest.raises(ValueError, match="older composer_lab"):
        read_parquet(tmp_path / "legacy.parquet")

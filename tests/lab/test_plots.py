"""The plots, conflicts and run diff, on real small Trainer runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from composer_lab.algorithms.selective_backprop import SelectiveBackprop
from composer_lab.core import Event, set_filo_order
from composer_lab.lab import (Control, diff_runs, find_conflicts, plot_algorithm_events, plot_keep_ratio,
                              plot_loss, plot_runs, plot_timeline, run_data)
from composer_lab.lab.conflicts import ConflictView
from conftest import Mix, Smooth, make_trainer


def sb():
    return SelectiveBackprop(start=0.25, end=0.75, keep=0.5, scale_factor=1.0, interrupt=2)


@pytest.fixture(scope="module")
def trained():
    trainer = make_trainer([sb(), Mix(), Smooth()], max_duration="12ba", run_name="base")
    trainer.fit()
    return trainer


@pytest.fixture(scope="module")
def other():
    """The same experiment without Smooth and with FILO as the last pass: SB runs after Mix."""
    trainer = make_trainer([sb(), Mix()], max_duration="12ba", run_name="other")
    trainer.engine.passes = [p for p in trainer.engine.passes if p is not set_filo_order] + [set_filo_order]
    trainer.fit()
    return trainer


def lines(ax):
    return {line.get_label(): line for line in ax.get_lines()}


def test_plot_loss_draws_train_per_step_and_eval_per_evaluation(trained, other):
    fig = plot_loss(trained)
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    ax = fig.axes[0]
    drawn = lines(ax)
    m = trained.metrics
    train = m[m["name"] == "loss/train"].groupby("batch")["value"].mean()
    np.testing.assert_allclose(drawn["base train"].get_ydata(), train.values)
    evals = m[m["name"] == "loss/eval"]
    assert list(drawn["base eval"].get_xdata()) == sorted(evals["batch"].unique())
    assert ax.get_xlabel() == "batch" and ax.get_ylabel() == "loss"
    overlaid = lines(plot_loss(trained, other).axes[0])
    assert {"base train", "base eval", "other train", "other eval"} <= set(overlaid)


def test_plot_loss_marks_changes_made_from_the_lab():
    trainer = make_trainer([Mix()], max_duration="6ba")
    control = Control(trainer)
    trainer.fit("3ba")
    control.set_enabled("Mix", False)
    trainer.fit("3ba")
    ax = plot_loss(trainer).axes[0]
    notes = trainer.trace.notes
    assert list(notes["kind"]) == ["duration", "algorithm", "duration"]  # fit('3ba') set the length, twice
    marks = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert [m.get_xdata()[0] for m in marks] == [0, 3]
    texts = [t.get_text() for t in ax.texts]
    assert texts[:2] == ["1", "2-3"], "each mark is numbered (once per batch), not labelled with a rotated text"
    assert texts[2].splitlines()[1] == "2 (batch 3): Mix off", "the notes strip under the axis says what changed"


def test_plot_keep_ratio_shades_the_interval_and_shows_plain_steps(trained, tmp_path):
    fig = plot_keep_ratio(trained)
    ax = fig.axes[0]
    drawn = lines(ax)
    ratio = trained.metrics[trained.metrics["name"] == "sb/keep_ratio"].set_index("batch")["value"]
    assert list(drawn["selecting batch"].get_xdata()) == list(ratio.index[ratio < 1])
    assert set(drawn["selecting batch"].get_xdata()) == {4, 6, 8}  # [3, 9) of 12 batches, even batches of the epoch
    assert [line.get_linestyle() for line in ax.get_lines()] == ["None"], "points, no saw-tooth line"
    (span,) = ax.patches
    assert (span.get_x(), span.get_x() + span.get_width()) == (4, 9)  # where selection happened
    saved = trained.to_run().save(tmp_path / "run")
    (saved_span,) = plot_keep_ratio(saved).axes[0].patches
    assert (saved_span.get_x(), saved_span.get_x() + saved_span.get_width()) == (4, 9)


def test_a_continued_run_keeps_the_selection_it_had():
    """History is not redrawn from today's settings: a longer run moves SB's schedule from
    then on (a note), and the bands drawn stay where selection happened."""
    trainer = make_trainer([sb()], max_duration="12ba", run_name="continued")
    trainer.fit()
    before = [(p.get_x(), p.get_x() + p.get_width()) for p in plot_keep_ratio(trainer).axes[0].patches]
    trainer.fit("12ba")
    after = [(p.get_x(), p.get_x() + p.get_width()) for p in plot_keep_ratio(trainer).axes[0].patches]
    assert before == [(4, 9)] and after[0] == (4, 9) and after[1][0] >= 12
    assert "schedules in fractions of the run move" in trainer.trace.notes["text"].iloc[-1]


def test_plot_timeline_shows_the_chosen_steps_with_one_lane_per_algorithm(trained):
    fig = plot_timeline(trained, steps=[5])
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == "events" and {"SelectiveBackprop", "Mix", "Smooth"} <= set(labels)
    assert "steps [5]" in ax.get_title()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[:2] == ["before_dataloader", "after_dataloader"] and "before_forward" in legend
    assert "step 5" in [t.get_text() for t in ax.texts]
    with pytest.raises(ValueError, match="steps \\[99\\] are not in the trace"):
        plot_timeline(trained, steps=[99])


def test_plot_algorithm_events_counts_calls_per_event(trained):
    fig = plot_algorithm_events(trained)
    calls_ax = fig.axes[0]
    events = [t.get_text() for t in calls_ax.get_xticklabels()]
    names = [t.get_text() for t in calls_ax.get_yticklabels()]
    table = calls_ax.get_images()[0].get_array()
    inv = trained.trace.invocations
    ran = inv[inv["matched"] & (inv["kind"] == "algorithm")]
    expected = ran.assign(event=ran["event"].astype(str), name=ran["name"].astype(str)).groupby(
        ["name", "event"]).size()
    for (name, event), count in expected.items():
        assert table[names.index(name), events.index(event)] == count
    assert table[names.index("Smooth"), events.index("before_loss")] == 12
    assert fig.axes[1].get_title() == "total time (ms)"
    assert events == [e.value for e in Event if e.value in events], "events in the order the loop fires them"
    assert events.index("before_loss") < events.index("after_loss")
    colours = {t.get_text(): t.get_color() for t in calls_ax.texts}
    assert colours["12"] == "white" and colours["0"] == "black", "text colour by the cell's value"


def test_diff_runs_finds_moved_and_vanished_calls(trained, other):
    diff = diff_runs(trained, other)
    at = diff[(diff["event"] == "after_dataloader")]
    assert set(at.loc[at["name"] == "Mix", "status"]) == {"moved"}
    assert set(diff.loc[diff["name"] == "Smooth", "status"]) == {"vanished"}
    assert set(diff.loc[diff["event"] == "before_forward", "status"]) <= {"same"}
    same = diff_runs(trained, trained)
    assert set(same["status"]) == {"same"}


def test_plot_runs_overlays_losses_and_marks_each_call_that_differs_at_its_batches(trained, other):
    """One row per event and call, in the events' order, a mark per batch: not one bar per event."""
    fig = plot_runs(trained, other)
    loss_ax, diff_ax = fig.axes
    assert {"base train", "other train"} <= set(lines(loss_ax))
    legend = [t.get_text() for t in diff_ax.get_legend().get_texts()]
    assert legend == ["moved", "appeared", "vanished"]
    rows = [t.get_text() for t in diff_ax.get_yticklabels()]
    assert rows == ["after_dataloader · Mix\n12 moved", "after_dataloader · SelectiveBackprop\n12 moved",
                    "before_loss · Smooth\n12 vanished", "after_loss · Smooth\n12 vanished"]
    assert diff_ax.get_xlabel() == "batch" and len(diff_ax.collections[0].get_offsets()) == 12
    fewer = plot_runs(trained, other, max_rows=2).axes[1]
    assert len(fewer.get_yticklabels()) == 2 and fewer.get_title() == "other vs base (2 more rows not shown)"


def test_plot_runs_of_one_run_says_nothing_differs(trained):
    diff_ax = plot_runs(trained, trained).axes[1]
    assert [t.get_text() for t in diff_ax.texts] == ["same calls in the same order"]


def test_conflicts_pair_algorithms_changing_the_same_field_with_the_deciding_pass(trained):
    control = Control(trained)
    table = find_conflicts(trained, control)
    row = table[(table["event"] == "after_dataloader") & (table["field"] == "batch")].iloc[0]
    assert (row["first"], row["second"]) == ("SelectiveBackprop", "Mix")
    assert row["times"] == 3 and (row["first_batch"], row["last_batch"]) == (4, 8)
    assert row["pass"] == "sort_selective_backprop_first"
    assert find_conflicts(trained.to_run())["pass"].isna().all()
    view = ConflictView(trained, control)
    assert "SelectiveBackprop &rarr; Mix" in view.table.value


def test_conflicts_in_the_other_order_are_decided_by_filo(other):
    table = find_conflicts(other, Control(other))
    row = table[table["event"] == "after_dataloader"].iloc[0]
    assert (row["first"], row["second"], row["pass"]) == ("Mix", "SelectiveBackprop", "set_filo_order")


def test_run_data_reads_folders_and_frames_and_rejects_the_rest(trained, tmp_path):
    folder = trained.to_run().save(tmp_path / "r")
    data = run_data(folder)
    assert data.name == "base" and len(data.invocations) == len(trained.trace.invocations)
    assert run_data(trained.metrics).metrics is trained.metrics
    assert run_data(trained.trace.events).events is trained.trace.events
    with pytest.raises(TypeError, match="cannot read a run from object"):
        run_data(object())
    with pytest.raises(ValueError, match="cannot tell what this DataFrame is"):
        run_data(pd.DataFrame({"x": [1]}))
    with pytest.raises(ValueError, match="unknown frames"):
        run_data({"loss": trained.metrics})
    with pytest.raises(ValueError, match="is not a folder"):
        run_data(tmp_path / "missing")
    with pytest.raises(ValueError, match="logged no 'loss/train'"):
        plot_loss(trained.trace)
    with pytest.raises(ValueError, match="logged no 'sb/keep_ratio'"):
        plot_keep_ratio(trained.metrics[trained.metrics["name"] == "loss/train"])
    with pytest.raises(ValueError, match="no run given"):
        plot_loss()


def test_the_labs_own_callback_is_marked_and_left_out_of_diffs_and_timelines():
    from composer_lab.lab import Lab
    runs = []
    for watched in (False, True):
        trainer = make_trainer([Mix()], max_duration="3ba", run_name=f"watched={watched}")
        if watched:
            Lab(trainer)
        trainer.fit()
        runs.append(trainer)
    inv = runs[1].trace.invocations
    assert "lab.RunMonitor" in set(inv["name"].astype(str)), "marked as the lab's own in the trace"
    assert set(diff_runs(*runs)["status"]) == {"same"}
    assert (diff_runs(*runs, internal=True)["status"] == "appeared").sum() > 0
    lanes = [t.get_text() for t in plot_timeline(runs[1], steps=[1]).axes[0].get_yticklabels()]
    assert "lab.RunMonitor" not in lanes and "Mix" in lanes


def test_the_live_plot_updates_its_lines_in_place():
    from composer_lab.lab.live_plot import LivePlot
    trainer = make_trainer([Mix()], max_duration="4ba")
    plot = LivePlot()
    trainer.fit("2ba")
    first = plot.draw(trainer)
    figure, line = plot.figure, plot._lines["train"]
    trainer.fit("2ba")
    assert plot.draw(trainer) != first and plot.figure is figure and plot._lines["train"] is line
    assert list(line.get_xdata()) == [0, 1, 2, 3]


def test_plot_timeline_hatches_the_second_call_of_the_optimizer_closure(trained):
    """SAM runs the forward and backward twice per step through the optimizer's closure: the
    rows of the second call (``closure_call`` 1) are drawn hatched, the first call's plain, and
    the legend says what the hatching means; a run without a second call has no hatching."""
    from matplotlib.collections import PolyCollection

    def hatched(fig):
        bars = [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]
        return [c for c in bars if c.get_hatch()], [c for c in bars if not c.get_hatch()]

    events, calls = trained.trace.events, trained.trace.invocations
    assert hatched(plot_timeline(trained, steps=[5]))[0] == []
    second = events[(events["batch"] == 5) & events["event"].astype(str).isin(["before_forward", "after_forward"])]
    second = second["seq"].iloc[-2:]  # the last microbatch's forward stands for the second closure call
    events = events.assign(closure_call=events["seq"].isin(second).astype("int64"))
    calls = calls.assign(closure_call=calls["seq"].isin(second).astype("int64"))
    fig = plot_timeline({"events": events, "invocations": calls}, steps=[5])
    repeat, plain = hatched(fig)
    assert len(repeat) == 2 and plain, "the events of the second call hatched, in their own event colours"
    assert sum(len(c.get_paths()) for c in repeat) == 2
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend[-1] == "closure call 1 (hatched)" and legend.count("before_forward") == 1

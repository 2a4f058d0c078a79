"""The commutation check: the known cases, and the live run left as it was."""

from __future__ import annotations

import functools

import pytest
import torch

from composer_lab.algorithms import CutMix, CutOut, LabelSmoothing, MixUp, SelectiveBackprop
from composer_lab.core import Event
from composer_lab.core.passes import COMPOSER_PASSES, sort_selective_backprop_first
from composer_lab.explore import commutation, plot_commutation
from composer_lab.explore.commutation import FIELDS, compare_orders
from composer_lab.trainer.rng import rng_state
from tests.explore.factories import dropping, make_trainer, with_passes


def _verdicts(table):
    return table.groupby(["event", "first", "second"])["commutes"].all().to_dict()


def test_two_label_smoothings_commute():
    table = commutation(make_trainer, [LabelSmoothing(0.1), LabelSmoothing(0.3)], batches=2)
    # Smoothing is affine in the targets; AFTER_LOSS mirrors BEFORE_LOSS (last in, first out).
    assert _verdicts(table) == {("before_loss", "LabelSmoothing", "LabelSmoothing#2"): True}
    assert set(table["field"]) == set(FIELDS)
    targets = table[table["field"] == "targets"].iloc[0]
    assert 0 < targets["max_abs_diff"] <= table.attrs["tolerance"] or targets["max_abs_diff"] == 0
    assert targets["points"] == 2
    assert table.attrs["judged_at_opening"].values.tolist() == [
        ["after_loss", "LabelSmoothing#2", "LabelSmoothing", "before_loss"]]  # said, not silently skipped


def test_the_passes_the_factorys_trainer_runs_decide_what_is_compared():
    smoothings = [LabelSmoothing(0.1), LabelSmoothing(0.3)]
    # FILO removed: the after-event keeps the list order, so it is no LIFO undo: compared there too.
    no_filo = commutation(functools.partial(with_passes, [sort_selective_backprop_first]), smoothings, batches=2)
    assert no_filo.attrs["passes"] == ["sort_selective_backprop_first"]
    assert no_filo.attrs["judged_at_opening"].empty
    verdicts = _verdicts(no_filo)
    assert set(verdicts) == {("before_loss", "LabelSmoothing", "LabelSmoothing#2"),
                             ("after_loss", "LabelSmoothing", "LabelSmoothing#2")}
    assert not verdicts[("after_loss", "LabelSmoothing", "LabelSmoothing#2")]  # each restores another's original
    # Composer's passes reverse AFTER_LOSS as FILO does: judged at BEFORE_LOSS, and said so.
    composer = commutation(functools.partial(with_passes, list(COMPOSER_PASSES)), smoothings, batches=2)
    assert set(_verdicts(composer)) == {("before_loss", "LabelSmoothing", "LabelSmoothing#2")}
    assert composer.attrs["judged_at_opening"]["event"].tolist() == ["after_loss"]
    # A custom pass that reverses every event keeps the pair's order from before_loss to after_loss.
    reversed_everywhere = commutation(functools.partial(with_passes, [_reverse]), smoothings, batches=2)
    assert set(_verdicts(reversed_everywhere)) == {("before_loss", "LabelSmoothing#2", "LabelSmoothing"),
                                                   ("after_loss", "LabelSmoothing#2", "LabelSmoothing")}


def _reverse(algorithms, event):
    return algorithms[::-1]


def test_a_factory_that_drops_its_algorithms_is_refused():
    with pytest.raises(ValueError, match=r"make_trainer \(dropping\) built a Trainer holding no algorithms"):
        commutation(dropping, [CutOut(), MixUp()], batches=1)


def test_cutout_and_selective_backprop_do_not_commute_after_the_dataloader():
    table = commutation(make_trainer, [CutOut(), SelectiveBackprop(start=0.0, end=1.0, interrupt=0)], batches=2)
    rows = table[table["event"] == "after_dataloader"].set_index("field")
    assert not rows["commutes"].all()
    assert rows.loc["inputs", "max_abs_diff"] > 0  # SB scores the cut images in one order, the originals in the other


def test_the_check_trains_a_run_of_its_own_length_so_a_schedule_falls_inside_it():
    """SB's default window, [0.5, 0.9) of the run, lies past 4 batches of the factory's 6: the check
    trains 4 batches as a 4-batch run (not the first 4 of 6), so SB selects there and is judged."""
    table = commutation(make_trainer, [CutOut(), SelectiveBackprop(scale_factor=1)], batches=4)
    rows = table[table["event"] == "after_dataloader"].set_index("field")
    assert not rows["commutes"].all()


def test_mixup_and_cutmix_do_not_commute():
    with pytest.warns(UserWarning, match="mix"):  # the engine's pass says so too
        table = commutation(make_trainer, [MixUp(), CutMix()], batches=2)
    verdict = table.groupby("event")["commutes"].all()
    assert not verdict["after_dataloader"]


def test_the_check_leaves_the_live_run_untouched():
    cutout, sb = CutOut(), SelectiveBackprop(start=0.0, end=1.0, interrupt=0)
    trainer = make_trainer([cutout, sb], 0, batches="2ba")
    trainer.fit()
    state = trainer.state
    state.max_duration = "4ba"  # halfway: SB selects
    weights = {k: v.clone() for k, v in state.model.state_dict().items()}  # BatchNorm running stats included
    batch, rng = state.batch, rng_state()
    generator = state.generator().get_state()
    diffs = compare_orders(state, Event.AFTER_DATALOADER, cutout, sb)
    assert diffs["inputs"] > 0
    assert state.batch is batch
    assert all(torch.equal(weights[k], v) for k, v in state.model.state_dict().items())
    assert torch.equal(rng["torch"], torch.get_rng_state()) and torch.equal(generator, state.generator().get_state())


def test_the_heatmap_has_a_row_per_pair_and_a_column_per_event():
    table = commutation(make_trainer, [CutOut(), MixUp(), LabelSmoothing(), LabelSmoothing(0.2)], batches=2)
    fig = plot_commutation(table)
    ax = fig.axes[0]
    pairs = {t.get_text() for t in ax.get_yticklabels()}
    assert pairs == {f"{f} × {s}" for f, s in zip(table["first"], table["second"])}
    assert {t.get_text() for t in ax.get_xticklabels()} == set(table["event"])
    assert fig._repr_png_().startswith(b"\x89PNG")  # how a notebook shows it

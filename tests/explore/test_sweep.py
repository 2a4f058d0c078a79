"""Sweeps in this process: results, ranking statistics, plots, diffs, resuming, refusals."""

from __future__ import annotations

import functools
import json
import math
import threading
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import pytest
from scipy import stats

from composer_lab.algorithms import CutOut, LabelSmoothing, MixUp, SelectiveBackprop
from composer_lab.core.passes import set_filo_order
from composer_lab.explore import InlineExecutor, Sweep, orderings
from composer_lab.explore.results import SweepFolder
from composer_lab.explore.sweep_orders import SweepOrder, trial_key
from composer_lab.explore.stats import seeds_needed
from tests.explore import factories
from tests.explore.factories import dropping, failing_while, make_trainer, not_a_trainer, reordering, slow, with_passes

METRIC = "metrics/eval/Accuracy"
MIXUP_FIRST, CUTOUT_FIRST = "after_dataloader: MixUp > CutOut", "after_dataloader: CutOut > MixUp"
"""What the lists CutOut > MixUp and MixUp > CutOut run: FILO reverses after_dataloader."""
ONE_ORDER = {"orders": [(0, 1)]}
"""One of the two orders of [CutOut(), MixUp()]: a sweep of one order's runs, for tests of its mechanics."""


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """Two orders (CutOut and MixUp meet at AFTER_DATALOADER) x 3 seeds, trained once for the module."""
    sweep = Sweep(make_trainer, [CutOut(), MixUp()], seeds=range(3), executor=InlineExecutor(),
                  folder=tmp_path_factory.mktemp("sweep"))
    sweep.run()
    return sweep


def test_every_order_and_seed_has_one_row(swept):
    results = swept.results
    assert list(zip(results["order"], results["list_order"], results["seed"])) == [
        (order, listed, seed) for order, listed in ((MIXUP_FIRST, "CutOut > MixUp"), (CUTOUT_FIRST, "MixUp > CutOut"))
        for seed in range(3)]
    assert {METRIC, "loss/train", "samples", "wall_time", "run_folder"} <= set(results.columns)
    assert (results["samples"] == 48).all()
    assert (swept.folder.path / "results.parquet").is_file()
    assert sorted(p.name for p in (swept.folder.path / "runs").iterdir()) == sorted(
        p.stem for p in (swept.folder.path / "rows").glob("*.json"))


def test_ranking_statistics_follow_the_results(swept):
    ranking, values = swept.ranking(), swept.results.pivot(index="seed", columns="order", values=METRIC)
    assert set(ranking["order"]) == set(values.columns) and list(ranking["rank"]) in ([1, 2], [1, 1])
    assert ranking["mean"].is_monotonic_decreasing
    best = ranking["order"].iloc[0]
    for row in ranking.itertuples():
        x = values[row.order]
        assert row.n == 3 and row.mean == pytest.approx(x.mean()) and row.std == pytest.approx(x.std())
        half = stats.t.ppf(0.975, 2) * x.std() / math.sqrt(3)
        assert (row.ci_low, row.ci_high) == pytest.approx((max(0, x.mean() - half), min(1, x.mean() + half)))
        d = x - values[best]
        assert row.diff == pytest.approx(d.mean())
        if d.std() > 0 and row.order != best:
            assert row.p_value == pytest.approx(stats.ttest_rel(x, values[best]).pvalue)
            assert row.p_adjusted == pytest.approx(row.p_value)  # a family of one comparison
    top = ranking.iloc[0]
    assert top["verdict"] == "best" and top["diff"] == 0 and math.isnan(top["p_value"])
    assert ranking.attrs["summary"].startswith("2 orders x 3 seeds: ")


def test_seeds_needed_reads_the_paired_spread(swept):
    values = swept.results.pivot(index="seed", columns="order", values=METRIC)
    best, other = swept.ranking()["order"]
    assert swept.seeds_needed(0.01) == seeds_needed((values[other] - values[best]).to_numpy(), 0.01)
    with pytest.raises(ValueError, match="delta must be a positive number"):
        swept.seeds_needed(0)


def test_plot_shows_every_order_with_intervals(swept):
    fig = swept.plot()
    means, diffs = fig.axes
    ranking = swept.ranking()
    assert [t.get_text() for t in means.get_yticklabels()] == [o.replace("; ", "\n") for o in ranking["order"]]
    assert means.get_xlabel().startswith(METRIC) and means.get_ylabel() and diffs.get_xlabel()
    assert [t.get_text().split()[0] for t in diffs.texts] == list(ranking["verdict"])
    assert fig._repr_png_().startswith(b"\x89PNG")  # how a notebook shows it


def test_diff_of_two_orders_at_one_seed_moves_the_swapped_pair(swept):
    diff = swept.diff((0, 1), "MixUp > CutOut", seed=2)
    moved = diff[diff["status"] == "moved"]
    assert set(moved["name"]) == {"CutOut", "MixUp"} and set(moved["event"]) == {"after_dataloader"}


def test_a_sweep_on_its_folder_trains_only_what_is_missing(swept):
    rows_before = swept.folder.rows()
    more = Sweep(make_trainer, [CutOut(), MixUp()], seeds=range(4), executor=InlineExecutor(),
                 folder=swept.folder.path)
    assert [(t.order, t.seed) for t in more.pending()] == [(MIXUP_FIRST, 3), (CUTOUT_FIRST, 3)]
    trained = []
    more.run(on_result=trained.append)
    assert [(r["order"], r["seed"]) for r in trained] == [(MIXUP_FIRST, 3), (CUTOUT_FIRST, 3)]
    rows_after = more.folder.rows()
    assert all(rows_after[key] == row for key, row in rows_before.items())  # finished runs are not redone
    assert len(more.results) == 8


def test_a_crashed_run_loses_nothing_and_resumes(tmp_path):
    flag = tmp_path / "crash"
    flag.touch()
    factory = functools.partial(failing_while, str(flag))
    sweep = Sweep(factory, [CutOut(), MixUp()], seeds=range(3), executor=InlineExecutor(), folder=tmp_path / "s",
                  **ONE_ORDER)
    with pytest.raises(RuntimeError, match=r"the run of 'after_dataloader: MixUp > CutOut' with seed 1 failed "
                                           r"\(RuntimeError: the worker crashed\); 1 of 3 runs finished and are saved "
                                           r"in .*call run\(\) again"):
        sweep.run()
    assert [t.seed for t in sweep.pending()] == [1, 2]  # a failed run stops the sweep: nothing more starts
    flag.unlink()
    assert list(Sweep(factory, [CutOut(), MixUp()], seeds=range(3), executor=InlineExecutor(),
                      folder=tmp_path / "s", **ONE_ORDER).run()["seed"]) == [0, 1, 2]


def test_stop_cancels_what_has_not_started_and_keeps_what_finished(tmp_path):
    stop = threading.Event()
    slower = functools.partial(slow, 0.2)  # runs long enough that the stop finds some not started
    sweep = Sweep(slower, [CutOut(), MixUp()], seeds=range(6), executor=ThreadPoolExecutor(1), folder=tmp_path,
                  **ONE_ORDER)
    results = sweep.run(on_result=lambda row: stop.set(), stop=stop)
    assert 1 <= len(results) < 6
    assert len(sweep.pending()) == 6 - len(results)


def test_rows_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
    folder = SweepFolder(tmp_path)
    folder.claim({"algorithms": []})

    def dump_half(data, file, **kwargs):
        file.write('{"order": ')
        raise KeyboardInterrupt

    monkeypatch.setattr(json, "dump", dump_half)
    with pytest.raises(KeyboardInterrupt):
        folder.write_row("a__seed0", {"order": "a"})
    assert folder.rows() == {} and list((tmp_path / "rows").iterdir()) == []


# -- refusals --------------------------------------------------------------------------------
def test_a_folder_of_another_experiment_is_refused(swept):
    # What differs, in words (tests/explore/test_identity.py: code, globals, closures, starting over).
    with pytest.raises(ValueError, match=r"holds results of another experiment: algorithms: \[CutOut \(.*\), MixUp "
                                         r"\(.*\)\] -> \[MixUp \(.*\), CutOut \(.*\)\]\. Results of different "
                                         r"experiments are not mixed: choose a new folder, or pass resume=False"):
        Sweep(make_trainer, [MixUp(), CutOut()], executor=InlineExecutor(), folder=swept.folder.path)
    edited = {"factories": factories, "__name__": "__main__"}  # a notebook cell's factory, without its source
    exec("def make_trainer(algorithms, seed):\n    return factories.make_trainer(algorithms, seed, '7ba')", edited)
    with pytest.raises(ValueError, match=r"another experiment: factory: 'tests.explore.factories.make_trainer' -> "
                                         r"'make_trainer'; "):
        Sweep(edited["make_trainer"], [CutOut(), MixUp()], executor=InlineExecutor(), folder=swept.folder.path)


def test_a_metric_the_runs_do_not_record_is_named_with_those_they_do(tmp_path):
    sweep = Sweep(make_trainer, [CutOut(), MixUp()], seeds=[0], metric="accuracy", executor=InlineExecutor(),
                  folder=tmp_path, **ONE_ORDER)
    with pytest.raises(ValueError, match=r"the runs do not record the metric 'accuracy'; they record \[.*"
                                         r"'metrics/eval/Accuracy'.*\]: pass one of those as "
                                         r"metric=\.\.\. \(Sweep, Frontier\)"):
        sweep.run()
    assert sweep.folder.rows() == {}


def test_a_factory_that_returns_no_trainer_is_refused(tmp_path):
    sweep = Sweep(not_a_trainer, [CutOut(), MixUp()], seeds=[0], executor=InlineExecutor(), folder=tmp_path,
                  **ONE_ORDER)
    with pytest.raises(TypeError, match=r"make_trainer \(not_a_trainer\) returned str, not a Trainer"):
        sweep.run()


def test_no_seeds_and_bad_orders_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"no seeds: a sweep trains every order once per seed"):
        Sweep(make_trainer, [LabelSmoothing()], seeds=[], folder=tmp_path)
    with pytest.raises(TypeError, match=r"seeds must be a list of seeds, e.g. range\(5\), got int 5"):
        Sweep(make_trainer, [LabelSmoothing()], seeds=5, folder=tmp_path)
    with pytest.raises(ValueError, match=r"each order lists the positions of all 2 algorithms once"):
        Sweep(make_trainer, [CutOut(), MixUp()], orders=[(0, 0)], folder=tmp_path)


def test_the_same_instance_twice_is_refused(tmp_path):
    cutout = CutOut()
    with pytest.raises(ValueError, match=r"algorithms\[1\] is the same CutOut instance as algorithms\[0\]"):
        Sweep(make_trainer, [cutout, cutout], folder=tmp_path)


def test_a_factory_that_cannot_be_sent_to_a_worker_is_refused(tmp_path):
    lock = threading.Lock()
    with pytest.raises(TypeError, match=r"make_trainer cannot be sent to a worker process \(TypeError: cannot pickle "
                                        r"'_thread.lock' object\); .* inside the factory"):
        Sweep(lambda algorithms, seed: lock and make_trainer(algorithms, seed), [CutOut(), MixUp()],
              folder=tmp_path)


# -- what an order is called ------------------------------------------------------------------
def test_orders_are_named_by_what_runs_and_keyed_by_positions(tmp_path):
    sweep = Sweep(make_trainer, [CutOut(), MixUp(), SelectiveBackprop(), LabelSmoothing()], seeds=[0],
                  folder=tmp_path)
    assert sweep.orders == [
        SweepOrder("after_dataloader: SelectiveBackprop > MixUp > CutOut",
                   "CutOut > MixUp > SelectiveBackprop > LabelSmoothing", (0, 1, 2, 3)),
        SweepOrder("after_dataloader: SelectiveBackprop > CutOut > MixUp",
                   "MixUp > CutOut > SelectiveBackprop > LabelSmoothing", (1, 0, 2, 3))]
    assert [t.key for t in sweep.trials()] == ["o0-1-2-3__seed0", "o1-0-2-3__seed0"]
    assert sweep.describe().splitlines()[-2:] == [
        "out of the question: SelectiveBackprop (pinned first at after_dataloader by sort_selective_backprop_first)",
        "out of the question: LabelSmoothing (never shares an event with another algorithm)"]
    assert sweep._label("MixUp > CutOut > SelectiveBackprop > LabelSmoothing") == sweep._label((1, 0, 2, 3)) == \
        "after_dataloader: SelectiveBackprop > CutOut > MixUp"


def test_trial_files_cannot_collide():
    # Keyed by the list's positions: the names 'A_B > C' and 'A > B_C' once made one file.
    assert trial_key((0, 1, 2), 3) == "o0-1-2__seed3" and trial_key((0, 1, 2), 3) != trial_key((0, 2, 1), 3)


def test_a_question_with_one_order_is_refused_with_why_and_how_to_free_it(tmp_path):
    with pytest.raises(ValueError, match=r"CutOut, LabelSmoothing, SelectiveBackprop run in one order only, whatever "
                                         r"the list, so a sweep has nothing to compare: CutOut pinned last at "
                                         r"after_dataloader by sort_selective_backprop_first; LabelSmoothing never "
                                         r"shares an event with another algorithm; SelectiveBackprop pinned first .*"
                                         r"To free the order, give the factory's trainer passes without the pin"):
        Sweep(make_trainer, [CutOut(), LabelSmoothing(), SelectiveBackprop()], folder=tmp_path)
    with pytest.raises(ValueError, match=r"run in one order only.*LabelSmoothing never shares an event"):
        Sweep(make_trainer, [LabelSmoothing()], folder=tmp_path)
    commute = pd.DataFrame({"event": ["before_loss"], "first": ["LabelSmoothing"], "second": ["LabelSmoothing#2"],
                            "field": ["targets"], "max_abs_diff": [0.0], "commutes": [True]})
    smoothings = [LabelSmoothing(0.1), LabelSmoothing(0.2)]
    with pytest.raises(ValueError, match=r"run in one order only, .*: the commutation table found that the algorithms "
                                         r"that meet commute, so orderings\(\) merged every order into one"):
        Sweep(make_trainer, smoothings, orders=orderings(smoothings, commutation=commute), folder=tmp_path)
    with pytest.raises(ValueError, match=r"the orders \(0, 1\) and \(0, 1\) run alike \(after_dataloader: MixUp > "
                                         r"CutOut\); give each order once"):
        Sweep(make_trainer, [CutOut(), MixUp()], orders=[(0, 1), (0, 1)], folder=tmp_path)


# -- the factory is checked -------------------------------------------------------------------
@pytest.mark.parametrize("factory, held", [(dropping, "no algorithms"), (reordering, r"\['MixUp', 'CutOut'\]")])
def test_a_factory_that_drops_or_reorders_its_algorithms_is_refused_before_anything_is_ranked(tmp_path, factory,
                                                                                            held):
    sweep = Sweep(factory, [CutOut(), MixUp()], seeds=[0, 1], executor=InlineExecutor(), folder=tmp_path)
    with pytest.raises(ValueError, match=rf"make_trainer \({factory.__name__}\) built a Trainer holding {held}, not "
                                         r"the algorithms it was given \(\['CutOut', 'MixUp'\], in that order\): "
                                         r"every order would train alike. Pass them through as they come"):
        sweep.run()
    assert sweep.folder.rows() == {}


def test_a_factory_whose_trainer_runs_other_passes_than_the_labels_assume_is_refused(tmp_path):
    unpinned = functools.partial(with_passes, [set_filo_order])
    sweep = Sweep(unpinned, [CutOut(), MixUp()], seeds=[0], executor=InlineExecutor(), folder=tmp_path / "a")
    with pytest.raises(ValueError, match=r"runs the passes \['set_filo_order'\], but the sweep's orders were worked "
                                         r"out under \['set_filo_order', 'sort_selective_backprop_first', .*pass "
                                         r"orders=orderings\(algorithms, passes=<the passes the factory sets>\)"):
        sweep.run()
    orders = orderings([CutOut(), MixUp()], passes=[set_filo_order])
    assert len(Sweep(unpinned, [CutOut(), MixUp()], seeds=[0], orders=orders, executor=InlineExecutor(),
                     folder=tmp_path / "b").run()) == 2


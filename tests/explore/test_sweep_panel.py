"""The sweep panel: a sweep in the background, progress and ranking as runs finish, Stop."""

from __future__ import annotations

import functools
import time

import pytest
from concurrent.futures import ThreadPoolExecutor

from composer_lab.algorithms import CutOut, LabelSmoothing, MixUp
from composer_lab.lab import SweepPanel
from composer_lab.explore import InlineExecutor
from tests.explore.factories import make_trainer, scored, slow


def test_a_sweep_of_the_checked_algorithms_fills_progress_table_and_plot(tmp_path):
    panel = SweepPanel(make_trainer, [CutOut(), LabelSmoothing(), MixUp()], seeds=2, folder=tmp_path,
                       executor=ThreadPoolExecutor(1))
    panel.checks[1].value = False  # sweep CutOut and MixUp only
    handle = panel.start()
    assert panel.run_button.disabled and not panel.stop_button.disabled
    handle.wait(timeout=120)
    assert handle.done and panel.status.value == "done"
    assert (panel.progress.value, panel.progress.max) == (4, 4)
    assert "CutOut &gt; MixUp" in panel.table.value and "MixUp &gt; CutOut" in panel.table.value
    assert bytes(panel.image.value).startswith(b"\x89PNG")
    assert not panel.run_button.disabled and panel.stop_button.disabled
    assert (tmp_path / "CutOut_MixUp" / "sweep.json").is_file()


def test_stop_leaves_only_the_run_training_shows_every_finished_run_and_a_new_start_resumes(tmp_path):
    slower = functools.partial(slow, 0.5)  # runs long enough that Stop finds some not started
    panel = SweepPanel(slower, [CutOut(), MixUp()], seeds=3, folder=tmp_path, executor=ThreadPoolExecutor(1))
    handle = panel.start()
    assert panel.count.value == "0 / 6"
    while panel.progress.value < 1 and not handle.done:
        time.sleep(0.02)
    clicked_at = panel.progress.value
    panel.stop_button.click()
    handle.wait(timeout=120)
    finished = len(panel.sweep.results)
    assert clicked_at <= finished <= clicked_at + 1  # one worker: at most its run under way finished
    assert panel.progress.value == finished and panel.count.value == f"{finished} / 6"
    assert panel.status.value == f"stopped: {6 - finished} runs not trained (start again to resume)"
    ranking = panel.sweep.ranking()  # the table shows every finished run, those after the click too
    assert ranking["n"].sum() == finished and all(f"<td>{n}</td>" in panel.table.value for n in ranking["n"])
    panel.start().wait(timeout=120)
    assert panel.progress.value == 6 and len(panel.sweep.results) == 6 and panel.status.value == "done"


def test_a_race_shows_its_verdicts_as_they_come_and_its_answer(tmp_path):
    tied = functools.partial(scored, {"CutOut > MixUp": 0.8, "MixUp > CutOut": 0.8}, 0.002)
    panel = SweepPanel(tied, [CutOut(), MixUp()], seeds=12, metric="score", folder=tmp_path, executor=InlineExecutor())
    panel.race.value, panel.delta.value = True, 0.005
    tables = []
    panel.table.observe(lambda change: tables.append(change["new"]), "value")
    panel.start().wait(timeout=120)
    runs = len(panel.sweep.results)
    assert panel.status.value == "done" and runs < 24 and panel.count.value == f"{runs} / at most 24"
    assert any("racing" in table for table in tables)  # verdicts update while it races
    assert "equivalent" in tables[-1] and "the order of CutOut and MixUp changes score by less than 0.005" in tables[-1]


def test_without_an_executor_the_panel_trains_on_a_local_pool_of_its_workers(tmp_path):
    panel = SweepPanel(make_trainer, [CutOut(), MixUp()], seeds=1, workers=1, folder=tmp_path)
    assert not panel.workers.disabled
    panel.start().wait(timeout=120)
    assert panel.status.value == "done" and panel.progress.value == 2
    pool = panel.sweep.executor
    assert type(pool).__module__.startswith("joblib.externals.loky")
    with pytest.raises(RuntimeError, match="shutdown"):  # the panel's own pool is shut down when the sweep ends
        pool.submit(print)

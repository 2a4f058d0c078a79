"""The sweep panel: a sweep in the background, progress and ranking as runs finish, Stop."""

from __future__ import annotations

import functools
import time

import pytest
from concurrent.futures import ThreadPoolExecutor

from composer_lab.algorithms import CutOut, LabelSmoothing, MixUp
from composer_lab.lab import SweepPanel
from tests.explore.factories import make_trainer, slow


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


def test_stop_keeps_what_finished_and_a_new_start_resumes(tmp_path):
    slower = functools.partial(slow, 0.5)  # runs long enough that Stop finds some not started
    panel = SweepPanel(slower, [LabelSmoothing()], seeds=6, folder=tmp_path, executor=ThreadPoolExecutor(1))
    handle = panel.start()
    while panel.progress.value < 1 and not handle.done:
        time.sleep(0.02)
    panel.stop_button.click()
    handle.wait(timeout=120)
    finished = len(panel.sweep.results)  # (a run may end between the click and the cancel: saved, not counted)
    assert 1 <= finished < 6 and panel.status.value.startswith(f"stopped: {6 - finished} runs not trained")
    panel.start().wait(timeout=120)
    assert panel.progress.value == 6 and len(panel.sweep.results) == 6


def test_without_an_executor_the_panel_trains_on_a_local_pool_of_its_workers(tmp_path):
    panel = SweepPanel(make_trainer, [LabelSmoothing()], seeds=1, workers=1, folder=tmp_path)
    assert not panel.workers.disabled
    panel.start().wait(timeout=120)
    assert panel.status.value == "done" and panel.progress.value == 1
    pool = panel.sweep.executor
    assert type(pool).__module__.startswith("joblib.externals.loky")
    with pytest.raises(RuntimeError, match="shutdown"):  # the panel's own pool is shut down when the sweep ends
        pool.submit(print)

"""One background-run handle for every panel that trains: its pause, stop, failure and interrupt,
and the run and sweep panels handing back that one handle."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from composer_lab.algorithms import CutOut, MixUp
from composer_lab.lab import BackgroundRun, RunPanel, SweepPanel
from conftest import make_trainer
from tests.explore.factories import make_trainer as make_sweep_trainer


class Steps:
    """Work of ``n`` steps, each ending at the handle's boundary; what the boundaries noted."""

    def __init__(self, n: int, fail_at: int = -1) -> None:
        self.n, self.fail_at, self.done, self.notes = n, fail_at, 0, []
        self.while_paused = 0

    def __call__(self, handle: BackgroundRun) -> None:
        for step in range(self.n):
            if step == self.fail_at:
                raise RuntimeError(f"failed at step {step}")
            self.done += 1
            handle.boundary(while_paused=self._paused, note=self.notes.append)

    def _paused(self) -> None:
        self.while_paused += 1


def test_work_pauses_at_a_boundary_resumes_and_stops_without_a_failure():
    work = Steps(10**9)
    handle = BackgroundRun(work)
    handle.pause()
    handle.start()
    assert handle.wait_paused(timeout=30) and handle.paused and work.done == 1
    handle.resume()
    while work.done < 3:  # (going on again)
        time.sleep(0.001)
    handle.pause()
    assert handle.wait_paused(timeout=30)
    handle.stop()
    handle.wait(timeout=30)
    assert handle.done and handle.stopped and not handle.interrupted and handle.error is None
    assert work.notes[:2] == ["paused", "resumed"] and work.notes[-2:] == ["paused", "stopped"]
    assert work.done < 10**9 and work.while_paused >= 2, "changes are applied while paused"


def test_a_failure_in_the_thread_is_raised_by_wait_and_by_await_and_on_done_runs_first():
    ended = []
    handle = BackgroundRun(Steps(5, fail_at=2), on_done=lambda: ended.append(True)).start()
    with pytest.raises(RuntimeError, match="failed at step 2"):
        handle.wait(timeout=30)
    assert ended == [True] and not handle.stopped

    async def cell():
        await handle

    with pytest.raises(RuntimeError, match="failed at step 2"):
        asyncio.run(cell())


def test_a_refusal_set_by_the_work_is_raised_by_wait():
    def refuse(handle: BackgroundRun) -> None:
        handle.refused = ValueError("busy elsewhere")

    handle = BackgroundRun(refuse).start()
    with pytest.raises(ValueError, match="busy elsewhere"):
        handle.wait(timeout=30)
    assert handle.error is None


def test_wait_with_a_timeout_says_the_work_still_goes():
    handle = BackgroundRun(Steps(10_000))
    handle.pause()
    handle.start()
    with pytest.raises(TimeoutError, match="still going after 0.05 s; wait longer or call stop()"):
        handle.wait(timeout=0.05)
    handle.stop()
    handle.wait(timeout=30)


def test_the_kernel_interrupt_stops_the_work_and_is_noted_as_one():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as an idle kernel
    try:
        work = Steps(10_000)
        handle = BackgroundRun(work)
        handle.pause()
        handle.start()
        assert handle.wait_paused(timeout=30)
        os.kill(os.getpid(), signal.SIGINT)
        handle.wait(timeout=30)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert handle.interrupted and handle.stopped and work.notes[-1] == "interrupted (kernel interrupt)"


def test_the_run_panel_and_the_sweep_panel_hand_back_the_one_handle(tmp_path):
    run = RunPanel(make_trainer([], max_duration="3ba")).start()
    run.wait(timeout=60)
    sweep = SweepPanel(make_sweep_trainer, [CutOut(), MixUp()], seeds=1, folder=tmp_path,
                       executor=ThreadPoolExecutor(1)).start()
    sweep.wait(timeout=120)
    assert type(run) is BackgroundRun and type(sweep) is BackgroundRun
    assert not run.stopped and not sweep.stopped


def test_the_kernel_interrupt_stops_a_sweep_as_its_stop_button_does(tmp_path):
    gate = threading.Event()

    def held(algorithms, seed):  # the first run waits until the interrupt came
        gate.wait(30)
        return make_sweep_trainer(algorithms, seed)

    panel = SweepPanel(held, [CutOut(), MixUp()], seeds=3, folder=tmp_path, executor=ThreadPoolExecutor(1))
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        handle = panel.start()
        os.kill(os.getpid(), signal.SIGINT)
        gate.set()
        handle.wait(timeout=120)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert handle.interrupted and len(panel.sweep.results) < 6
    assert panel.status.value.startswith("stopped: ") and panel.status.value.endswith("(start again to resume)")

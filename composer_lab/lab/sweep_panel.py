"""The sweep panel: choose algorithms, seeds and workers, run a :class:`~composer_lab.explore.Sweep`
(or race it, with a delta) in the background, and watch the ranking or the verdicts fill in as
runs finish.

The sweep runs in a daemon thread (so the Stop button's click reaches the kernel); each
finished run moves the progress bar (``k / n`` beside it) and redraws the table and plot, by
assigning widget values only. Stop cancels every run not yet training (a sweep hands a worker
one run at a time); the runs training finish and are shown, and all are saved in the sweep
folder: start again to resume. Await the handle in a notebook (``await panel.start()``);
``handle.wait()`` blocks, for scripts and tests.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional, Sequence, Union

import ipywidgets as widgets

from composer_lab.core.algorithm import Algorithm
from composer_lab.explore import Sweep, algorithm_names, local_pool
from composer_lab.explore.executors import default_workers
from composer_lab.explore.sweep import DEFAULT_METRIC
from composer_lab.lab.background_run import BackgroundRun
from composer_lab.lab.plots import figure_png

__all__ = ["SweepPanel", "SweepWork", "on_executor", "GridPanel"]


class GridPanel(widgets.VBox):
    """What a panel training a grid of runs in the background (a sweep, a frontier) shares: its
    workers box, Run and Stop buttons, progress bar, status, table and plot, and the
    :class:`BackgroundRun` handle of its work, all named after ``what`` the grid is. Subclasses give
    ``start()``, ``_finished()`` (the handle's ``on_done``) and ``_show()`` (the results so far)."""

    what: ClassVar[str]

    def _controls(self, workers: Optional[int], executor: Any) -> None:
        """The workers box (disabled with an ``executor``) and the Run / Stop controls, wired."""
        self.workers = widgets.BoundedIntText(value=workers or default_workers(), min=1, max=512,
                                              description="workers", disabled=executor is not None)
        self.run_button = widgets.Button(description=f"Run {self.what}", button_style="success", icon="play")
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop", disabled=True)
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="runs")
        self.status, self.table, self.image = widgets.HTML(), widgets.HTML(), widgets.Image(format="png")
        self.handle: Optional[BackgroundRun] = None
        self.run_button.on_click(lambda _: self.start())
        self.stop_button.on_click(lambda _: self.stop())

    def _check_idle(self) -> None:
        """RuntimeError while the panel's work runs: one at a time."""
        if self.handle is not None and not self.handle.done:
            raise RuntimeError(f"a {self.what} is running; stop it (or wait for it) before starting another")

    def _prepare(self, work: "SweepWork", runs: int) -> None:
        """The handle of ``work`` (not started), ending in ``_finished``; the progress bar out of ``runs``."""
        self.handle = BackgroundRun(work, name=f"composer_lab-{self.what}", on_done=self._finished)
        self.progress.max = runs

    def _launch(self) -> BackgroundRun:
        """Start the prepared handle, the Run button off and Stop on, after showing what there is."""
        self.run_button.disabled, self.stop_button.disabled = True, False
        self._show()
        return self.handle.start()

    def stop(self) -> None:
        """Cancel the runs that have not started; keep what finished."""
        if self.handle is not None:
            self.handle.stop()
            self.status.value = "stopping: the runs training finish and are shown; nothing else starts"


class SweepPanel(GridPanel):
    """Widgets around :class:`~composer_lab.explore.Sweep`.

    Args:
        make_trainer: the factory ``(algorithms, seed) -> Trainer``.
        algorithms: the algorithms offered, each with a checkbox (all checked at first).
        seeds: the number of seeds shown at first (racing: the most an order may train).
        workers: local worker processes (default: one per core).
        metric: the metric ranked.
        delta: the race's margin shown at first: orders whose difference from the best is within
            +-delta are equivalent (:meth:`Sweep.race`); the "race" box turns racing on.
        folder: where sweeps go: one subfolder per choice of algorithms, so starting again with
            the same choice resumes (None: a new temporary folder).
        executor: train there instead of a local pool (a Dask ``Client``); the workers box is then ignored.
    """

    what = "sweep"

    def __init__(self, make_trainer: Callable[[list, int], Any], algorithms: Sequence[Algorithm], seeds: int = 5,
                 workers: Optional[int] = None, metric: str = DEFAULT_METRIC,
                 folder: Union[str, Path, None] = None, executor: Any = None, delta: float = 0.005) -> None:
        self.make_trainer, self.algorithms = make_trainer, list(algorithms)
        self.metric, self.executor = metric, executor
        self.folder = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="sweeps-"))
        self.checks = [widgets.Checkbox(value=True, description=name, indent=False)
                       for name in algorithm_names(self.algorithms)]
        self.seeds = widgets.BoundedIntText(value=seeds, min=1, max=1000, description="seeds")
        self.race = widgets.Checkbox(value=False, description="race", indent=False)
        self.delta = widgets.BoundedFloatText(value=delta, min=1e-9, max=1e9, step=0.001, description="delta")
        self._controls(workers, executor)
        self.count = widgets.Label()
        self.sweep: Optional[Sweep] = None
        super().__init__([widgets.HBox(self.checks), widgets.HBox([self.seeds, self.workers]),
                          widgets.HBox([self.race, self.delta]),
                          widgets.HBox([self.run_button, self.stop_button, self.progress, self.count]), self.status,
                          self.table, self.image])

    def chosen(self) -> list[Algorithm]:
        """The checked algorithms, in the order given."""
        return [a for a, check in zip(self.algorithms, self.checks) if check.value]

    def start(self) -> BackgroundRun:
        """Sweep (with "race" checked: race) the checked algorithms over the seeds, in the background."""
        self._check_idle()
        algorithms = self.chosen()
        self.sweep, shutdown = on_executor(self.executor, self.workers.value, lambda executor: Sweep(
            self.make_trainer, algorithms, seeds=range(self.seeds.value), metric=self.metric, executor=executor,
            folder=self.folder / _slug(algorithms)))
        racing = self.race.value
        work = SweepWork(self.sweep, self._on_result, shutdown, self.delta.value if racing else None)
        self._prepare(work, len(self.sweep.trials()))
        self._count()
        self.status.value = (f"{len(self.sweep.orders)} orders x {'at most ' if racing else ''}{self.seeds.value} seeds"
                             f"{f', racing within delta={self.delta.value:g}' if racing else ''} in "
                             f"{self.sweep.folder.path}")
        return self._launch()

    # -- called in the sweep's thread --------------------------------------------------------
    def _on_result(self, row: dict) -> None:
        self._count()
        self._show()

    def _count(self) -> None:
        """Progress: the runs saved in the folder, ``k / n`` beside the bar (a race: at most n)."""
        self.progress.value = self.progress.max - len(self.sweep.pending())
        self.count.value = f"{self.progress.value} / {'at most ' if self._racing else ''}{self.progress.max}"

    def _finished(self) -> None:
        handle = self.handle
        error = handle.error if handle is not None else None
        self._count()
        self._show()
        left = self.progress.max - self.progress.value
        over = "the race is not over" if self._racing else f"{left} runs not trained"
        self.status.value = (f"failed: {error}" if error is not None else
                             f"stopped: {over} (start again to resume)" if handle is not None and handle.stopped
                             else "done")
        self.run_button.disabled, self.stop_button.disabled = False, True

    @property
    def _racing(self) -> bool:
        return self.handle is not None and self.handle.work.delta is not None

    def _show(self) -> None:
        """The ranking so far (racing: the decision, verdicts and answer), as a table and a plot
        (nothing before the first result)."""
        if self.sweep is None or self.sweep.results.empty:
            return
        if self._racing:
            self.table.value = self.sweep.racer(self.handle.work.delta).decision()._repr_html_()
        else:
            self.table.value = self.sweep.ranking().to_html(index=False, float_format=lambda x: f"{x:.4f}", na_rep="")
        self.image.value = figure_png(self.sweep.plot())


def on_executor(executor: Any, workers: int, build: Callable[[Any], Any]) -> tuple[Any, Optional[Callable]]:
    """``build(executor)`` on the panel's ``executor`` or, when None, on a new local pool of
    ``workers``; returns what was built and the pool's ``shutdown`` (None for the panel's own
    executor). A pool whose build fails is shut down before the error propagates."""
    pool = executor if executor is not None else local_pool(workers)
    shutdown = pool.shutdown if executor is None else None
    try:
        return build(pool), shutdown
    except BaseException:
        if shutdown is not None:
            shutdown()
        raise


class SweepWork:
    """A sweep or a frontier (or with a ``delta``, a sweep's race) as a :class:`BackgroundRun`'s work: it stops when
    the handle asks (the runs not yet training are cancelled), and ``shutdown()`` (the local
    pool's) runs however it ends."""

    def __init__(self, sweep: Sweep, on_result: Callable[[dict], None], shutdown: Optional[Callable[[], None]],
                 delta: Optional[float]) -> None:
        self.sweep, self.on_result, self.shutdown, self.delta = sweep, on_result, shutdown, delta

    def __call__(self, handle: BackgroundRun) -> None:
        try:
            if self.delta is None:
                self.sweep.run(on_result=self.on_result, stop=handle.stop_requested)
            else:
                self.sweep.race(self.delta, on_result=self.on_result, stop=handle.stop_requested)
        finally:
            if self.shutdown is not None:
                self.shutdown()


def _slug(algorithms: Sequence[Algorithm]) -> str:
    """A folder name for a choice of algorithms."""
    return re.sub(r"[^A-Za-z0-9_-]", "", "_".join(algorithm_names(algorithms)).replace("#", "-")) or "none"

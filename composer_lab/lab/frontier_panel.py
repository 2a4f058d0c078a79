"""The frontier panel: tick candidates, run a :class:`~composer_lab.explore.Frontier` in the
background (every run of the grid, or with *race* ticked, :meth:`Frontier.race`: each candidate
stops training once its verdict is reached), and watch the quality-against-cost plot and the
verdicts fill in as runs finish.

It drives the frontier as a :class:`~composer_lab.lab.background_run.BackgroundRun`
(a daemon thread, Stop cancels every run not yet training, what finished stays in the folder:
start again to resume). One subfolder per choice of candidates, as a frontier folder belongs to
one experiment.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import ipywidgets as widgets

from composer_lab.explore import Frontier
from composer_lab.explore.frontier_race import FrontierRace
from composer_lab.explore.speedup import answer
from composer_lab.explore.sweep import DEFAULT_METRIC
from composer_lab.lab.plots import figure_png
from composer_lab.lab.background_run import BackgroundRun
from composer_lab.lab.sweep_panel import GridPanel, SweepWork, on_executor

__all__ = ["FrontierPanel", "MIN_SEEDS"]

MIN_SEEDS = 3
"""The seeds every candidate trains before a race's first look."""
TOLERANCE = 0.05
"""The smallest saving that matters (as :meth:`Frontier.speedups`' default)."""


class FrontierPanel(GridPanel):
    """Widgets around :class:`~composer_lab.explore.Frontier`: ``candidates`` each with a checkbox
    (all ticked; the baseline always runs), ``durations``, ``seeds``, ``cost`` and ``metric`` as for
    the Frontier; ``workers`` local processes, or ``executor`` (a Dask ``Client``, an
    ``InlineExecutor``); ``folder``: where frontiers go (None: a new temporary folder); ``race``:
    race instead of training the whole grid (a checkbox), at level ``alpha``, with ``seeds`` the
    most seeds a candidate trains (at least :data:`MIN_SEEDS`)."""

    what = "frontier"

    def __init__(self, make_trainer: Callable[[list, int, str], Any], candidates: dict, durations: Sequence[str],
                 seeds: int = 3, cost: str = "time", metric: str = DEFAULT_METRIC, workers: Optional[int] = None,
                 folder: Union[str, Path, None] = None, executor: Any = None, baseline: str = "baseline",
                 race: bool = False, alpha: float = 0.05) -> None:
        self.make_trainer, self.candidates, self.durations = make_trainer, dict(candidates), list(durations)
        self.metric, self.cost, self.executor, self.baseline = metric, cost, executor, baseline
        self.folder = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="frontiers-"))
        self.checks = {name: widgets.Checkbox(value=True, description=name, indent=False, disabled=name == baseline)
                       for name in self.candidates}
        self.seeds = widgets.BoundedIntText(value=seeds, min=2, max=1000, description="seeds")
        self.race = widgets.Checkbox(value=race, description="race (stop what is decided)", indent=False)
        self.alpha = widgets.BoundedFloatText(value=alpha, min=0.001, max=0.5, step=0.01, description="alpha")
        self._controls(workers, executor)
        self.frontier: Optional[Frontier] = None
        self.racer: Optional[FrontierRace] = None  # the race's verdicts, replayed from the folder
        super().__init__([widgets.HBox(list(self.checks.values())),
                          widgets.HBox([self.seeds, self.workers, self.race, self.alpha]),
                          widgets.HBox([self.run_button, self.stop_button, self.progress]), self.status, self.table,
                          self.image])

    def chosen(self) -> dict:
        """The ticked candidates (the baseline always)."""
        return {name: algorithms for name, algorithms in self.candidates.items() if self.checks[name].value}

    def start(self) -> BackgroundRun:
        """Train the ticked candidates' pending runs (or race them) in the background."""
        self._check_idle()
        chosen = self.chosen()
        self.frontier, shutdown = on_executor(self.executor, self.workers.value, lambda executor: Frontier(
            self.make_trainer, chosen, self.durations, seeds=range(self.seeds.value),
            folder=self.folder / _slug(chosen), metric=self.metric, cost=self.cost, executor=executor,
            baseline=self.baseline))
        try:
            self.racer = FrontierRace(self.frontier, self.alpha.value, MIN_SEEDS, self.durations[-2], TOLERANCE) \
                if self.race.value else None
        except BaseException:
            if shutdown is not None:
                shutdown()
            raise
        alpha = self.alpha.value if self.racer is not None else None  # (SweepWork races with its first argument)
        work = SweepWork(self.frontier, lambda row: self._show(), shutdown, alpha)
        self._prepare(work, len(self.frontier.trials()))
        self.status.value = f"{self.frontier.describe().splitlines()[0]} in {self.frontier.folder.path}"
        return self._launch()

    def _finished(self) -> None:
        handle = self.handle
        self._show()
        self.status.value = (f"failed: {handle.error}" if handle is not None and handle.error is not None else
                             "stopped (start again to resume)" if handle is not None and handle.stopped else
                             f"done: {self._answer()}")
        self.run_button.disabled, self.stop_button.disabled = False, True

    def _show(self) -> None:
        """Progress, the verdicts (once every candidate has every duration) and the plot."""
        frontier = self.frontier
        if frontier is None:
            return
        self.progress.value = self.progress.max - len(frontier.pending())
        if frontier.results().empty:
            return
        try:
            self.table.value = self._verdicts().to_html(index=False, float_format=lambda x: f"{x:.3g}", na_rep="")
        except ValueError as err:  # not every candidate has a seed at every duration yet
            self.table.value = f"<p>{err}</p>"
        self.image.value = figure_png(frontier.plot())

    def _verdicts(self) -> Any:
        """The race's verdicts so far (decided candidates at the look that decided them), or the
        speed-up table of every finished run."""
        return self.racer.table() if self.racer is not None else self.frontier.speedups()

    def _answer(self) -> str:
        """The sentence; a race also names how many of the grid's runs it trained."""
        if self.racer is None:
            return self.frontier.answer
        table = self.racer.table()
        return (f"the race trained {len(self.frontier.results())} of the grid's {len(self.frontier.trials())} runs; "
                f"{answer(table, self.frontier.metric, self.frontier.higher_is_better)}")


def _slug(candidates: dict) -> str:
    """A folder name for a choice of candidates."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", "_".join(candidates))[:120] or "none"

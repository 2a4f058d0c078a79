"""The lab: widgets to switch algorithms and reorder passes live, and plots of runs.

``Lab(trainer)`` shows every panel; the ``plot_*`` functions take a trainer, a Run, a saved
run folder or trace / metrics DataFrames and return a matplotlib Figure.
"""

from composer_lab.lab.algorithms_panel import AlgorithmPanel
from composer_lab.lab.conflicts import ConflictView, find_conflicts
from composer_lab.lab.control import Control
from composer_lab.lab.frontier_panel import FrontierPanel
from composer_lab.explore.diff import diff_runs
from composer_lab.lab.lab import Lab
from composer_lab.lab.order_preview import OrderPreview, preview_orders
from composer_lab.lab.pass_editor import PassEditor
from composer_lab.lab.plots import (plot_algorithm_events, plot_keep_ratio, plot_loss, plot_runs,
                                    plot_timeline)
from composer_lab.lab.background_run import BackgroundRun
from composer_lab.lab.run_panel import RunPanel
from composer_lab.explore.sources import RunData, run_data
from composer_lab.lab.sweep_panel import SweepPanel

__all__ = [
    "Lab", "Control", "AlgorithmPanel", "PassEditor", "OrderPreview", "RunPanel", "BackgroundRun", "ConflictView",
    "find_conflicts", "preview_orders", "diff_runs", "plot_loss", "plot_keep_ratio", "plot_timeline",
    "plot_algorithm_events", "plot_runs", "RunData", "run_data",
    "SweepPanel", "FrontierPanel",
]

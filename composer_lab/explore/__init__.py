"""The explorer: does the order of the algorithms matter, where, and by how much?

- :func:`orderings`: the distinct effective orders of a list of algorithms under the passes;
- :func:`commutation`: which pairs commute at which events, checked on copies of a real State
  (:func:`plot_commutation` draws the table); ``orderings(..., commutation=table)`` then merges
  the orders that differ only by commuting neighbours;
- :class:`Sweep`: every order x every seed, through any ``concurrent.futures``-style executor
  (a local process pool by default, a Dask ``Client`` on a cluster), ranked with confidence
  intervals and paired differences; runs saved as they end, resumable;
- :func:`diff_runs`: which calls moved, appeared or vanished between two runs' traces;
- :func:`rank_orders` / :func:`plot_ranking`: a ranking of orders from any results frame (what
  :meth:`Sweep.ranking` returns), :func:`precedence`: which pairs' relative order matters, and
  :mod:`~composer_lab.explore.stats`: the paired tests, TOST, Holm, Friedman and seeds_needed
  behind them;
- :class:`Frontier`: candidates (:func:`compositions`, :func:`ablations`) x durations x seeds
  against the baseline's time-quality curve: the cost to reach its quality, the speed-up with its
  interval and a verdict, a race that stops what is decided, :func:`plot_frontier`.
"""

from composer_lab.explore import stats
from composer_lab.explore.commutation import commutation, plot_commutation
from composer_lab.explore.diff import diff_runs
from composer_lab.explore.candidates import ablations, compositions
from composer_lab.explore.executors import InlineExecutor, local_pool
from composer_lab.explore.frontier import Frontier
from composer_lab.explore.frontier_plot import plot_frontier
from composer_lab.explore.orderings import algorithm_names, order_label, orderings, out_of_question, run_label
from composer_lab.explore.precedence import precedence
from composer_lab.explore.ranking import plot_ranking, rank_orders
from composer_lab.explore.results import SweepFolderTaken
from composer_lab.explore.sweep import Sweep

__all__ = ["orderings", "algorithm_names", "order_label", "run_label", "out_of_question", "commutation",
           "plot_commutation", "Sweep", "local_pool", "InlineExecutor",
           "diff_runs", "rank_orders", "plot_ranking", "precedence", "stats", "SweepFolderTaken",
           "Frontier", "compositions", "ablations", "plot_frontier"]

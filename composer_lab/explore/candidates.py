"""The candidates a frontier compares: named compositions of algorithms, given or generated.

A candidate is a name and a list of algorithms (``{"baseline": [], "sb+ls": [SelectiveBackprop(),
LabelSmoothing(0.1)]}``). :func:`compositions` generates every subset of some algorithms up to a
size, :func:`ablations` a composition with each of its algorithms left out in turn (which one
carries the gain). Generated candidates are named after what they hold, in the order the engine
runs them (its passes put Selective Backprop first, say), and each holds its own copies.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any, Mapping, Optional, Sequence

from composer_lab.core.algorithm import Algorithm
from composer_lab.explore.orderings import algorithm_names, check_algorithms, question

__all__ = ["compositions", "ablations", "check_candidates", "BASELINE", "candidate_name"]

BASELINE = "baseline"
"""The name of the candidate without algorithms that :func:`compositions` and :func:`ablations` add."""


def candidate_name(algorithms: Sequence[Algorithm]) -> str:
    """A composition's name: its algorithms' names joined by ' + ' ('baseline' for none)."""
    return " + ".join(algorithm_names(algorithms)) if algorithms else BASELINE


def compositions(algorithms: Sequence[Algorithm], max_size: Optional[int] = None,
                 baseline: bool = True) -> dict[str, list[Algorithm]]:
    """Every subset of ``algorithms`` of 1 to ``max_size`` algorithms (default: all of them),
    smallest first, each as fresh copies in the order the engine runs them; with ``baseline``,
    the empty one first, named 'baseline'."""
    algorithms = check_algorithms(algorithms)
    if not algorithms:
        raise ValueError("compositions() needs at least one algorithm, e.g. compositions([SelectiveBackprop(), "
                         "LabelSmoothing(0.1)])")
    size = len(algorithms) if max_size is None else max_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"max_size must be a positive int, the most algorithms in one composition, got {max_size!r}; "
                         f"e.g. max_size=2 for every single algorithm and pair")
    subsets = [list(subset) for k in range(1, min(size, len(algorithms)) + 1)
               for subset in itertools.combinations(algorithms, k)]
    return _named(([[]] if baseline else []) + subsets)


def ablations(composition: Any, baseline: bool = True) -> dict[str, list[Algorithm]]:
    """``composition`` (a list of algorithms, or one ``{name: list}`` entry) and each of its
    leave-one-out subsets, as fresh copies (with ``baseline``, the empty one too): a frontier of
    these says which algorithm carries the gain."""
    if isinstance(composition, Mapping):
        if len(composition) != 1:
            raise ValueError(f"ablations() takes one composition, got {len(composition)}: pass a list of algorithms "
                             f"or a dict of one entry, e.g. ablations([SelectiveBackprop(), LabelSmoothing(0.1)])")
        composition = next(iter(composition.values()))
    algorithms = check_algorithms(composition)
    if len(algorithms) < 2:
        raise ValueError(f"ablations() leaves each algorithm out in turn, so the composition needs 2 or more, got "
                         f"{len(algorithms)}; e.g. ablations([SelectiveBackprop(), LabelSmoothing(0.1)])")
    left_out = [[a for a in algorithms if a is not out] for out in algorithms]
    return _named(([[]] if baseline else []) + [algorithms] + left_out)


def _named(subsets: list[list[Algorithm]]) -> dict[str, list[Algorithm]]:
    """Each subset copied, in the engine's order, under its name."""
    named = {}
    for subset in subsets:
        fresh = copy.deepcopy(subset)
        if len(fresh) > 1:
            fresh = [fresh[i] for i in _run_order(fresh)]
        named[candidate_name(fresh)] = fresh
    return named


def _run_order(algorithms: list[Algorithm]) -> tuple[int, ...]:
    """The positions of ``algorithms`` in the order the default passes run them at their first
    shared event (the list order where none is shared)."""
    asked = question(algorithms)
    plans = asked.plans(tuple(range(len(algorithms))))
    names = algorithm_names(algorithms)
    first = [name for plan in plans.values() for name in plan]
    ranked = list(dict.fromkeys(first + names))
    return tuple(sorted(range(len(algorithms)), key=lambda i: ranked.index(names[i])))


def check_candidates(candidates: Any) -> dict[str, list[Algorithm]]:
    """``candidates`` as a dict of names to lists of distinct Algorithm instances, else a
    TypeError / ValueError naming the fix."""
    if not isinstance(candidates, Mapping) or not candidates:
        raise TypeError(f"candidates must be a dict of names to lists of algorithms, e.g. {{'baseline': [], "
                        f"'sb+ls': [SelectiveBackprop(), LabelSmoothing(0.1)]}}, or compositions(...); got "
                        f"{type(candidates).__name__} {candidates!r}")
    checked = {}
    for name, algorithms in candidates.items():
        if not isinstance(name, str) or not name.strip():
            raise TypeError(f"each candidate's name must be a non-empty str, got {name!r}")
        checked[name] = check_algorithms(algorithms)
    everything = [a for algorithms in checked.values() for a in algorithms]
    if len({id(a) for a in everything}) != len(everything):
        raise ValueError("two candidates share an algorithm instance; an instance keeps the state of its run, so give "
                         "each candidate its own, e.g. {'sb': [SelectiveBackprop()], 'sb+ls': [SelectiveBackprop(), "
                         "LabelSmoothing(0.1)]}")
    return checked

"""A sweep's orders and seeds: which orders it trains (every distinct one, a sample, a table or
positions), each named by what runs, refused when there is nothing to compare; and its trials' keys."""

from __future__ import annotations

import math
import warnings
from typing import Any, Iterable, NamedTuple, Optional, Sequence

import numpy as np
import pandas as pd

from composer_lab.core.algorithm import Algorithm
from composer_lab.explore.orderings import MAX_ALGORITHMS, order_label, orderings, question

__all__ = ["SweepOrder", "sweep_orders", "check_seeds", "trial_key", "SAMPLED_ORDERS"]

SAMPLED_ORDERS = 64
"""How many permutations a sweep of more than 8 algorithms draws when not told (orders=N)."""


def check_seeds(seeds: Any) -> list[int]:
    if isinstance(seeds, (int, str)) or not isinstance(seeds, Iterable):
        raise TypeError(f"seeds must be a list of seeds, e.g. range(5), got {type(seeds).__name__} {seeds!r}")
    seeds = list(seeds)
    if not seeds:
        raise ValueError("no seeds: a sweep trains every order once per seed; give at least one, e.g. seeds=range(5) "
                         "(5 or more to tell order effects from seed noise)")
    bad = [s for s in seeds if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0]
    if bad or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct non-negative ints, got {seeds!r}; e.g. seeds=range(5)")
    return [int(s) for s in seeds]


class SweepOrder(NamedTuple):
    """One order of a sweep: ``label`` (what runs, :func:`~composer_lab.explore.orderings.run_label`),
    ``list_order`` (the list that runs so, as text) and ``positions`` (that list, as indices)."""

    label: str
    list_order: str
    positions: tuple[int, ...]


def sweep_orders(orders: Any, algorithms: list[Algorithm],
                 names: list[str]) -> tuple[list[SweepOrder], pd.DataFrame, list[str]]:
    """The orders to train, the algorithms out of the question and the names of the passes the
    labels assume (each trial checks its trainer runs them); refused when there is nothing to
    compare (one order only) or two orders run alike."""
    if orders is None or isinstance(orders, int) and not isinstance(orders, bool):
        orders = _every_or_sampled(algorithms, orders)
    if isinstance(orders, pd.DataFrame):
        result, out, single, merged, passes = _from_table(orders, len(algorithms))
    else:
        asked = question(algorithms)
        result = [SweepOrder(asked.label(p), order_label([names[i] for i in p]), p)
                  for p in (_positions(order, len(algorithms)) for order in orders)]
        out, single, merged, passes = asked.out, not asked.free, False, asked.passes
    if single:
        raise ValueError(_one_order_message(names, out, merged))
    if not result:
        raise ValueError("orders is empty; give at least one order, or None for every distinct order")
    _check_distinct(result)
    return result, out, passes


def _from_table(orders: pd.DataFrame, n: int) -> tuple[list[SweepOrder], pd.DataFrame, bool, bool, list[str]]:
    """An :func:`orderings` table's orders, its algorithms out of the question, whether it holds one
    order only, whether the commutation merged free events into one, and its passes."""
    out = orders.attrs.get("out_of_question", pd.DataFrame(columns=["algorithm", "reason"]))
    every = len(orders) == 1 and int(orders["n_permutations"].iloc[0]) == math.factorial(n)
    single = every or orders.attrs.get("free_events") == []  # (a sample of orders: no event left free)
    merged = bool(orders.attrs.get("free_events"))  # free events, yet one order: the commutation merged them
    return _table_orders(orders, n), out, single, merged, list(orders.attrs.get("passes", []))


def _check_distinct(orders: list[SweepOrder]) -> None:
    """A ValueError when two orders run alike (one label)."""
    seen: dict[str, SweepOrder] = {}
    for order in orders:
        if order.label in seen:
            raise ValueError(f"the orders {seen[order.label].positions} and {order.positions} run alike "
                             f"({order.label}); give each order once: orderings(algorithms) lists one of each kind")
        seen[order.label] = order


def _every_or_sampled(algorithms: list[Algorithm], count: Optional[int]) -> pd.DataFrame:
    """Every distinct order; or ``count`` permutations drawn at random, by default
    :data:`SAMPLED_ORDERS` of them past :data:`MAX_ALGORITHMS` algorithms (said in a warning)."""
    if count is None and len(algorithms) <= MAX_ALGORITHMS:
        return orderings(algorithms)
    if count is None:
        count = SAMPLED_ORDERS
        warnings.warn(f"{len(algorithms)} algorithms have {math.factorial(len(algorithms)):,} orders: this sweep "
                      f"trains {count} permutations drawn at random (those that run alike count once); pass "
                      f"orders=N to choose how many, and read sweep.precedence() for which pairs' order matters",
                      stacklevel=4)
    return orderings(algorithms, max_orders=count)


def _table_orders(table: pd.DataFrame, n: int) -> list[SweepOrder]:
    """The orders of an :func:`orderings` table."""
    missing = {"order", "list_order", "positions"} - set(table.columns)
    if missing:
        raise TypeError(f"orders as a table must be one orderings() returns (columns order, list_order, positions, "
                        f"...), this one lacks {sorted(missing)}; or give a list of positions, e.g. [(1, 0)]")
    return [SweepOrder(label, list_order, _positions(positions, n))
            for label, list_order, positions in zip(table["order"], table["list_order"], table["positions"])]


def _positions(order: Any, n: int) -> tuple[int, ...]:
    positions = tuple(order) if isinstance(order, (list, tuple)) else None
    if positions is None or sorted(positions) != list(range(n)):
        raise ValueError(f"each order lists the positions of all {n} algorithms once, e.g. "
                         f"{tuple(range(n))[::-1]}; got {order!r}")
    return tuple(int(i) for i in positions)


def _one_order_message(names: list[str], out: pd.DataFrame, merged: bool) -> str:
    """Why algorithms that run in one order only leave nothing to compare, and how to free it."""
    why = ("the commutation table found that the algorithms that meet commute, so orderings() merged every order "
           "into one" if merged else "; ".join(f"{name} {reason}" for name, reason in out.values))
    return (f"{', '.join(names)} run in one order only, whatever the list, so a sweep has nothing to compare: {why}. "
            f"To free the order, give the factory's trainer passes without the pin and the sweep "
            f"orders=orderings(algorithms, passes=those passes) (e.g. the engine's passes less "
            f"sort_selective_backprop_first), or sweep algorithms that meet at an event (e.g. CutOut and MixUp, "
            f"both at after_dataloader)")


def trial_key(positions: Sequence[int], seed: int) -> str:
    """A file name for a trial, one per (list order, seed): 'o2-0-1__seed3'."""
    return f"o{'-'.join(map(str, positions))}__seed{seed}"

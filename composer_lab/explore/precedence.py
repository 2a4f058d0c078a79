"""Which pairs' relative order matters: the metric fitted on pair precedences.

Past a few algorithms a sweep cannot train every order, and an order's own mean over a few seeds
says little. But an order is a set of pairwise precedences ("A runs before B at an event they
share"), and most order effects are effects of one pair. :func:`precedence` fits, by least
squares over every finished run,

    metric = sum over pairs of effect[pair] * [first runs before second] + effect[seed]

(one indicator per pair, a fixed effect per seed, since a seed's runs move together), and reports
each pair's effect with its t-interval: the change of the metric when ``first`` runs before
``second``, the other pairs held. Sampled orders estimate every pair at once; pairs the sampled
orders cannot tell apart are said to be confounded, not given a number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from composer_lab.explore.stats import holm

__all__ = ["precedence", "PRECEDENCE_COLUMNS"]

PRECEDENCE_COLUMNS = ["first", "second", "events", "effect", "ci_low", "ci_high", "p_value", "p_adjusted", "note"]
"""A pair, the events where its order is read ('(reversed)': there ``second`` runs first when the
indicator is 1), the effect of ``first`` running before ``second`` with its interval and p-value
(raw and Holm-adjusted over the pairs estimated), and why a pair has no estimate."""

_TOLERANCE = 1e-9


@dataclass(eq=False)
class _Term:
    """One indicator: ``first`` before ``second`` at ``events[0]``, per order."""

    first: str
    second: str
    events: list[str]
    values: pd.Series


def precedence(results: pd.DataFrame, plans: Mapping[str, Mapping[str, Sequence[str]]], metric: str,
               names: Optional[Sequence[str]] = None, confidence: float = 0.95, alpha: float = 0.05) -> pd.DataFrame:
    """Each pair's precedence effect on ``metric``, fitted over ``results`` (columns ``order``,
    ``seed``, ``metric``) with seed fixed effects (:data:`PRECEDENCE_COLUMNS`, smallest p first).

    ``plans`` maps each order to what it runs: ``{event: [names in run order]}`` at the events
    where the order is free (:meth:`~composer_lab.explore.orderings.Question.plans`). ``names``
    orients each pair (``first`` is the earlier in ``names``; default: as they appear). A pair
    run in one order by every order swept, or whose indicator the others' determine in the
    orders swept (confounded), has no effect; its ``note`` says which. ``attrs``: ``orders``,
    ``runs``, ``dof`` (residual degrees of freedom) and ``summary``, one line naming the pairs
    whose effect is told from 0 at ``alpha`` (Holm-adjusted)."""
    data = _checked(results, plans, metric)
    terms = _terms({order: plans[order] for order in dict.fromkeys(data["order"])}, names)
    varying = [t for t in terms if t.values.nunique() > 1]
    x = np.column_stack([[t.values[o] for o in data["order"]] for t in varying] +
                        [(data["seed"] == s).to_numpy(float) for s in sorted(set(data["seed"]))])
    estimates, dof = _least_squares(x, data[metric].to_numpy(float), len(varying), confidence)
    rows = [_row(term, varying, estimates) for term in terms]
    table = pd.DataFrame(rows, columns=PRECEDENCE_COLUMNS)
    table["p_adjusted"] = holm(table["p_value"])
    table = table.sort_values("p_value", kind="stable", na_position="last").reset_index(drop=True)
    table.attrs.update(orders=int(data["order"].nunique()), runs=len(data), dof=dof)
    table.attrs["summary"] = _summary(table, metric, alpha)
    return table


def _checked(results: pd.DataFrame, plans: Mapping[str, Any], metric: str) -> pd.DataFrame:
    """The finished runs of ``results``, refused when an order has no plan or none finished."""
    data = results[["order", "seed", metric]].dropna()
    missing = sorted(set(data["order"]) - set(plans))
    if missing:
        raise ValueError(f"no plan for the orders {missing}: plans must say what each order in results runs, "
                         f"{{event: [names in run order]}} (orderings.question(algorithms).plans(positions)); "
                         f"Sweep.precedence() builds them from the sweep's orders")
    if data.empty:
        raise ValueError(f"no finished run records {metric!r}: train the sweep first (run() or race())")
    return data


def _row(term: _Term, varying: list[_Term], estimates: list[dict]) -> dict:
    """The table's row of ``term``: its estimate, or why it has none."""
    row = {"first": term.first, "second": term.second, "events": "; ".join(term.events)}
    if term not in varying:
        return {**row, **_estimate(note="runs in one order in every order swept")}
    row.update(estimates[varying.index(term)])
    partners = row.pop("confounded")
    if partners:
        others = ", ".join(f"{varying[i].first} before {varying[i].second}" for i in partners)
        row["note"] = f"confounded with {others}: the orders swept cannot tell them apart; sample more orders"
    return row


def _summary(table: pd.DataFrame, metric: str, alpha: float) -> str:
    """One line: the pairs whose order changes the metric, and how many could not be estimated."""
    head = f"{table.attrs['orders']} orders, {table.attrs['runs']} runs"
    if table.empty:
        return f"{head}: no two algorithms meet at an event where their order is free; no pair to estimate"
    found = table[table["p_adjusted"] < alpha]
    effects = "; ".join(f"{row.first} before {row.second}: {row.effect:+.4g} [{row.ci_low:.4g}, {row.ci_high:.4g}]"
                        for row in found.itertuples())
    test = f"Holm-adjusted p < {alpha:g}"
    answer = (f"the order of {len(found)} of {len(table)} pairs changes {metric} ({test}): {effects}" if len(found)
              else f"no pair's order is told to change {metric} ({test})")
    missing = int(table["effect"].isna().sum())
    return f"{head}: {answer}" + (f"; {missing} pairs not estimated (see note)" if missing else "")


def _terms(plans: Mapping[str, Mapping[str, Sequence[str]]], names: Optional[Sequence[str]]) -> list[_Term]:
    """One indicator per pair and pattern: the events where a pair's order moves together (or
    exactly reversed, as FILO reverses after-events) share one indicator."""
    rank = {name: i for i, name in enumerate(names if names is not None else _names_in(plans))}
    terms: dict[tuple[str, str], list[_Term]] = {}
    for event in dict.fromkeys(e for plan in plans.values() for e in plan):
        runs = {o: list(plan.get(event, ())) for o, plan in plans.items()}
        for first, second in _pairs(_shared(runs, rank)):
            _add(terms.setdefault((first, second), []), first, second, event, _before(runs, first, second))
    return [term for pair in terms.values() for term in pair]


def _names_in(plans: Mapping[str, Mapping[str, Sequence[str]]]) -> list[str]:
    """The algorithms the plans name, as they first appear."""
    return list(dict.fromkeys(n for plan in plans.values() for run in plan.values() for n in run))


def _shared(runs: Mapping[str, list[str]], rank: Mapping[str, int]) -> list[str]:
    """The algorithms every order runs at the event, in ``rank``'s order (unranked last)."""
    present = set.intersection(*(set(r) for r in runs.values()))
    return sorted(present, key=lambda n: rank.get(n, len(rank)))


def _before(runs: Mapping[str, list[str]], first: str, second: str) -> pd.Series:
    """Per order: 1.0 where ``first`` runs before ``second``, else 0.0."""
    return pd.Series({o: float(r.index(first) < r.index(second)) for o, r in runs.items()})


def _add(pair: list[_Term], first: str, second: str, event: str, values: pd.Series) -> None:
    """Add ``event`` to the pair's indicator it equals (or reverses), else start a new one."""
    for term in pair:
        if (term.values == values).all():
            term.events.append(event)
            return
        if (term.values == 1 - values).all():
            term.events.append(f"{event} (reversed)")
            return
    pair.append(_Term(first, second, [event], values))


def _pairs(names: list[str]) -> list[tuple[str, str]]:
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]


def _least_squares(x: np.ndarray, y: np.ndarray, k: int, confidence: float) -> tuple[list[dict], int]:
    """Estimates of the first ``k`` coefficients of ``y ~ x`` with their t-intervals, and the
    residual degrees of freedom. A coefficient the design cannot identify (one with weight in
    the null space of ``x``) gets no estimate and lists the coefficients it is confounded with."""
    u, s, vt = np.linalg.svd(x, full_matrices=x.shape[0] < x.shape[1])  # vt square either way: its null rows
    rank = int((s > _TOLERANCE * s[0]).sum())
    null = vt[rank:]
    inverse = vt[:rank].T / s[:rank]
    beta = inverse @ (u[:, :rank].T @ y)
    dof = len(y) - rank
    rss = float(((y - x @ beta) ** 2).sum())
    exact = rss <= (_TOLERANCE * max(1.0, float(np.abs(y).max()))) ** 2 * len(y)
    critical = float(stats.t.ppf(0.5 + confidence / 2, dof)) if dof > 0 else math.nan
    estimates = []
    for j in range(k):
        partners = [i for i in range(k) if i != j and any(abs(v[j]) > 1e-6 and abs(v[i]) > 1e-6 for v in null)]
        identified = not (null.size and np.abs(null[:, j]).max() > 1e-6)
        spread = math.sqrt(rss / dof * float(inverse[j] @ inverse[j])) if dof > 0 and not exact else math.nan
        estimates.append({**_coefficient(float(beta[j]), identified, exact, dof, spread, critical),
                          "confounded": partners})
    return estimates, dof


def _coefficient(effect: float, identified: bool, exact: bool, dof: int, se: float, critical: float) -> dict:
    """One coefficient's estimate: none when the design cannot identify it, exact without
    residual spread, without an interval without residual degrees of freedom, else a t-interval."""
    if not identified:
        return _estimate()
    if exact:
        return _estimate(effect, effect, effect, 0.0 if abs(effect) > _TOLERANCE else 1.0,
                         "exact fit (no residual spread)")
    if dof == 0:
        return _estimate(effect, note="no residual degrees of freedom: train more seeds")
    return _estimate(effect, effect - critical * se, effect + critical * se,
                     float(2 * stats.t.sf(abs(effect) / se, dof)))


def _estimate(effect: float = math.nan, ci_low: float = math.nan, ci_high: float = math.nan,
              p_value: float = math.nan, note: Optional[str] = None) -> dict:
    return {"effect": effect, "ci_low": ci_low, "ci_high": ci_high, "p_value": p_value, "note": note}

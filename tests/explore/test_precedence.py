"""Pair precedence effects recovered from synthetic experiments whose pair effects are set: on
results frames (sampled orders, noise, confounding, pinned pairs), and once through a Sweep."""

from __future__ import annotations

import itertools
import math
from typing import Optional

import numpy as np
import pandas as pd
import pytest
import torch.nn.functional as F
from torch.utils.data import DataLoader

from composer_lab.core import Algorithm, Callback, Event, Logger, State
from composer_lab.explore import InlineExecutor, Sweep
from composer_lab.explore.precedence import PRECEDENCE_COLUMNS, precedence
from composer_lab.models import SmallCNN
from composer_lab.trainer import Trainer
from composer_lab.trainer.rng import seed_all
from tests.explore.factories import images

EFFECTS = {("A", "B"): 0.03, ("C", "D"): -0.02, ("A", "E"): 0.01}
"""The metric's change when the first runs before the second (at e1; A and E at e2 and e3)."""


def plans_of(perm: tuple[str, ...]) -> dict[str, list[str]]:
    """A, B, C, D meet at e1; A and E at e2 and, reversed as FILO reverses after-events, at e3."""
    e2 = [n for n in perm if n in ("A", "E")]
    return {"e1": [n for n in perm if n != "E"], "e2": e2, "e3": e2[::-1]}


def synthetic(perms: list[tuple[str, ...]], seeds: int, noise: float, rng: np.random.Generator):
    """Results of ``perms`` x ``seeds``: 0.6 + the set pair effects + a seed effect shared by every
    order + noise; and the plans of each order."""
    plans = {" > ".join(p): plans_of(p) for p in perms}
    seed_effect = rng.normal(0, 0.05, size=seeds)
    rows = []
    for label, plan in plans.items():
        score = 0.6 + sum(effect for (a, b), effect in EFFECTS.items()
                          if plan["e1" if "E" not in (a, b) else "e2"].index(a)
                          < plan["e1" if "E" not in (a, b) else "e2"].index(b))
        rows += [{"order": label, "seed": s, "score": score + seed_effect[s] + rng.normal(0, noise)}
                 for s in range(seeds)]
    return pd.DataFrame(rows), plans


def test_sampled_orders_recover_the_set_pair_effects():
    rng = np.random.default_rng(0)
    perms = list(itertools.permutations("ABCDE"))
    sampled = [perms[i] for i in rng.choice(len(perms), size=40, replace=False)]
    results, plans = synthetic(sampled, seeds=3, noise=0.004, rng=rng)
    table = precedence(results, plans, "score", names=list("ABCDE"))
    assert list(table.columns) == PRECEDENCE_COLUMNS and len(table) == 7  # 6 pairs at e1, A-E
    found = table.set_index(["first", "second"])
    for pair, effect in EFFECTS.items():
        row = found.loc[pair]
        assert abs(row["effect"] - effect) < 2 * (row["ci_high"] - row["ci_low"])  # about 4 standard errors
        assert row["p_adjusted"] < 0.01
    nulls = found.drop(index=list(EFFECTS))
    assert (nulls["p_adjusted"] > 0.05).all() and (nulls["effect"].abs() < 0.006).all()
    assert found.loc[("A", "E"), "events"] == "e2; e3 (reversed)"
    assert list(table["first"] + table["second"])[:3] == ["AB", "CD", "AE"]  # smallest p first
    assert table.attrs["orders"] == 40 and table.attrs["runs"] == 120
    assert table.attrs["summary"].startswith("40 orders, 120 runs: the order of 3 of 7 pairs changes score "
                                             "(Holm-adjusted p < 0.05): A before B: +0.0299")


def test_the_intervals_cover_the_set_effects_as_often_as_they_claim():
    perms = list(itertools.permutations("ABCDE"))
    covered, false_positives, repeats = np.zeros(len(EFFECTS)), 0, 100
    for repeat in range(repeats):
        rng = np.random.default_rng(100 + repeat)
        sampled = [perms[i] for i in rng.choice(len(perms), size=30, replace=False)]
        results, plans = synthetic(sampled, seeds=2, noise=0.004, rng=rng)
        table = precedence(results, plans, "score", list("ABCDE")).set_index(["first", "second"])
        covered += [table.loc[pair, "ci_low"] < effect < table.loc[pair, "ci_high"] for pair, effect in EFFECTS.items()]
        false_positives += (table.drop(index=list(EFFECTS))["p_adjusted"] < 0.05).any()
    assert (covered / repeats >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / repeats)).all()
    assert false_positives / repeats <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / repeats)  # Holm: family-wise


def test_pairs_that_always_flip_together_are_confounded_not_estimated():
    rng = np.random.default_rng(1)
    results, plans = synthetic([tuple("ABCDE"), tuple("DCBAE")], seeds=4, noise=0.004, rng=rng)
    table = precedence(results, plans, "score", names=list("ABCDE")).set_index(["first", "second"])
    flipped = table.drop(index=[("A", "E")])
    assert flipped["effect"].isna().all()
    assert flipped.loc[("A", "B"), "note"].startswith("confounded with A before C, A before D, B before C")
    assert table.loc[("A", "E"), "note"] == "runs in one order in every order swept"
    assert table.attrs["summary"].endswith("7 pairs not estimated (see note)")


def test_a_noiseless_experiment_is_fitted_exactly():
    results, plans = synthetic(list(itertools.permutations("ABCDE")), seeds=2, noise=0.0,
                               rng=np.random.default_rng(2))
    table = precedence(results, plans, "score").set_index(["first", "second"])
    for pair, effect in EFFECTS.items():
        assert table.loc[pair, "effect"] == pytest.approx(effect)
        assert table.loc[pair, "ci_low"] == table.loc[pair, "ci_high"] == table.loc[pair, "effect"]
        assert table.loc[pair, "note"] == "exact fit (no residual spread)"
    assert (table.drop(index=list(EFFECTS))["p_value"] == 1.0).all()


def test_results_without_plans_are_refused():
    results, plans = synthetic([tuple("ABCDE"), tuple("BACDE")], seeds=2, noise=0.01, rng=np.random.default_rng(3))
    with pytest.raises(ValueError, match=r"no plan for the orders \['B > A > C > D > E'\]"):
        precedence(results, {"A > B > C > D > E": plans["A > B > C > D > E"]}, "score")


_CLOCK = itertools.count()
"""When each Tag first ran (a process-wide clock: the runs train one after another, inline)."""


class Tag(Algorithm):
    """Does nothing at AFTER_DATALOADER but note when it first ran there."""

    events = frozenset({Event.AFTER_DATALOADER})
    writes = frozenset()

    def __init__(self) -> None:
        self.first_ran: Optional[int] = None

    def apply(self, event: Event, state: State, logger: Logger) -> None:
        if self.first_ran is None:
            self.first_ran = next(_CLOCK)


class TagA(Tag):
    pass


class TagB(Tag):
    pass


class TagC(Tag):
    pass


TAG_EFFECTS = {("TagA", "TagB"): 0.04, ("TagB", "TagC"): -0.03}


class Score(Callback):
    """Logs 'score': 0.5 + each set pair effect whose first ran before its second + 0.01 x seed."""

    def __init__(self, tags: list, seed: int) -> None:
        self.tags, self.seed = tags, seed

    def fit_end(self, state: State, logger: Logger) -> None:
        ran = {type(tag).__name__: tag.first_ran for tag in self.tags}
        score = 0.5 + 0.01 * self.seed + sum(e for (a, b), e in TAG_EFFECTS.items() if ran[a] < ran[b])
        logger.log_metrics({"score": score})


def scored_trainer(algorithms: list, seed: int) -> Trainer:
    """One batch of the explorer's tiny experiment, scored by what ran first (:class:`Score`)."""
    seed_all(seed)
    return Trainer(SmallCNN(in_channels=1, num_classes=4, width=4), DataLoader(images(16), batch_size=8), "1ba",
                   loss_fn=F.cross_entropy, algorithms=algorithms, callbacks=[Score(algorithms, seed)], seed=seed,
                   progress_bar=False)


def test_a_sweep_finds_the_pair_effects_of_what_ran(tmp_path):
    sweep = Sweep(scored_trainer, [TagA(), TagB(), TagC()], seeds=range(2), metric="score",
                  executor=InlineExecutor(), folder=tmp_path)
    sweep.run()
    table = sweep.precedence().set_index(["first", "second"])
    assert set(table.index) == {("TagA", "TagB"), ("TagA", "TagC"), ("TagB", "TagC")}
    assert (table["events"] == "after_dataloader").all()
    for pair, effect in TAG_EFFECTS.items():
        assert table.loc[pair, "effect"] == pytest.approx(effect)
    assert table.loc[("TagA", "TagC"), "effect"] == pytest.approx(0, abs=1e-9)


def test_past_eight_algorithms_a_sweep_samples_orders(tmp_path):
    tags = [type(f"Tag{i}", (Tag,), {})() for i in range(9)]
    with pytest.warns(UserWarning, match=r"9 algorithms have 362,880 orders: this sweep trains 64 permutations drawn "
                                         r"at random .*pass orders=N to choose how many"):
        sweep = Sweep(scored_trainer, tags, seeds=[0], executor=InlineExecutor(), folder=tmp_path / "a")
    assert len(sweep.orders) == 64
    assert len(Sweep(scored_trainer, tags, seeds=[0], orders=10, executor=InlineExecutor(),
                     folder=tmp_path / "b").orders) == 10

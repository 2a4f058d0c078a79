"""What a tracker records of a run's setup: flat ``name: value`` parameters, from a :class:`Run`.

One description for every tracker and for live and saved runs alike: the settings of the run's
config (seed, duration, optimizer, ...), each algorithm's hyperparameters, and the order the
engine ran the algorithms in at each event where two or more ran (read from the trace).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Union

import pandas as pd

if TYPE_CHECKING:
    from composer_lab.trainer.run import Run

__all__ = ["run_params", "order_params", "run_orders", "tracker_key"]

Scalar = Union[str, int, float, bool]
_SETTINGS = ("run_name", "model", "loss_fn", "max_duration", "optimizers", "lr", "schedulers", "passes", "device",
             "precision", "device_train_microbatch_size", "seed", "eval_interval", "batch_size", "world_size", "trace")
_BAD_KEY = re.compile(r"[^\w\-. :/]")


def tracker_key(name: str) -> str:
    """``name`` as a key every tracker accepts (MLflow's: letters, digits, ``_ - . : /`` and spaces):
    an algorithm's second instance 'CutOut#2' becomes 'CutOut-2'."""
    return _BAD_KEY.sub("_", name.replace("#", "-"))


def run_params(run: "Run") -> dict[str, Scalar]:
    """``run``'s setup as flat parameters, read from its config: its settings, ``algorithms`` (list
    order) and ``<Algorithm>.<hyperparameter>``. The orders run are :func:`order_params`."""
    config = run.config
    params: dict[str, Scalar] = {"composer_lab.run_id": str(config.get("run_id"))}
    for name in _SETTINGS:
        value = config.get(name)
        if value is not None:
            params[name] = " > ".join(map(str, value)) if isinstance(value, list) else value
    described = config.get("algorithms", [])
    names = _instance_names([algorithm["class"] for algorithm in described])
    params["algorithms"] = " > ".join(names) if names else "none"
    for name, algorithm in zip(names, described):
        for hparam, value in algorithm.get("hparams", {}).items():
            params[tracker_key(f"{name}.{hparam}")] = value if isinstance(value, (int, float, bool)) else str(value)
    return params


def order_params(run: "Run") -> dict[str, str]:
    """:func:`run_orders` as parameters: ``order/<event>``."""
    return {f"order/{event}": order for event, order in run_orders(run).items()}


def run_orders(run: "Run") -> dict[str, str]:
    """The order the algorithms ran in at each event where two or more ran, as
    ``{'after_dataloader': 'SelectiveBackprop > MixUp > CutOut'}``; where an event ran them in
    several orders (a pass changed mid-run), each order once, first seen first, joined by ' | '.
    Empty when the trace is off."""
    calls = run.invocations
    calls = calls[(calls["kind"] == "algorithm") & calls["matched"]]
    if calls.empty:
        return {}
    calls = calls.sort_values(["seq", "order"], kind="stable")
    ran = pd.DataFrame({"event": calls.groupby("seq", sort=True)["event"].first().astype(str),
                        "names": calls.groupby("seq", sort=True)["name"].agg(lambda names: " > ".join(map(str, names))),
                        "count": calls.groupby("seq", sort=True).size()})
    ran = ran[ran["count"] > 1].drop_duplicates(["event", "names"])
    return {str(event): " | ".join(group["names"]) for event, group in ran.groupby("event", sort=False)}


def _instance_names(classes: list[str]) -> list[str]:
    """Names unique per instance, as the trace gives them: 'CutOut', 'CutOut#2'."""
    seen: dict[str, int] = {}
    names = []
    for cls in classes:
        seen[cls] = seen.get(cls, 0) + 1
        names.append(cls if seen[cls] == 1 else f"{cls}#{seen[cls]}")
    return names


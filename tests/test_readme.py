"""The README's own algorithm is code that runs: defined as printed, it trains and scales the loss
only where its ``match`` says."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from tests.trainer.helpers import make_trainer

README = Path(__file__).resolve().parents[1] / "README.md"


def _section_code(title: str) -> str:
    section = README.read_text().split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readmes_own_algorithm_trains_and_acts_where_it_matches():
    namespace: dict = {}
    exec(compile(_section_code("Writing your own algorithm"), str(README), "exec"), namespace)
    algorithm = namespace["WarmLoss"](factor=0.5, until=0.5)
    trainer = make_trainer(algorithms=[algorithm], max_duration="4ba", trace="all")
    trainer.fit()
    calls = trainer.trace.invocations
    ran = calls[(calls["name"] == "WarmLoss") & calls["matched"]]
    assert sorted(ran["batch"]) == [0, 1]  # the first half of the run only
    assert set(ran["changed"].map(tuple)) == {("loss",)}
    assert torch.isfinite(torch.tensor(trainer.metrics["value"].to_numpy(dtype=float))).all()

"""A run-name clash is found before any training: check_run_folder refuses what Run.save would
refuse at the end, with a typed error whose fixes a caller words in its own terms (the command
line: --name, --overwrite)."""

from __future__ import annotations

import pytest

from composer_lab.trainer import RunFolderTaken, check_run_folder
from tests.tracking.helpers import tiny_trainer


def test_a_clash_is_refused_before_training_and_worded_in_the_callers_terms(tmp_path):
    trainer = tiny_trainer(batches="1ba", run_name="co-ls")
    trainer.fit()
    trainer.to_run().save(tmp_path / "co-ls")
    check_run_folder(tmp_path / "new", "co-ls")  # a new folder: nothing to refuse
    check_run_folder(tmp_path / "co-ls", "co-ls", trainer.run_id)  # the same run: saved again
    with pytest.raises(RunFolderTaken, match=r"it holds another run of the same name; give this run another name "
                                             r"\(Trainer\(run_name=\.\.\.\)\), or pass overwrite=True") as taken:
        check_run_folder(tmp_path / "co-ls", "co-ls")  # a run not made yet
    worded = taken.value.worded(rename="--name", overwrite="add --overwrite")
    assert worded.endswith("give this run another name (--name), or add --overwrite to replace that run")
    with pytest.raises(RunFolderTaken, match=r"it holds the run 'co-ls'; choose another folder"):
        check_run_folder(tmp_path / "co-ls", "other")

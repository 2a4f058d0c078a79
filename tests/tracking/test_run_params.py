"""What a tracker records of a run's setup: settings, hyperparameters per algorithm instance, and
the order the engine ran at each event, read from the trace."""

from __future__ import annotations

from composer_lab.algorithms import CutOut
from composer_lab.tracking.run_params import order_params, run_params
from tests.tracking.helpers import tiny_trainer


def test_parameters_name_each_algorithm_instance_and_the_settings():
    trainer = tiny_trainer(batches="1ba")
    trainer.state.algorithms.append(CutOut(length=0.25))
    params = run_params(trainer.to_run())
    assert params["algorithms"] == "CutOut > MixUp > CutOut#2"
    assert params["CutOut.length"] == 0.5 and params["CutOut-2.length"] == 0.25  # (a key MLflow accepts)
    assert params["seed"] == 0 and params["max_duration"] == "1ba" and params["composer_lab.run_id"] == trainer.run_id


def test_the_order_is_what_ran_each_order_once():
    trainer = tiny_trainer(batches="2ba")
    trainer.fit()
    assert order_params(trainer.to_run()) == {"order/after_dataloader": "MixUp > CutOut"}  # (FILO: the list reversed)
    trainer.engine.remove_pass("set_filo_order")
    trainer.fit(duration="2ba")
    assert order_params(trainer.to_run()) == {"order/after_dataloader": "MixUp > CutOut | CutOut > MixUp"}


def test_without_a_trace_there_is_no_order():
    trainer = tiny_trainer(batches="1ba", trace="off")
    trainer.fit()
    assert order_params(trainer.to_run()) == {}

"""Bad input gets a clear error that names the fix."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

from composer_lab import Event, State
from composer_lab.trainer import CheckpointError
from composer_lab.trainer.batching import batch_inputs, batch_targets

from tests.trainer.helpers import OnEvent, make_trainer, tiny_data, tiny_model


@pytest.mark.parametrize("duration", ["3 ep", "ten epochs", "1.5ep", "0.5dur", ""])
def test_bad_duration_string(duration):
    with pytest.raises(ValueError, match="max_duration"):
        make_trainer(max_duration=duration)


def test_bad_fit_duration():
    trainer = make_trainer()
    with pytest.raises(ValueError, match="duration"):
        trainer.fit("2 batches")
    with pytest.raises(ValueError, match="fit\\('1ep'\\)"):
        trainer.fit("0.5dur")


def test_model_without_loss():
    with pytest.raises(ValueError, match="pass loss_fn"):
        make_trainer(loss_fn=None)


def test_model_that_is_not_a_module():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        make_trainer(model=lambda x: x)


def test_loss_fn_that_is_not_callable():
    with pytest.raises(TypeError, match="loss_fn must be a callable"):
        make_trainer(loss_fn="cross_entropy")


def test_non_algorithm_in_algorithms():
    with pytest.raises(TypeError, match=r"algorithms\[1\] is str"):
        make_trainer(algorithms=[OnEvent(Event.INIT), "label_smoothing"])


def test_algorithm_class_instead_of_instance():
    with pytest.raises(TypeError, match="not an instance; write OnEvent"):
        make_trainer(algorithms=[OnEvent])


def test_non_callback_in_callbacks():
    with pytest.raises(TypeError, match="callbacks\\[0\\]"):
        make_trainer(callbacks=[print])


def test_empty_dataloader():
    empty = DataLoader(tiny_data(4), batch_size=8, drop_last=True)
    with pytest.raises(ValueError, match="train_dataloader is empty"):
        make_trainer(train_dataloader=empty)
    with pytest.raises(ValueError, match="eval_dataloader is empty"):
        make_trainer(eval_dataloader=empty)


class _Nothing(IterableDataset):
    def __iter__(self):
        return iter(())


def test_dataloader_without_length_that_yields_nothing():
    trainer = make_trainer(train_dataloader=DataLoader(_Nothing(), batch_size=4))
    with pytest.raises(ValueError, match="yielded no batches"):
        trainer.fit()


def test_dataloader_that_is_not_iterable():
    with pytest.raises(TypeError, match="train_dataloader must be an iterable"):
        make_trainer(train_dataloader=42)


def test_gpu_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="CUDA is not available.*device='cpu'"):
        make_trainer(device="gpu")


def test_unknown_device_and_precision():
    with pytest.raises(ValueError, match="use 'cpu' or 'gpu'"):
        make_trainer(device="tpu-ish")
    with pytest.raises(ValueError, match="precision 'fp8'"):
        make_trainer(precision="fp8")


@pytest.mark.parametrize("size,error", [(0, ValueError), (-2, ValueError), (2.5, TypeError), ("4", TypeError),
                                        (True, TypeError)])
def test_microbatch_size_not_a_positive_integer(size, error):
    with pytest.raises(error, match="device_train_microbatch_size must be a positive integer"):
        make_trainer(device_train_microbatch_size=size)


@pytest.mark.parametrize("kwargs,message", [
    ({"algorithms": "mixup"}, r"algorithms\[0\] is str 'mixup'.*MixUp\(\) from composer_lab.algorithms"),
    ({"algorithms": 5}, "algorithms must be a list of objects.*got int 5"),
    ({"callbacks": 5}, "callbacks must be a list of objects.*subclass composer_lab.Callback"),
    ({"optimizers": "sgd"}, r"optimizers\[0\] is str 'sgd'.*torch.optim.SGD\(model.parameters\(\), lr=0.1\)"),
    ({"optimizers": torch.optim.SGD}, r"optimizers\[0\] is the class SGD, not an instance"),
    ({"schedulers": [3]}, r"schedulers\[0\] is int 3.*torch.optim.lr_scheduler"),
])
def test_algorithms_callbacks_optimizers_schedulers_of_the_wrong_kind(kwargs, message):
    with pytest.raises(TypeError, match=message):
        make_trainer(**kwargs)


def test_checkpoint_of_another_model_names_what_differs(tmp_path):
    trainer = make_trainer(max_duration="1ba", save_folder=tmp_path, save_interval="1ba")
    trainer.fit()
    with pytest.raises(CheckpointError, match=r"does not fit this model \(size mismatch for 0.weight.*\); build "):
        make_trainer(model=nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Dropout(0.0), nn.Linear(8, 3)),
                     load_path=trainer.checkpoints[0])


@pytest.mark.parametrize("name", ["eval_interval", "save_interval"])
@pytest.mark.parametrize("value", ["0ep", "0.5dur", "100sp"])
def test_bad_intervals(tmp_path, name, value):
    with pytest.raises(ValueError, match=name):
        make_trainer(save_folder=tmp_path, **{name: value})


def test_bad_seed():
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        make_trainer(seed=-1)


def test_eval_without_data():
    with pytest.raises(ValueError, match="eval\\(\\) needs data"):
        make_trainer().eval()


def test_batches_without_targets_in_training():
    loader = DataLoader(torch.randn(8, 6), batch_size=4)
    trainer = make_trainer(train_dataloader=loader, model=tiny_model())
    with pytest.raises(TypeError, match="has no target"):
        trainer.fit()


def test_dict_batch_without_input_key():
    loader = DataLoader([{"x": x, "target": y} for x, y in tiny_data(8)], batch_size=4)
    with pytest.raises(KeyError, match="need the keys 'input' and 'target' .*; this one has"):
        make_trainer(train_dataloader=loader).fit()


def test_algorithms_and_the_trainer_read_a_dict_batch_by_one_rule():
    state = State(tiny_model())
    good = {"input": torch.ones(2, 3), "target": torch.zeros(2), "mask": torch.ones(2)}
    state.batch = good
    assert state.inputs is batch_inputs(good) is good["input"]
    assert state.targets is batch_targets(good) is good["target"]
    state.batch = bad = {"x": torch.ones(2, 3), "y": torch.zeros(2)}
    errors = []
    for read in (lambda: state.inputs, lambda: state.targets, lambda: batch_inputs(bad), lambda: batch_targets(bad)):
        with pytest.raises(KeyError) as err:
            read()
        errors.append(str(err.value))
    assert len(set(errors)) == 1 and "rename the dataset's keys" in errors[0]


def test_exception_in_algorithm_propagates_and_is_in_the_trace():
    def fail(state):
        raise RuntimeError("broken on purpose")

    trainer = make_trainer(algorithms=[OnEvent(Event.BEFORE_LOSS, fail)], loss_fn=nn.functional.cross_entropy)
    with pytest.raises(RuntimeError, match="broken on purpose"):
        trainer.fit()
    errors = trainer.trace.invocations["error"].dropna()
    assert errors.str.contains("broken on purpose").any()


def test_one_algorithm_instance_listed_twice_is_refused_naming_two_instances():
    cut = OnEvent(Event.AFTER_DATALOADER)
    with pytest.raises(ValueError, match=r"algorithms\[1\] is the same OnEvent object as algorithms\[0\].*"
                                         r"pass two instances"):
        make_trainer(algorithms=[cut, cut])
    make_trainer(algorithms=[cut, OnEvent(Event.AFTER_DATALOADER)])  # two instances: accepted


class _DictNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = tiny_model()

    def forward(self, x):
        return {"logits": self.net(x)}


def test_a_model_returning_a_dict_to_a_loss_fn_names_the_fixes():
    trainer = make_trainer(model=_DictNet(), max_duration="1ba")
    with pytest.raises(TypeError, match=r"_DictNet returned a dict \(keys \['logits'\]\).*loss\(outputs, batch\).*"
                                        r"HuggingFaceModel.*outputs\['logits'\]") as caught:
        trainer.fit()
    assert "must be Tensor" not in str(caught.value)


def test_a_loss_fn_that_fails_on_a_tensor_keeps_its_own_error():
    def broken(outputs, targets):
        raise TypeError("my own loss is broken")

    with pytest.raises(TypeError, match="my own loss is broken"):
        make_trainer(loss_fn=broken, max_duration="1ba").fit()

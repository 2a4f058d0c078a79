"""``required_on_load`` as Composer honours it: a checkpoint records the surgery algorithms its
model needs, and resuming it in a trainer without them adds them (rebuilt from the checkpoint's
hyperparameters, applied before the weights load) so the resumed run is exact; where that
cannot be done faithfully it is refused with the fix."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from composer_lab.algorithms import BlurPool, Factorize, NoOpModel, SqueezeExcite, StochasticDepth
from composer_lab.trainer import CheckpointError, Trainer
from composer_lab.trainer.checkpoint import load_checkpoint

from surgery_models import loader, one_thread, tiny_resnet, wide_cnn  # noqa: F401 (one_thread: an autouse fixture)


def _trainer(build, algorithms, user_optimizer: bool = True, **kwargs) -> Trainer:
    torch.manual_seed(0)
    model = build()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if user_optimizer else None
    return Trainer(model, loader(), "3ba", loss_fn=F.cross_entropy, algorithms=algorithms, seed=5,
                   optimizers=optimizer, progress_bar=False, **kwargs)


CASES = {
    "StochasticDepth+SqueezeExcite": (tiny_resnet, lambda: [StochasticDepth("ResNetBasicBlock", "sample", 0.5),
                                                            SqueezeExcite(latent_channels=4, min_channels=8)]),
    "Factorize": (wide_cnn, lambda: [Factorize(min_channels=16, latent_channels=4, min_features=32,
                                               latent_features=8)]),
    "NoOpModel": (wide_cnn, lambda: [NoOpModel()]),
}


@pytest.mark.filterwarnings("ignore:the checkpoint")
@pytest.mark.parametrize("user_optimizer", [True, False])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_checkpoint_adds_the_surgery_it_needs_and_resumes_exactly(tmp_path, case, user_optimizer):
    """With a user's optimizer (built before the surgery in both runs) and with the trainer's
    default one (which may be built after INIT's surgery in the saving run and before the added
    surgery in the resumed one: the same parameters in another order, put back by name)."""
    build, algorithms = CASES[case]
    full = _trainer(build, algorithms(), user_optimizer, save_folder=tmp_path, save_interval="1ba")
    full.fit()
    entries = load_checkpoint(full.checkpoints[0])["algorithms"]
    assert all(entry["required_on_load"] for entry in entries)
    with pytest.warns(UserWarning, match="needs .* \\(required_on_load\\), which the trainer lacked: added it"):
        resumed = _trainer(build, [], user_optimizer, load_path=full.checkpoints[0])
    assert [type(a) for a in resumed.state.algorithms] == [type(a) for a in full.state.algorithms]
    resumed.fit()
    for (name, a), b in zip(full.state.model.state_dict().items(), resumed.state.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert resumed.trace.notes.query("kind == 'load'").text.str.contains("required_on_load").any()


def test_a_surgery_that_would_run_before_one_already_applied_is_refused(tmp_path):
    full = _trainer(wide_cnn, [SqueezeExcite(latent_channels=4, min_channels=16), BlurPool(min_channels=1)],
                    save_folder=tmp_path, save_interval="1ba")
    full.fit()
    with pytest.raises(CheckpointError, match=r"was written with SqueezeExcite .* the run applied it at INIT "
                                              r"before BlurPool, which this trainer already applied.* "
                                              r"Pass algorithms=\[SqueezeExcite\(...\)\]"):
        _trainer(wide_cnn, [BlurPool(min_channels=1)], load_path=full.checkpoints[0])

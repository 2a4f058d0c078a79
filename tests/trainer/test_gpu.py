"""The GPU path: device placement, bf16 / fp16 autocast (fp16 with a GradScaler), resumption."""

from __future__ import annotations

import pytest
import torch

from composer_lab import Event

from tests.trainer.helpers import OnEvent, make_trainer, tiny_loader, tiny_model

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_gpu_device_places_model_and_batches():
    devices = []
    trainer = make_trainer(device="gpu", precision="fp32", max_duration="2ba",
                           algorithms=[OnEvent(Event.AFTER_DATALOADER, lambda s: devices.append(s.batch[0].device))])
    trainer.fit()
    assert all(p.is_cuda for p in trainer.state.model.parameters())
    assert all(d.type == "cuda" for d in devices) and len(devices) == 2
    assert trainer.metrics.query("name == 'loss/train'")["value"].notna().all()


def test_default_device_is_the_gpu_when_there_is_one():
    trainer = make_trainer(device=None)
    assert trainer.state.device.type == "cuda"
    assert trainer.state.precision in ("amp_bf16", "amp_fp16")


@pytest.mark.parametrize("precision,dtype", [("amp_bf16", torch.bfloat16), ("amp_fp16", torch.float16)])
def test_amp_on_gpu(precision, dtype):
    if precision == "amp_bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    seen = []
    trainer = make_trainer(device="gpu", precision=precision, max_duration="3ba", eval_dataloader=tiny_loader(8, 4),
                           device_train_microbatch_size=4,
                           algorithms=[OnEvent(Event.AFTER_FORWARD, lambda s: seen.append(s.outputs.dtype))])
    trainer.fit()
    assert set(seen) == {dtype}
    assert (trainer.scaler is not None) == (precision == "amp_fp16")
    if trainer.scaler is not None:
        assert trainer.scaler.get_scale() > 0
    assert all(p.dtype == torch.float32 for p in trainer.state.model.parameters())
    assert torch.isfinite(torch.tensor(trainer.metrics.query("name == 'loss/train'")["value"].to_numpy())).all()
    assert trainer.eval()["metrics/eval/Accuracy"] >= 0


def test_resume_on_gpu_gives_the_same_weights(tmp_path):
    def make(**kwargs):
        return make_trainer(model=tiny_model(dropout=0.3), train_dataloader=tiny_loader(24, 8, shuffle=True),
                            device="gpu", precision="amp_fp16", max_duration="2ep", seed=3, **kwargs)

    full = make(save_folder=tmp_path, save_interval="1ba")
    full.fit()
    resumed = make(load_path=tmp_path / "ep0-ba2.pt")
    assert resumed.scaler.get_scale() == torch.load(tmp_path / "ep0-ba2.pt", weights_only=True)["scaler"]["scale"]
    resumed.fit()
    for a, b in zip(full.state.model.parameters(), resumed.state.model.parameters()):
        torch.testing.assert_close(a, b)

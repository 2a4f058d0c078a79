"""Host syncs per training batch on a real GPU, counted by CUDA itself.

``host_syncs.py`` counts, on any device, the calls that would make the host wait; this script
asks the GPU: ``torch.cuda.set_sync_debug_mode("warn")`` makes CUDA warn at every operation that
synchronises the host with the device, and the warnings of a whole ``fit`` are counted. Fits of
60 and 260 batches: the difference over 200 batches is the count per batch, without what a fit
does once (its start and end). A small CNN on 16x16 images, batches of 64 from pinned memory,
with the default settings, with the trace off, and with Selective Backprop, LabelSmoothing and
ChannelsLast, in amp_bf16 and fp32. Writes benchmarks/results/gpu_syncs.json.

    python benchmarks/gpu_syncs.py
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from composer_lab import Trainer
from composer_lab.algorithms import ChannelsLast, LabelSmoothing, SelectiveBackprop

SETTINGS = {
    "default": dict,
    "trace_off": lambda: {"trace": "off"},
    "sb_ls_cl": lambda: {"algorithms": [SelectiveBackprop(start=0, end=1, interrupt=0), LabelSmoothing(0.1),
                                        ChannelsLast()]},
}
"""Each setting's extra Trainer arguments (made afresh for each fit)."""


def make_data(batches: int) -> DataLoader:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batches * 64, 3, 16, 16, generator=gen)
    y = torch.randint(0, 10, (batches * 64,), generator=gen)
    return DataLoader(TensorDataset(x, y), batch_size=64, pin_memory=True)


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                         nn.Linear(256, 10))


def fit_syncs(batches: int, setting: str, precision: str) -> tuple[int, float]:
    """The syncs CUDA warned about during a fit of ``batches`` batches, and the fit's seconds."""
    trainer = Trainer(make_model(), make_data(batches), "1ep", loss_fn=nn.functional.cross_entropy, device="gpu",
                      precision=precision, progress_bar=False, **SETTINGS[setting]())
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        start = time.perf_counter()
        try:
            trainer.fit()
        finally:
            torch.cuda.set_sync_debug_mode(0)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    return sum("synchroniz" in str(w.message) for w in caught), seconds


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("gpu_syncs.py needs CUDA, and torch.cuda.is_available() is False here; "
                         "benchmarks/host_syncs.py counts the same calls on the CPU")
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "fits": {}}
    for precision in ("amp_bf16", "fp32"):
        for setting in SETTINGS:
            short, _ = fit_syncs(60, setting, precision)
            long, seconds = fit_syncs(260, setting, precision)
            row = {"syncs_60": short, "syncs_260": long, "per_batch": (long - short) / 200, "fit_260_s": seconds}
            results["fits"][f"{setting}/{precision}"] = row
            print(f"{setting:>10} {precision:>8}: {short} syncs in 60 batches, {long} in 260: "
                  f"{row['per_batch']:.3f} per batch ({seconds:.2f} s for 260)")
    out = Path(__file__).parent / "results" / "gpu_syncs.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"saved {out}")


if __name__ == "__main__":
    main()

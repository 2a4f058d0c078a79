"""The Trainer and what it needs: model adapter, devices, checkpoints, metrics, progress, run folders."""

from composer_lab.trainer.checkpoint import CheckpointError, load_checkpoint
from composer_lab.trainer.failures import NonFiniteLossError
from composer_lab.trainer.lifecycle import TrainerBusy
from composer_lab.trainer.run import Run, RunFolderTaken, check_run_folder
from composer_lab.trainer.trainer import Trainer

__all__ = ["Trainer", "Run", "CheckpointError", "NonFiniteLossError", "TrainerBusy", "load_checkpoint",
           "RunFolderTaken", "check_run_folder"]

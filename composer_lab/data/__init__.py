"""Datasets that need no download: scikit-learn's digits, generated images, characters of the
Python standard library's source (for language models), and a CIFAR-10 reader for the standard
python pickles under ``data/cifar-10-batches-py``."""

from composer_lab.data.cifar10 import CIFAR10, cifar10_dataloaders
from composer_lab.data.digits import digits_dataloaders, digits_datasets
from composer_lab.data.synthetic import synthetic_dataloaders, synthetic_images
from composer_lab.data.text import text_dataloaders, text_datasets

DATASETS = {"digits": digits_dataloaders, "synthetic": synthetic_dataloaders, "cifar10": cifar10_dataloaders,
            "text": text_dataloaders}
"""Name (as the command line takes it) -> function(batch_size, ...) -> (train, eval) loaders."""

__all__ = ["CIFAR10", "cifar10_dataloaders", "digits_dataloaders", "digits_datasets", "synthetic_images",
           "synthetic_dataloaders", "text_datasets", "text_dataloaders", "DATASETS"]

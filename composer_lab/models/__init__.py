"""Small models for the bundled experiments: an MLP, a CNN for any image size, a ResNet for 32x32,
and a small causal transformer language model (TinyGPT); and :class:`HuggingFaceModel`, which
puts a Hugging Face transformers model in the trainer's form."""

from composer_lab.models.cnn import SmallCNN
from composer_lab.models.gpt import TinyGPT, language_model_loss
from composer_lab.models.huggingface import HuggingFaceModel
from composer_lab.models.mlp import MLP
from composer_lab.models.resnet import CifarResNet

MODELS = {"mlp": MLP, "cnn": SmallCNN, "resnet": CifarResNet, "gpt": TinyGPT}
"""Name (as the command line takes it) -> model class (``in_channels``/``in_features``, ``num_classes``;
TinyGPT: ``vocab_size``)."""

__all__ = ["MLP", "SmallCNN", "CifarResNet", "TinyGPT", "language_model_loss", "HuggingFaceModel", "MODELS"]

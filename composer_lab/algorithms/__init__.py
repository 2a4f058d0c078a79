"""The algorithm collection: one module per method, each with a functional form and an Algorithm.

``ALGORITHMS`` maps snake_case names (as the command line takes them) to the classes.
"""

from composer_lab.algorithms.alibi import Alibi
from composer_lab.algorithms.blurpool import BlurPool
from composer_lab.algorithms.channels_last import ChannelsLast
from composer_lab.algorithms.cutmix import CutMix
from composer_lab.algorithms.cutout import CutOut
from composer_lab.algorithms.ema import EMA
from composer_lab.algorithms.fused_layernorm import FusedLayerNorm
from composer_lab.algorithms.gated_linear_units import GatedLinearUnits
from composer_lab.algorithms.gradient_clipping import GradientClipping
from composer_lab.algorithms.label_smoothing import LabelSmoothing
from composer_lab.algorithms.layer_freezing import LayerFreezing
from composer_lab.algorithms.mixup import MixUp
from composer_lab.algorithms.progressive_resizing import ProgressiveResizing
from composer_lab.algorithms.randaugment import RandAugment
from composer_lab.algorithms.random_subset import RandomSubset
from composer_lab.algorithms.selective_backprop import SelectiveBackprop
from composer_lab.algorithms.seq_length_warmup import SeqLengthWarmup
from composer_lab.algorithms.colout import ColOut
from composer_lab.algorithms.augmix import AugMix

ALGORITHMS = {
    "selective_backprop": SelectiveBackprop,
    "random_subset": RandomSubset,
    "label_smoothing": LabelSmoothing,
    "mixup": MixUp,
    "cutmix": CutMix,
    "cutout": CutOut,
    "blurpool": BlurPool,
    "channels_last": ChannelsLast,
    "gradient_clipping": GradientClipping,
    "ema": EMA,
    "layer_freezing": LayerFreezing,
    "progressive_resizing": ProgressiveResizing,
    "gated_linear_units": GatedLinearUnits,
    "fused_layernorm": FusedLayerNorm,
    "randaugment": RandAugment,
    "alibi": Alibi,
    "seq_length_warmup": SeqLengthWarmup,
    "colout": ColOut,
    "augmix": AugMix,
}

__all__ = [cls.__name__ for cls in ALGORITHMS.values()] + ["ALGORITHMS"]

"""The algorithm collection: one module per method, each with a functional form and an Algorithm.

``ALGORITHMS`` maps snake_case names (as the command line takes them) to the classes.
"""

import difflib

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
from composer_lab.algorithms.sam import SAM
from composer_lab.algorithms.selective_backprop import SelectiveBackprop
from composer_lab.algorithms.squeeze_excite import SqueezeExcite, SqueezeExcite2d, SqueezeExciteConv2d
from composer_lab.algorithms.stochastic_depth import StochasticDepth
from composer_lab.algorithms.swa import SWA
from composer_lab.algorithms.factorize import Factorize
from composer_lab.algorithms.no_op_model import NoOpModel
from composer_lab.algorithms.seq_length_warmup import SeqLengthWarmup
from composer_lab.algorithms.colout import ColOut
from composer_lab.algorithms.augmix import AugMix
from composer_lab.algorithms.ghost_batchnorm import GhostBatchNorm
from composer_lab.algorithms.weight_standardization import WeightStandardization
from composer_lab.algorithms.low_precision_layernorm import LowPrecisionLayerNorm
from composer_lab.algorithms.low_precision_groupnorm import LowPrecisionGroupNorm
from composer_lab.algorithms.gyro_dropout import GyroDropout


class _Registry(dict):
    """The names' table: a name it lacks raises a KeyError naming the closest names."""

    def __missing__(self, name: object) -> type:
        raise KeyError(f"no algorithm is named {name!r}{name_hint(name)}; the names are {sorted(self)}")


def name_hint(name: object) -> str:
    """' (did you mean 'cutout'?)' for a misspelt algorithm name (its class's name too); '' otherwise."""
    if not isinstance(name, str):
        return ""
    by_key = {key: key for key in ALGORITHMS} | {cls.__name__.lower(): key for key, cls in ALGORITHMS.items()}
    close = difflib.get_close_matches(name.lower().replace("-", "_"), by_key, n=2, cutoff=0.6)
    names = list(dict.fromkeys(by_key[c] for c in close))
    return f" (did you mean {' or '.join(map(repr, names))}?)" if names else ""


ALGORITHMS = _Registry({
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
    "sam": SAM,
    "swa": SWA,
    "stochastic_depth": StochasticDepth,
    "squeeze_excite": SqueezeExcite,
    "factorize": Factorize,
    "no_op_model": NoOpModel,
    "seq_length_warmup": SeqLengthWarmup,
    "colout": ColOut,
    "augmix": AugMix,
    "ghost_batchnorm": GhostBatchNorm,
    "weight_standardization": WeightStandardization,
    "low_precision_layernorm": LowPrecisionLayerNorm,
    "low_precision_groupnorm": LowPrecisionGroupNorm,
    "gyro_dropout": GyroDropout,
})

__all__ = [cls.__name__ for cls in ALGORITHMS.values()] + ["ALGORITHMS", "name_hint"]
__all__ += ["SqueezeExcite2d", "SqueezeExciteConv2d"]  # (layers Composer exports here too)

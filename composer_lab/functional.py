"""The algorithms' functional forms, for plain PyTorch loops: ``import composer_lab.functional as cf``."""

from composer_lab.algorithms.alibi import apply_alibi
from composer_lab.algorithms.blurpool import apply_blurpool
from composer_lab.algorithms.channels_last import apply_channels_last
from composer_lab.algorithms.cutmix import cutmix, cutmix_batch
from composer_lab.algorithms.cutout import cutout_batch
from composer_lab.algorithms.ema import compute_ema
from composer_lab.algorithms.fused_layernorm import apply_fused_layernorm
from composer_lab.algorithms.gated_linear_units import apply_gated_linear_units
from composer_lab.algorithms.gradient_clipping import apply_gradient_clipping
from composer_lab.algorithms.label_smoothing import smooth_labels
from composer_lab.algorithms.layer_freezing import freeze_layers
from composer_lab.algorithms.mixup import mixup_batch
from composer_lab.algorithms.progressive_resizing import resize_batch
from composer_lab.algorithms.randaugment import randaugment, randaugment_image
from composer_lab.algorithms.random_subset import select_random_subset
from composer_lab.algorithms.selective_backprop import select_using_loss, should_selective_backprop
from composer_lab.algorithms.stochastic_depth import apply_stochastic_depth
from composer_lab.algorithms.squeeze_excite import apply_squeeze_excite
from composer_lab.algorithms.factorize import apply_factorization
from composer_lab.algorithms.no_op_model import apply_no_op_model
from composer_lab.algorithms.seq_length_warmup import set_batch_sequence_length
from composer_lab.algorithms.colout import colout_batch
from composer_lab.algorithms.augmix import augmix_image
from composer_lab.algorithms.ghost_batchnorm import apply_ghost_batchnorm
from composer_lab.algorithms.weight_standardization import apply_weight_standardization
from composer_lab.algorithms.low_precision_layernorm import apply_low_precision_layernorm
from composer_lab.algorithms.low_precision_groupnorm import apply_low_precision_groupnorm
from composer_lab.algorithms.gyro_dropout import apply_gyro_dropout

__all__ = [
    "apply_alibi", "apply_blurpool", "apply_channels_last", "apply_factorization", "apply_fused_layernorm",
    "apply_gated_linear_units", "apply_ghost_batchnorm", "apply_gradient_clipping", "apply_gyro_dropout",
    "apply_low_precision_groupnorm", "apply_low_precision_layernorm", "apply_no_op_model", "apply_squeeze_excite",
    "apply_stochastic_depth", "apply_weight_standardization", "augmix_image", "colout_batch", "compute_ema", "cutmix",
    "cutmix_batch", "cutout_batch", "freeze_layers", "mixup_batch", "randaugment", "randaugment_image",
    "resize_batch", "select_random_subset", "select_using_loss", "set_batch_sequence_length",
    "should_selective_backprop", "smooth_labels",
]

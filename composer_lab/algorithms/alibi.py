"""ALiBi (Press et al., 2022): attention with linear biases instead of position embeddings.

Head ``h`` of ``n`` adds ``-m_h * (i - j)`` to the score of query ``i`` for key ``j <= i``; the
slopes ``m_h`` are the geometric sequence ``2^(-8/n), 2^(-16/n), ..., 2^(-8)``. The position
embedding is zeroed and frozen, so a model trained on short sequences reads longer ones.

Surgery (:func:`apply_alibi`) follows Composer's keywords: in each ``attention_module`` it
registers the slopes as the buffer ``alibi_slopes`` (they move with the model and are in its
``state_dict``) and replaces the method ``attr_to_replace`` with ``alibi_attention`` bound to
the module. The defaults fit :class:`composer_lab.models.TinyGPT`; :func:`gpt2_alibi_attention`
and :func:`gpt2_alibi_mask` fit Hugging Face's ``GPT2Attention`` (transformers 5).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MethodType
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from composer_lab.algorithms.module_surgery import update_params_in_optimizer
from composer_lab.algorithms.validation import check_fraction, check_positive
from composer_lab.algorithms.surgery_algorithm import StateDictSurgery
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State

__all__ = ["Alibi", "apply_alibi", "alibi_slopes", "alibi_bias", "alibi_attention", "gpt2_alibi_attention",
           "gpt2_alibi_mask", "scale_sequence_length", "scale_batch_sequence_length"]

SLOPES_BUFFER = "alibi_slopes"
DEFAULT_ATTENTION = "CausalSelfAttention"
"""The class name of the attention modules ``attention_module=None`` stands for (TinyGPT's)."""


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """The paper's head slopes: ``2^(-8h/n)`` for ``h = 1..n`` when ``n`` is a power of two; else
    those of the power of two below ``n``, then every other slope of the power above (as the
    paper's code does), ``n`` in all."""
    check_positive("n_heads", n_heads, integer=True)
    below = 2 ** math.floor(math.log2(n_heads))
    slopes = [2.0 ** (-8.0 * h / below) for h in range(1, below + 1)]
    if below < n_heads:
        slopes += alibi_slopes(2 * below)[0::2][:n_heads - below].tolist()
    return torch.tensor(slopes)


def alibi_bias(slopes: torch.Tensor, query_length: int, key_length: Optional[int] = None) -> torch.Tensor:
    """``(heads, query_length, key_length)`` additive scores: ``-m_h * (i - j)`` for key ``j`` at or
    before query ``i``, ``-inf`` after it. Queries are the last ``query_length`` positions of the
    ``key_length`` keys (default: as many)."""
    key_length = query_length if key_length is None else key_length
    queries = torch.arange(key_length - query_length, key_length, device=slopes.device)
    distance = (queries[:, None] - torch.arange(key_length, device=slopes.device)[None, :]).float()
    bias = -slopes.float()[:, None, None] * distance
    return bias.masked_fill(distance < 0, float("-inf"))


def alibi_attention(self: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """Replaces ``CausalSelfAttention._attn`` of TinyGPT: scaled dot-product attention of
    ``(N, heads, T, head_dim)`` tensors with the module's ALiBi biases (causal) added to the scores.
    The bias goes in with a batch dimension: a 4-d mask keeps PyTorch's fused CPU kernel (a 3-d
    one took it to a path about twice as slow)."""
    bias = alibi_bias(getattr(self, SLOPES_BUFFER), query.shape[-2], key.shape[-2]).to(query.dtype)[None]
    return F.scaled_dot_product_attention(query, key, value, attn_mask=bias,
                                          dropout_p=self.dropout if self.training else 0.0)


def gpt2_alibi_attention(self: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attention_mask: Optional[torch.Tensor] = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Replaces ``_upcast_and_reordered_attn`` of transformers' ``GPT2Attention``: its scaled
    attention with the ALiBi biases (causal) plus the model's mask; returns ``(output (N, T, heads,
    head_dim), None)`` as the method it replaces does (no attention weights are kept)."""
    bias = alibi_bias(getattr(self, SLOPES_BUFFER), query.shape[-2], key.shape[-2]).to(query.dtype)[None]
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            attention_mask = torch.zeros_like(attention_mask, dtype=query.dtype).masked_fill(~attention_mask,
                                                                                             float("-inf"))
        bias = bias + attention_mask
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=bias, scale=self.scaling,
                                            dropout_p=self.attn_dropout.p if self.training else 0.0)
    return output.transpose(1, 2), None


def gpt2_alibi_mask(module: nn.Module, max_sequence_length: int) -> nn.Module:
    """``mask_replacement_function`` for ``GPT2Attention``: route its forward to the replaced
    ``_upcast_and_reordered_attn`` (it takes that path when the model's attention is 'eager'
    and ``reorder_and_upcast_attn`` is set). Transformers 5 builds the causal mask per call, for
    any length, so there is no mask buffer to enlarge to ``max_sequence_length``."""
    module.reorder_and_upcast_attn = True
    module.config._attn_implementation = "eager"
    return module


def _names(items: Any) -> str:
    return ", ".join(sorted(set(items))) or "none"


def _position_embedding(model: nn.Module, attribute: str) -> nn.Embedding:
    """The ``nn.Embedding`` at ``attribute`` (a dotted path from ``model``)."""
    try:
        embedding = model.get_submodule(attribute)
    except AttributeError:
        embedding = None
    if not isinstance(embedding, nn.Embedding):
        found = [name for name, m in model.named_modules() if isinstance(m, nn.Embedding)]
        raise ValueError(f"apply_alibi looked for the position embedding {attribute!r} "
                         f"(position_embedding_attribute) in {type(model).__name__}, which has no nn.Embedding "
                         f"there; its nn.Embedding modules are: {_names(found)}. Pass position_embedding_attribute="
                         f"the dotted name of the one that embeds positions")
    return embedding


def _attention_modules(model: nn.Module, attention_module: Optional[type],
                       attr_to_replace: str) -> list[tuple[str, nn.Module]]:
    """The ``(name, module)`` pairs of ``model`` that are ``attention_module`` instances with a
    method ``attr_to_replace``; None: modules of the class named ``CausalSelfAttention``
    (TinyGPT's), found by name because algorithms import only the core, not the models."""
    wanted, found = _find_attention(model, attention_module)
    if not found:
        classes = [type(m).__name__ for m in model.modules()]
        raise ValueError(f"apply_alibi looked for {wanted} modules (attention_module) in "
                         f"{type(model).__name__} and found none; its module classes are: {_names(classes)}. "
                         f"Pass attention_module= the class of its attention layers")
    if not callable(getattr(found[0][1], attr_to_replace, None)):
        cls = type(found[0][1])
        methods = [n for n in dir(cls) if callable(getattr(cls, n, None))
                   and not hasattr(nn.Module, n) and not n.startswith("__")]
        raise ValueError(f"apply_alibi looked for the method {attr_to_replace!r} (attr_to_replace) of "
                         f"{wanted} to replace with alibi_attention, and it has none; its "
                         f"methods are: {_names(methods)}. Pass attr_to_replace= the method that computes "
                         f"attention from queries, keys and values")
    return found


def _find_attention(model: nn.Module, attention_module: Optional[type]) -> tuple[str, list[tuple[str, nn.Module]]]:
    """The attention class's name and the model's modules of that class (by name when None)."""
    if attention_module is None:
        return DEFAULT_ATTENTION, [(name, m) for name, m in model.named_modules()
                                   if type(m).__name__ == DEFAULT_ATTENTION]
    if isinstance(attention_module, type):
        return attention_module.__name__, [(name, m) for name, m in model.named_modules()
                                           if isinstance(m, attention_module)]
    raise TypeError(f"attention_module must be the class of the model's attention layers (e.g. "
                    f"CausalSelfAttention), got {type(attention_module).__name__} {attention_module!r}; "
                    f"pass the class itself, not its name")


def _heads(module: nn.Module) -> Optional[int]:
    """The head count the module states (``n_heads`` or ``num_heads``), if it states one."""
    heads = getattr(module, "n_heads", getattr(module, "num_heads", None))
    return heads if isinstance(heads, int) else None


def _check_heads(heads_per_layer: Optional[int], modules: list[tuple[str, nn.Module]]) -> int:
    """``heads_per_layer``, read from the modules when None, and checked against what they state."""
    for name, module in modules:
        stated = _heads(module)
        if heads_per_layer is None:
            heads_per_layer = stated
        if stated is not None and stated != heads_per_layer:
            raise ValueError(f"heads_per_layer={heads_per_layer} but {name} ({type(module).__name__}) has "
                             f"{stated} heads; pass heads_per_layer={stated}")
    if heads_per_layer is None:
        raise ValueError(f"heads_per_layer is None and {type(modules[0][1]).__name__} states no n_heads or "
                         f"num_heads; pass heads_per_layer= the number of attention heads per layer")
    return check_positive("heads_per_layer", heads_per_layer, integer=True)


def _zero_and_freeze(embedding: nn.Embedding, length: int) -> None:
    """Make ``embedding`` ``length`` rows of zeros that do not train."""
    old = embedding.weight
    embedding.weight = nn.Parameter(torch.zeros(length, old.shape[1], dtype=old.dtype, device=old.device),
                                    requires_grad=False)
    embedding.num_embeddings = length


def apply_alibi(model: nn.Module, heads_per_layer: Optional[int], max_sequence_length: int,
                position_embedding_attribute: str = "position_embedding",
                attention_module: Optional[type] = None, attr_to_replace: str = "_attn",
                alibi_attention: Callable[..., Any] = alibi_attention,
                mask_replacement_function: Optional[Callable[[nn.Module, int], nn.Module]] = None) -> list[str]:
    """Give ``model`` ALiBi in place; returns the names of the modules changed: the position
    embedding (now ``max_sequence_length`` frozen rows of zeros), then each attention module
    (slopes buffer ``alibi_slopes``, ``attr_to_replace`` bound to ``alibi_attention``, then
    ``mask_replacement_function(module, max_sequence_length)`` when given; a module it returns
    in place of the one it got takes that one's place).

    ``attention_module`` None finds TinyGPT's ``CausalSelfAttention`` by its class name.
    ``heads_per_layer`` None reads it from the attention modules' ``n_heads`` / ``num_heads``.
    Everything is checked before anything changes.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"apply_alibi needs a torch.nn.Module, got {type(model).__name__}; pass the model itself")
    check_positive("max_sequence_length", max_sequence_length, integer=True)
    embedding = _position_embedding(model, position_embedding_attribute)
    modules = _attention_modules(model, attention_module, attr_to_replace)
    slopes = alibi_slopes(_check_heads(heads_per_layer, modules))
    _zero_and_freeze(embedding, max_sequence_length)
    for name, module in modules:
        anchor = next(iter(module.parameters()), embedding.weight)
        module.register_buffer(SLOPES_BUFFER, slopes.to(anchor.device))
        setattr(module, attr_to_replace, MethodType(alibi_attention, module))
        if mask_replacement_function is not None:
            replacement = mask_replacement_function(module, max_sequence_length)
            if replacement is not module:
                model.set_submodule(name, replacement)
    return [position_embedding_attribute] + [name for name, _ in modules]


def _cut(value: Any, shape: torch.Size, piece: int) -> Any:
    """``value`` cut into rows of ``piece`` positions if it is per token (its first two
    dimensions are ``shape``, the inputs' ``(N, T)``); anything else as it is."""
    if not (isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[:2] == shape):
        return value
    kept = shape[1] // piece * piece
    return value[:, :kept].reshape(-1, piece, *value.shape[2:])


def scale_sequence_length(input: torch.Tensor, target: torch.Tensor,
                          scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut ``(N, T)`` inputs and targets into pieces of ``int(T * scale)`` tokens, stacked as more
    rows (tokens past the last whole piece are dropped): the same tokens in shorter sequences."""
    shape = input.shape[:2]
    piece = max(1, int(shape[1] * scale))
    return _cut(input, shape, piece), _cut(target, shape, piece)


def scale_batch_sequence_length(batch: Any, inputs: torch.Tensor, scale: float) -> Any:
    """:func:`scale_sequence_length` applied to every per-token entry of ``batch`` (those shaped
    like the ``(N, T)`` ``inputs``: targets, a Hugging Face batch's attention mask), so they stay
    aligned; a tuple, list or dict batch keeps its type."""
    shape = inputs.shape[:2]
    piece = max(1, int(shape[1] * scale))
    if isinstance(batch, Mapping):
        return {key: _cut(value, shape, piece) for key, value in batch.items()}
    return type(batch)(_cut(value, shape, piece) for value in batch)


class Alibi(StateDictSurgery):
    """Applies :func:`apply_alibi` at INIT and, while training, shortens each batch's sequences by
    ``train_sequence_length_scaling`` (:func:`scale_batch_sequence_length`: inputs, targets and any
    other per-token entry, such as an attention mask) at AFTER_DATALOADER, so a
    model trains on short sequences and is evaluated on the full length, as in Composer.

    Args:
        max_sequence_length: the longest sequence the model reads after surgery.
        heads_per_layer: attention heads per layer; None reads them from the attention modules.
        position_embedding_attribute, attention_module, attr_to_replace, alibi_attention,
            mask_replacement_function: as in :func:`apply_alibi` (defaults fit TinyGPT).
        train_sequence_length_scaling: fraction of each training sequence's length to train on
            (1 trains on the full length).
    """

    def __init__(self, max_sequence_length: int = 8192, heads_per_layer: Optional[int] = None,
                 position_embedding_attribute: str = "position_embedding",
                 attention_module: Optional[type] = None, attr_to_replace: str = "_attn",
                 alibi_attention: Callable[..., Any] = alibi_attention,
                 mask_replacement_function: Optional[Callable[[nn.Module, int], nn.Module]] = None,
                 train_sequence_length_scaling: float = 0.25) -> None:
        super().__init__()
        self.max_sequence_length = check_positive("max_sequence_length", max_sequence_length, integer=True)
        self.heads_per_layer = heads_per_layer
        self.position_embedding_attribute = position_embedding_attribute
        self.attention_module = attention_module
        self.attr_to_replace = attr_to_replace
        self.alibi_attention = alibi_attention
        self.mask_replacement_function = mask_replacement_function
        self.train_sequence_length_scaling = check_fraction("train_sequence_length_scaling",
                                                            train_sequence_length_scaling, low_open=True)

    events = frozenset({Event.INIT, Event.AFTER_DATALOADER})
    writes = frozenset({"model", "optimizers", "batch"})

    def match(self, event: Event, state: State) -> bool:
        return event is Event.INIT or (event is Event.AFTER_DATALOADER and self.train_sequence_length_scaling < 1)

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        if event is Event.INIT:
            return super().apply(event, state, logger)
        state.batch = scale_batch_sequence_length(state.batch, state.inputs, self.train_sequence_length_scaling)
        return None

    def operate(self, model: nn.Module, optimizers: list) -> list[str]:
        """:func:`apply_alibi`; the optimizers then hold the new (frozen) position embedding instead
        of the old one."""
        embedding = _position_embedding(model, self.position_embedding_attribute)
        old = embedding.weight
        changed = apply_alibi(model, self.heads_per_layer, self.max_sequence_length, self.position_embedding_attribute,
                           self.attention_module, self.attr_to_replace, self.alibi_attention,
                           self.mask_replacement_function)
        if optimizers:
            update_params_in_optimizer([old], [embedding.weight], optimizers)
        return changed

"""A small causal transformer language model (GPT-style), for the text workload and Alibi.

Token ids ``(N, T)`` go in, next-token logits ``(N, T, vocab_size)`` come out. Positions are
learned embeddings (one row per position up to ``max_sequence_length``), which is what Alibi
replaces with linear attention biases. Attention runs through
``torch.nn.functional.scaled_dot_product_attention`` in :meth:`CausalSelfAttention._attn`, the
one method Alibi's surgery swaps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["TinyGPT", "CausalSelfAttention", "language_model_loss"]


def language_model_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of ``(N, T, V)`` logits against ``(N, T)`` target ids."""
    return F.cross_entropy(logits.flatten(0, -2), targets.flatten())


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which each position sees itself and the positions before it."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be a multiple of n_heads ({n_heads}), so that each head "
                             f"gets d_model // n_heads channels")
        self.n_heads = n_heads
        self.dropout = dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, d = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        return self.proj(self._attn(q, k, v).transpose(1, 2).reshape(n, t, d))

    def _attn(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """Causal attention of ``(N, heads, T, head_dim)`` queries, keys and values."""
        return F.scaled_dot_product_attention(query, key, value, is_causal=True,
                                              dropout_p=self.dropout if self.training else 0.0)


class Block(nn.Module):
    """Pre-norm transformer block: attention, then a 4x-wide GELU MLP, each added to the residual."""

    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, dropout)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model),
                                 nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    """Token and learned position embeddings, ``n_layers`` causal blocks, a final LayerNorm and a
    linear head to next-token logits.

    Args:
        vocab_size: number of token ids (128: the ASCII characters of :mod:`composer_lab.data.text`).
        max_sequence_length: rows of the position embedding, the longest input it accepts.
        d_model: width of the residual stream.
        n_layers: transformer blocks.
        n_heads: attention heads per block.
        dropout: dropout on attention weights and MLP outputs while training.
    """

    def __init__(self, vocab_size: int = 128, max_sequence_length: int = 256, d_model: int = 64, n_layers: int = 2,
                 n_heads: int = 4, dropout: float = 0.0) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.n_heads = n_heads
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_sequence_length, d_model)
        self.blocks = nn.Sequential(*(Block(d_model, n_heads, dropout) for _ in range(n_layers)))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length, longest = tokens.shape[-1], self.position_embedding.num_embeddings
        if length > longest:
            raise ValueError(f"TinyGPT got sequences of {length} tokens but its position embedding has "
                             f"{longest} rows; build it with max_sequence_length >= {length}, or apply Alibi "
                             f"with max_sequence_length >= {length}")
        positions = torch.arange(length, device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        return self.head(self.norm(self.blocks(x)))

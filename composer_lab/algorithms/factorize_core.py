"""Low-rank factorization of linear maps and convolutions (the math behind Factorize).

A map ``Y = X @ W + b`` of rank up to ``min(D, M)`` is approximated by ``X @ Wa @ Wb + b'`` with
``Wa`` ``[D, k]`` and ``Wb`` ``[k, M]``: started from the truncated SVD of ``W``, then refined by
alternating least squares on the activations ``X``, so the error is measured where the layer
is used. A ``k x k`` convolution factorizes into a ``k x k`` convolution to ``rank`` channels and
a ``1 x 1`` convolution back, through its unfolded patches.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Union

import torch
import torch.nn.functional as F

__all__ = ["LowRankSolution", "factorize_matrix", "factorize_conv2d", "svd_factors"]


@dataclasses.dataclass
class LowRankSolution:
    """``Wa`` then ``Wb`` (None when not factorized), the bias after them, the latent ``rank``
    (-1: not factorized) and ``nmse``, the output's mean squared error over its variance."""

    Wa: Optional[torch.Tensor] = None
    Wb: Optional[torch.Tensor] = None
    bias: Optional[torch.Tensor] = None
    rank: int = -1
    nmse: float = 0.0


def _lstsq(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.linalg.lstsq(a, b).solution


def _nmse(y: torch.Tensor, y_hat: torch.Tensor) -> float:
    return float(((y - y_hat) ** 2).mean() / y.var())


def svd_factors(w: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(a [D, rank], b [rank, M])`` with ``a @ b`` the best rank-``rank`` approximation of ``w``
    ``[D, M]`` (truncated SVD, the singular values split evenly between the two)."""
    u, s, vt = torch.linalg.svd(w, full_matrices=False)
    root = s[:rank].sqrt()
    return u[:, :rank] * root, vt[:rank] * root[:, None]


def factorize_matrix(X: torch.Tensor, Y: torch.Tensor, Wa: torch.Tensor, Wb: Optional[torch.Tensor] = None,
                     bias: Optional[torch.Tensor] = None, rank: Union[int, float] = 0.25,
                     n_iters: int = 3) -> LowRankSolution:
    """Factors ``Wa [D, rank]``, ``Wb [rank, M]`` and a bias minimizing ``||Y - (X @ Wa @ Wb + bias)||``.

    ``Wa`` is the matrix ``[D, M]`` to factorize, or with ``Wb`` the current factors (to lower
    their rank). ``rank`` < 1 is a fraction of ``D``. A rank at least ``D`` or ``M`` regresses
    ``Y`` on ``X`` (one matrix, rank -1); one at least the current latent rank keeps the factors.
    """
    X, Y, Wa = X.detach(), Y.detach(), Wa.detach()
    Wb = Wb.detach() if Wb is not None else None
    k = int(min(int(rank * X.shape[1]), Wa.shape[1]) if rank < 1 else rank)
    solution = LowRankSolution()
    if bias is not None:
        Y = Y - bias.detach()
        solution.bias = bias.detach()
    if k >= X.shape[1] or k >= Y.shape[1]:
        solution.Wa = _lstsq(X, Y)
        return solution
    if k >= Wa.shape[1]:
        solution.Wa, solution.Wb = Wa, Wb
        return solution
    Wa, Wb = svd_factors(Wa if Wb is None else Wa @ Wb, k)
    Ya = _lstsq(X, Y)  # the best unconstrained map: Wa @ Wb is fit to it
    for _ in range(n_iters):
        Wb = _lstsq(X @ Wa, Y)
        Wa = _lstsq(Wb.T, Ya.T).T
    Y_hat = X @ Wa @ Wb
    new_bias = (Y - Y_hat).mean(dim=0)
    solution.Wa, solution.Wb, solution.rank = Wa, Wb, k
    solution.bias = new_bias if bias is None else new_bias + bias.detach()
    solution.nmse = _nmse(Y, Y_hat + new_bias)
    return solution


def _patches(X: torch.Tensor, kernel_size: tuple, padding: Any = 0, padding_mode: str = "zeros", stride: Any = 1,
             dilation: Any = 1, groups: int = 1) -> torch.Tensor:
    """``X`` (N, C, H, W) as the rows of its ``kernel_size`` patches, ``[N * positions, C * kh * kw]``
    (at stride 1: the most rows)."""
    if max(_pair(dilation)) > 1 or groups != 1:
        raise NotImplementedError(f"factorize_conv2d supports dilation 1 and groups 1, got dilation={dilation}, "
                                  f"groups={groups}")
    if padding_mode != "zeros" and max(_pair(padding)) > 0:
        ph, pw = _pair(padding)
        X, padding = F.pad(X, (pw, pw, ph, ph), mode=padding_mode), 0
    rows = F.unfold(X, kernel_size=kernel_size, padding=padding).transpose(1, 2)
    return rows.reshape(-1, rows.shape[2])


def _pair(value: Any) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value, value)


def _as_matrix(weight: torch.Tensor) -> torch.Tensor:
    return weight.reshape(weight.shape[0], -1).T  # [fan_in, out_channels]


def _as_kernel(mat: Optional[torch.Tensor], kernel_size: tuple) -> Optional[torch.Tensor]:
    return None if mat is None else mat.T.reshape(mat.shape[1], -1, *kernel_size)


def factorize_conv2d(X: torch.Tensor, Wa: torch.Tensor, Wb: Optional[torch.Tensor] = None,
                     rank: Union[int, float] = 0.25, biasA: Optional[torch.Tensor] = None,
                     biasB: Optional[torch.Tensor] = None, n_iters: int = 3, **conv2d_kwargs: Any) -> LowRankSolution:
    """Factors ``Wa [rank, C_in, kh, kw]`` then ``Wb [C_out, rank, 1, 1]`` and a bias approximating the
    convolution ``Wa`` (``[C_out, C_in, kh, kw]``, bias ``biasA``; or the factors ``Wa``, ``Wb`` with
    biases ``biasA``, ``biasB``) on the images ``X``; ``conv2d_kwargs`` are the convolution's
    ``padding``, ``padding_mode``, ``dilation`` and ``groups`` (its stride is not needed)."""
    X, Wa = X.detach(), Wa.detach()
    kernel_size = tuple(Wa.shape[2:])
    conv2d_kwargs.pop("stride", None)
    X_mat = _patches(X, kernel_size, **conv2d_kwargs)
    Wa_mat = _as_matrix(Wa)
    Y = X_mat @ Wa_mat + (biasA.detach() if biasA is not None else 0)
    Wb_mat = None
    if Wb is not None:
        Wb_mat = _as_matrix(Wb.detach())
        Y = Y @ Wb_mat + (biasB.detach() if biasB is not None else 0)
    elif biasB is not None:
        raise ValueError("factorize_conv2d got biasB without Wb; pass Wb, or give the bias as biasA")
    solution = factorize_matrix(X_mat, Y, Wa_mat, Wb_mat, rank=rank, n_iters=n_iters)
    solution.Wa = _as_kernel(solution.Wa, kernel_size)
    solution.Wb = _as_kernel(solution.Wb, (1, 1))
    return solution

"""Layout helpers shared by the torch algorithms (recurrent, chunk, scan).

The public layout is FLA's: q, k ``[B, T, H, K]``, v ``[B, T, HV, V]``, g, beta ``[B, T, HV]``.
The torch algorithms work head-major with the value heads split into ``H`` groups of ``G = HV // H``
(value head ``h`` reads q/k head ``h // G``), so q/k broadcast over the group dimension instead of
being repeated:

    q, k  [B, H, 1, T, K]      v  [B, H, G, T, V]      g, beta  [B, H, G, T]
    state [B, H, G, K, V]
"""
from __future__ import annotations

import os

import torch

L2NORM_EPS = 1e-6


def l2norm_factors(x: torch.Tensor, eps: float = L2NORM_EPS) -> torch.Tensor:
    """``1 / sqrt(sum(x**2, -1) + eps)`` ``[..., 1]`` dropped to ``[...]``: the per-row factor of l2norm."""
    return torch.rsqrt(torch.linalg.vector_norm(x, dim=-1).square() + eps)


def l2norm(x: torch.Tensor, eps: float = L2NORM_EPS) -> torch.Tensor:
    """``x / sqrt(sum(x**2, -1) + eps)``: the q/k normalisation of Qwen3.5 (and FLA's in-kernel one)."""
    return x * l2norm_factors(x, eps)[..., None]


def to_grouped(q, k, v, g, beta):
    """``[B, T, heads, D]`` -> grouped head-major views (see module docstring). No data is copied
    for q/k beyond the transpose; value heads are split, not repeated."""
    B, T, H, K = q.shape
    HV = v.shape[2]
    G = HV // H
    q = q.permute(0, 2, 1, 3).unsqueeze(2)                        # [B, H, 1, T, K]
    k = k.permute(0, 2, 1, 3).unsqueeze(2)                        # [B, H, 1, T, K]
    v = v.permute(0, 2, 1, 3).reshape(B, H, G, T, v.shape[-1])    # [B, H, G, T, V]
    g = g.permute(0, 2, 1).reshape(B, H, G, T)                    # [B, H, G, T]
    beta = beta.permute(0, 2, 1).reshape(B, H, G, T)              # [B, H, G, T]
    return q, k, v, g, beta


def from_grouped_output(o: torch.Tensor) -> torch.Tensor:
    """``[B, H, G, T, V]`` -> ``[B, T, HV, V]``."""
    B, H, G, T, V = o.shape
    return o.reshape(B, H * G, T, V).transpose(1, 2).contiguous()


def state_from_grouped(S: torch.Tensor) -> torch.Tensor:
    """``[B, H, G, K, V]`` -> ``[B, HV, K, V]``."""
    B, H, G, K, V = S.shape
    return S.reshape(B, H * G, K, V)


def grouped_initial_state(initial_state, B: int, H: int, HV: int, K: int, V: int, like: torch.Tensor):
    """The start state ``[B, H, G, K, V]``: a view of ``initial_state`` ``[B, HV, K, V]``, or zeros."""
    if initial_state is None:
        return like.new_zeros(B, H, HV // H, K, V)
    return initial_state.view(B, H, HV // H, K, V)


def triton_interpreting() -> bool:
    """Whether TRITON_INTERPRET asks for Triton's CPU interpreter (kernels then accept CPU tensors)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")

"""Gated RMSNorm: ``weight * rmsnorm(x) * silu(z)`` per value head, applied to the op's output.

Numerics follow transformers' ``Qwen3_5RMSNormGated`` / ``Qwen3NextRMSNormGated``: the variance
and the normalisation in float32, the normalised x rounded back to the input dtype before the
weight multiplies it, the gate's SiLU in float32, the product rounded to the input dtype last.
For float32 inputs those roundings vanish and the code below takes a lean in-place path.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``weight * x / sqrt(mean(x**2, -1) + eps) * silu(z)`` over the last dim.

    Args:
        x: ``[..., V]`` the op's output (any float dtype).
        z: ``[..., V]`` the gate, same shape as x.
        weight: ``[V]``.
        eps: added to the mean square.
    Returns:
        ``[..., V]`` in x's dtype.
    """
    if x.shape != z.shape:
        raise ValueError(f"z must have x's shape {tuple(x.shape)}, got {tuple(z.shape)}")
    if weight.shape != x.shape[-1:]:
        raise ValueError(f"weight must be [{x.shape[-1]}], got {tuple(weight.shape)}")
    dtype = x.dtype
    if dtype == torch.float32 and z.dtype == torch.float32 and weight.dtype == torch.float32:
        # Same math as below, fewer passes and temporaries (this runs on [T, HV, V] activations).
        inv_rms = x.square().mean(-1, keepdim=True).add_(eps).rsqrt_()
        return F.silu(z).mul_(x).mul_(inv_rms).mul_(weight)
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)).to(dtype)
    return ((weight * normed) * F.silu(z.float())).to(dtype)


class GatedRMSNorm(nn.Module):
    """Module form of :func:`gated_rms_norm`; its parameter is ``weight`` ``[V]`` (checkpoint key
    ``linear_attn.norm.weight``)."""

    def __init__(self, hidden_size: int, eps: float = 1e-6, *, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.eps = eps

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """x, z ``[..., V]`` -> ``[..., V]`` in x's dtype."""
        return gated_rms_norm(x, z, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"

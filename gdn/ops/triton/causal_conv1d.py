"""Fused depthwise causal conv1d + SiLU on the GPU (Triton): the kernel behind
``gdn.layers.conv.causal_conv1d`` for CUDA tensors. Same numbers as the torch path: float32
accumulation, taps added oldest first, then bias, then SiLU.

One program computes a ``BT x BD`` tile (tokens x channels) of one batch row. Each of the W taps is
one masked load: from x when the source token is inside the sequence, from the sequence's conv state
when it lies before the start (state column ``W-1 + (pos - start)``), else zero. With ``cu_seqlens``
the start of every token's own sequence bounds the reads, so nothing leaks across sequences.
The final state (a gather of the last W-1 inputs) is left to torch: it is tiny.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import launch


@triton.jit
def _causal_conv1d_fwd_kernel(
    x, w, b, s0, y, cu_seqlens, seq_of_token,
    T, D,
    stride_xb, stride_xt,
    stride_sn, stride_sd, stride_sw,
    W: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_S0: tl.constexpr, IS_VARLEN: tl.constexpr, SILU: tl.constexpr,
):
    i_t, i_d, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    o_t = i_t * BT + tl.arange(0, BT)
    o_d = i_d * BD + tl.arange(0, BD)
    m_t = o_t < T
    m_d = o_d < D
    if IS_VARLEN:
        i_n = tl.load(seq_of_token + o_t, mask=m_t, other=0).to(tl.int64)   # [BT] sequence of each token
        start = tl.load(cu_seqlens + i_n, mask=m_t, other=0).to(tl.int64)
    else:
        i_n = tl.zeros([BT], dtype=tl.int64) + i_b
        start = tl.zeros([BT], dtype=tl.int64)
    # 64-bit offsets: T * D passes 2^31 at long contexts.
    p_x = x + i_b.to(tl.int64) * stride_xb
    b_acc = tl.zeros([BT, BD], dtype=tl.float32)
    for j in tl.static_range(W):
        pos = o_t.to(tl.int64) - (W - 1) + j                                  # [BT] source token
        in_seq = pos >= start
        m_x = (m_t & in_seq)[:, None] & m_d[None, :]
        b_x = tl.load(p_x + pos[:, None] * stride_xt + o_d[None, :], mask=m_x, other=0.0).to(tl.float32)
        if HAS_S0:
            col = pos - start + (W - 1)                                       # state column, in [0, W-2]
            m_s = (m_t & (pos < start))[:, None] & m_d[None, :]
            p_s = s0 + i_n[:, None] * stride_sn + o_d[None, :] * stride_sd + col[:, None] * stride_sw
            b_x += tl.load(p_s, mask=m_s, other=0.0).to(tl.float32)
        b_w = tl.load(w + o_d * W + j, mask=m_d, other=0.0).to(tl.float32)    # [BD]
        b_acc += b_x * b_w[None, :]
    if HAS_BIAS:
        b_acc += tl.load(b + o_d, mask=m_d, other=0.0).to(tl.float32)[None, :]
    if SILU:
        b_acc = b_acc * tl.sigmoid(b_acc)
    p_y = y + i_b.to(tl.int64) * T * D + o_t.to(tl.int64)[:, None] * D + o_d[None, :]
    tl.store(p_y, b_acc.to(y.dtype.element_ty), mask=m_t[:, None] & m_d[None, :])


def causal_conv1d_triton(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    silu: bool = True,
) -> torch.Tensor:
    """Launch the fused conv. Arguments as ``gdn.layers.conv.causal_conv1d`` (already checked):
    x ``[B, T, D]`` (last dim contiguous), weight ``[D, W]``, bias ``[D]`` or None, initial_state
    ``[N, D, W-1]`` or None, cu_seqlens ``[N+1]`` or None (B == 1). Returns y ``[B, T, D]`` in x's
    dtype."""
    B, T, D = x.shape
    W = weight.shape[1]
    if x.stride(2) != 1:
        x = x.contiguous()
    weight = weight.contiguous()
    if bias is not None:
        bias = bias.contiguous()            # (the kernel reads it at b + d: a slice's stride would be lost)
    y = torch.empty(B, T, D, dtype=x.dtype, device=x.device)
    if T == 0:
        return y
    seq_of_token = None
    if cu_seqlens is not None:
        cu_seqlens = cu_seqlens.to(device=x.device, dtype=torch.int64).contiguous()
        seq_of_token = torch.searchsorted(cu_seqlens[1:], torch.arange(T, device=x.device), right=True)
    s0 = initial_state
    strides = (s0.stride(0), s0.stride(1), s0.stride(2)) if s0 is not None else (0, 0, 0)
    BT, BD = 64, 64
    grid = (triton.cdiv(T, BT), triton.cdiv(D, BD), B)
    launch(_causal_conv1d_fwd_kernel, grid,
        x, weight, bias, s0, y, cu_seqlens, seq_of_token,
        T, D,
        x.stride(0), x.stride(1),
        *strides,
        W=W, BT=BT, BD=BD,
        HAS_BIAS=bias is not None, HAS_S0=s0 is not None, IS_VARLEN=cu_seqlens is not None, SILU=silu,
    )
    return y

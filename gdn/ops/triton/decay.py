"""In-chunk decays: the cumulative log-decay of a chunk and its causal decay matrix."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def decay_matrix(b_G, BT: tl.constexpr):
    """D [BT, BT] = e^{G_i - G_j} for j <= i (diagonal included), 0 above: formed from non-positive
    exponents only, so nothing overflows for any g <= 0."""
    o_i = tl.arange(0, BT)
    causal = o_i[:, None] >= o_i[None, :]
    return tl.exp(tl.where(causal, b_G[:, None] - b_G[None, :], float("-inf")))


_FACTOR_SPAN = tl.constexpr(20.0)     # largest G span a chunk's D is factored over: e^20 ~ 5e8, fp32-safe


@triton.jit
def chunk_decay(b_g, BT: tl.constexpr, FACTORED: tl.constexpr = False):
    """In-chunk cumulative log-decay G [BT] and the causal decay matrix D [BT, BT] (decay_matrix).
    FACTORED: D_ij = e^{G_i - m} e^{m - G_j} with m = max G where the chunk's G spans at most
    _FACTOR_SPAN (2 BT exponentials instead of BT^2; the factors within [e^-20, 1] and [1, e^20]
    whatever G itself, e.g. after a gate of -100; ~2e-6 relative error at the span's end where the
    exact form has ~1e-7), decay_matrix elsewhere (a branch per chunk)."""
    b_G = tl.cumsum(b_g, axis=0)
    if FACTORED:
        b_m = tl.max(b_G, axis=0)
        if b_m - tl.min(b_G, axis=0) <= _FACTOR_SPAN:
            o_i = tl.arange(0, BT)
            b_D = tl.where(o_i[:, None] >= o_i[None, :], tl.exp(b_G - b_m)[:, None] * tl.exp(b_m - b_G)[None, :], 0.0)
        else:
            b_D = decay_matrix(b_G, BT)
    else:
        b_D = decay_matrix(b_G, BT)
    return b_G, b_D

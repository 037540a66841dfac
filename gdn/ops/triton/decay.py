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


@triton.jit
def chunk_decay(b_g, BT: tl.constexpr):
    """In-chunk cumulative log-decay G [BT] and the causal decay matrix D [BT, BT] (decay_matrix)."""
    b_G = tl.cumsum(b_g, axis=0)
    return b_G, decay_matrix(b_G, BT)

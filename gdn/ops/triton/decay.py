"""In-chunk decays: the cumulative log-decay of a chunk and its causal decay matrix."""
from __future__ import annotations

import triton
import triton.language as tl

_LOG2E = tl.constexpr(1.4426950408889634)        # e^x = 2^(x log2 e)
# Any g below this is a reset: e^-128 is 0 in float32 (under its least subnormal, e^-103.3), so the
# floor changes no decay where g <= 0, and keeps -inf out of the differences of cumulative sums
# (-inf - -inf is NaN), which would make every output of a sequence NaN.
G_FLOOR = tl.constexpr(-128.0)


@triton.jit
def floored(b_g):
    """The log decays g as loaded, floored at G_FLOOR: g = -inf (a hard reset) as -128, NaN kept."""
    return tl.maximum(b_g, G_FLOOR, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def exp_ftz(x):
    """e^x as 2^(x log2 e) by Triton's exp2, whose ex2 flushes results below 2^-126 to zero. Triton's
    exp keeps them subnormal, with a compare, two multiplies and a select around each ex2 (~100 of
    walk_gluon_t's 1368 loop instructions a chunk; 1266 with this, and 4.5% faster, NOTES v23). These
    exponentials are decays: one below 2^-126 weighs nothing beside the terms it is added to."""
    return tl.exp2(x * _LOG2E)


@triton.jit
def decay_matrix(b_G, BT: tl.constexpr, TRANSPOSED: tl.constexpr = False):
    """D [BT, BT] = e^{G_i - G_j} for j <= i (diagonal included), 0 above: formed from non-positive
    exponents only, so nothing overflows for any g <= 0 (exp_ftz: entries below 2^-126 are 0; with
    the keys' norm factors applied once a chunk, wy.scaled_gram, the WY pass 10% faster on an H200,
    benchmarks/NOTES.md v32). TRANSPOSED: D^T, the same entries formed in place (no layout change)."""
    o_i = tl.arange(0, BT)
    if TRANSPOSED:
        return exp_ftz(tl.where(o_i[:, None] <= o_i[None, :], b_G[None, :] - b_G[:, None], float("-inf")))
    return exp_ftz(tl.where(o_i[:, None] >= o_i[None, :], b_G[:, None] - b_G[None, :], float("-inf")))


@triton.jit
def chunk_decay(b_g, BT: tl.constexpr, TRANSPOSED: tl.constexpr = False):
    """In-chunk cumulative log-decay G [BT] and the causal decay matrix D [BT, BT] (decay_matrix; D^T
    with TRANSPOSED)."""
    b_G = tl.cumsum(b_g, axis=0)
    return b_G, decay_matrix(b_G, BT, TRANSPOSED)

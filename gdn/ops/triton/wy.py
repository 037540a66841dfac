"""The chunk math of gdn.ops.wy as Triton device functions, shared by every kernel that walks chunks.

For one chunk of BT tokens (rows), with G the in-chunk cumulative log-decay:
    D_ij = e^{G_i - G_j} for j <= i, else 0          (formed from non-positive exponents only)
    A    = beta_i (k_i . k_j) D_ij for j < i           (strictly lower)
    T    = (I + A)^-1
    u    = T diag(beta) v,   w = T diag(beta e^G) k    (the WY factors; writes are U = u - w S)
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def chunk_decay(b_g, BT: tl.constexpr):
    """In-chunk cumulative log-decay G [BT] and the causal decay matrix D [BT, BT] (diagonal included)."""
    b_G = tl.cumsum(b_g, axis=0)
    o_i = tl.arange(0, BT)
    causal = o_i[:, None] >= o_i[None, :]
    b_D = tl.exp(tl.where(causal, b_G[:, None] - b_G[None, :], float("-inf")))
    return b_G, b_D


@triton.jit
def unit_lower_inverse(b_A, BT: tl.constexpr, BLOCK: tl.constexpr, LOG_BLOCKS: tl.constexpr):
    """(I + A)^-1 for a strictly lower-triangular fp32 tile A [BT, BT]; LOG_BLOCKS = log2(BT / BLOCK).

    1. The BLOCK x BLOCK diagonal blocks, all at once, by forward substitution over their BLOCK rows
       (row r of every block in one step: elementwise work, no matrix units).
    2. With X = (I + A_diag)^-1 and N = X A_off (strictly block-lower, so N^(BT/BLOCK) = 0):
       (I + A)^-1 = (I + N)^-1 X = (I - N)(I + N^2)(I + N^4)... X: a few BT^3 products.
    """
    o_i = tl.arange(0, BT)
    same_block = (o_i[:, None] // BLOCK) == (o_i[None, :] // BLOCK)
    eye = tl.where(o_i[:, None] == o_i[None, :], 1.0, 0.0)
    b_Ad = tl.where(same_block, b_A, 0.0)
    b_X = eye
    for r in tl.static_range(1, BLOCK):
        sel = (o_i % BLOCK) == r
        # Row r of every diagonal block, each in its own block's columns.
        b_a = tl.sum(tl.where(sel[:, None], b_Ad, 0.0), axis=0)
        # Its product with the rows already solved (block-local because X is block-diagonal).
        b_t = tl.sum(b_a[:, None] * b_X, axis=0)
        b_X = tl.where(sel[:, None] & same_block, eye - b_t[None, :], b_X)
    if BT > BLOCK:
        b_N = tl.dot(b_X, tl.where(same_block, 0.0, b_A), input_precision="tf32x3")
        b_R = eye - b_N
        b_P = b_N
        for _ in tl.static_range(1, LOG_BLOCKS):
            b_P = tl.dot(b_P, b_P, input_precision="tf32x3")
            b_R = tl.dot(b_R, eye + b_P, input_precision="tf32x3")
        b_X = tl.dot(b_R, b_X, input_precision="tf32x3")
    return b_X


@triton.jit
def chunk_wy_inverse(b_k, b_rk, b_beta, b_D, BT: tl.constexpr, BLOCK: tl.constexpr, LOG_BLOCKS: tl.constexpr,
                     PRECISION: tl.constexpr):
    """T = (I + A)^-1 with A_ij = beta_i (k_i . k_j) r_i r_j D_ij, j < i: b_k [BT, BK] the keys as
    stored (fp32 keys multiply at PRECISION), b_rk [BT] their l2-norm factors."""
    o_i = tl.arange(0, BT)
    if b_k.dtype == tl.float32:
        b_kk = tl.dot(b_k, tl.trans(b_k), input_precision=PRECISION)
    else:
        b_kk = tl.dot(b_k, tl.trans(b_k))
    b_A = tl.where(o_i[:, None] > o_i[None, :], (b_beta * b_rk)[:, None] * b_kk * b_rk[None, :] * b_D, 0.0)
    return unit_lower_inverse(b_A, BT, BLOCK, LOG_BLOCKS)

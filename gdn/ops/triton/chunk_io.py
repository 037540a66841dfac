"""One chunk's tiles in and out of memory, as every kernel reads and writes them: a chunk's q, k, g
and beta with the keys' and queries' l2-norm factors (load_chunk), the cumulative log-decays the
WY pass stores (load_chunk_decays), and the [BT, BT] tiles it stores for the walks (store_square,
load_chunk_square: T diag(beta) and the output attention, as two bf16 parts or one fp16 tile;
store_t_f16: the fp16 T diag(beta) with its low parts where a chunk needs them).
Rows are tokens of [tokens, heads, dim] tensors (gdn.ops.triton.addressing)."""
from __future__ import annotations

import triton
import triton.language as tl

from ..common import L2NORM_EPS
from .addressing import load_rows, row_vec
from .decay import floored
from .split_dot import store_parts

_L2NORM_EPS = tl.constexpr(L2NORM_EPS)       # the torch algorithms' eps (gdn.ops.common), in the kernels


@triton.jit
def l2norm_factors(b_sq):
    """The l2norm factors 1 / sqrt(sq + eps) [rows] from the rows' sums of squares."""
    return tl.rsqrt(b_sq + _L2NORM_EPS)


@triton.jit
def l2norm_rows(b_x):
    """The l2norm factors [rows] of a tile's rows, summed in fp32."""
    b_xf = b_x.to(tl.float32)
    return l2norm_factors(tl.sum(b_xf * b_xf, axis=1))


@triton.jit
def load_chunk(q, k, g, beta, tok0, t0, T_seq, i_h, i_hv,
                H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                USE_L2NORM: tl.constexpr, DOT_DTYPE: tl.constexpr, WITH_Q: tl.constexpr = True,
                rq=None, rk=None, NORMS_IN: tl.constexpr = False, TMA: tl.constexpr = False):
    """One chunk's q, k [BT, BK] in DOT_DTYPE, as stored; their l2-norm factors r_q, r_k [BT] (ones
    without l2norm); g, beta [BT] fp32; the chunk's first token row0 (int64), o_t = 0..BT-1 and the
    mask of rows before T_seq. Rows past T_seq are zero (g = beta = 0: the identity map).
    With WITH_Q=False, q is not read (zeros). With NORMS_IN, the norm factors are read from rq, rk
    [tokens, HV] (stored by wy_kernel) instead of being summed from fp32 copies of the tiles. With TMA,
    q and k are descriptors of this sequence and head (addressing.rows_desc).

    The normalisation is never applied to the tiles: it is a per-row scaling that every product below
    applies to its fp32 result, so normalised keys are not rounded back to bf16."""
    row0 = tok0 + t0
    o_t = tl.arange(0, BT)
    m_t = (t0 + o_t) < T_seq
    if WITH_Q:
        b_q = load_rows(q, tok0, i_h, T_seq, t0, H, K, BT, BK, 0, TMA)
    else:
        b_q = tl.zeros([BT, BK], dtype=DOT_DTYPE)
    b_k = load_rows(k, tok0, i_h, T_seq, t0, H, K, BT, BK, 0, TMA)
    if USE_L2NORM and NORMS_IN:
        b_rq = tl.load(row_vec(rq, row0, i_hv, HV, o_t), mask=m_t, other=0.0)
        b_rk = tl.load(row_vec(rk, row0, i_hv, HV, o_t), mask=m_t, other=0.0)
    elif USE_L2NORM:
        b_rq = l2norm_rows(b_q)
        b_rk = l2norm_rows(b_k)
    else:
        b_rq = tl.full([BT], 1.0, dtype=tl.float32)
        b_rk = tl.full([BT], 1.0, dtype=tl.float32)
    b_g = floored(tl.load(row_vec(g, row0, i_hv, HV, o_t), mask=m_t, other=0.0).to(tl.float32))
    b_beta = tl.load(row_vec(beta, row0, i_hv, HV, o_t), mask=m_t, other=0.0).to(tl.float32)
    return b_q.to(DOT_DTYPE), b_k.to(DOT_DTYPE), b_rq, b_rk, b_g, b_beta, row0, o_t, m_t


@triton.jit
def load_chunk_decays(Gc, row0, t0, T_seq, i_hv, HV: tl.constexpr, BT: tl.constexpr, o_t, m_t):
    """A chunk's cumulative log-decays G [BT] as this pass stored them (store G_out) and G_last, its
    last token's; rows past the sequence's end take G_last (identity rows)."""
    b_G_last = tl.load(Gc + (row0 + tl.minimum(BT, T_seq - t0) - 1) * HV + i_hv)
    b_G = tl.where(m_t, tl.load(row_vec(Gc, row0, i_hv, HV, o_t), mask=m_t, other=0.0), b_G_last)
    return b_G, b_G_last


@triton.jit
def store_square(p, p2, b, mask, F16: tl.constexpr):
    """A chunk's fp32 [BT, BT] tile for the walk: two bf16 parts at p, p2, or (F16) one fp16 tile at p."""
    if F16:
        tl.store(p, b.to(tl.float16), mask=mask)
    else:
        store_parts(p, p2, p2, b, mask, 2)


@triton.jit
def store_t_f16(p, b_Tb, mask, LOW, BT: tl.constexpr):
    """T diag(beta) [BT, BT] fp32 (lower triangular) as the fp16 walk's one fp16 tile at p; where LOW (an
    int32 1 a chunk, else 0) also each strictly lower entry's rounding residual Tb - fp16(Tb), rounded
    to fp16, at its transposed place: the tile's strictly upper triangle, zero otherwise. The walks
    add that part's product where the chunk's flag (the WY pass's t_low) says so
    (walk_f16.low_part_fix): with beta near 2 on near-parallel keys T diag(beta)'s rows alternate in
    sign, and its fp16 rounding, the same in every such chunk, grew into the state (NOTES.md v67)."""
    b_hi = b_Tb.to(tl.float16)
    if LOW:
        o_i = tl.arange(0, BT)
        b_lo = tl.where(o_i[:, None] > o_i[None, :], b_Tb - b_hi.to(tl.float32), 0.0)
        b_hi = (b_hi.to(tl.float32) + tl.trans(b_lo)).to(tl.float16)      # disjoint triangles: exact
    tl.store(p, b_hi, mask=mask)


@triton.jit
def load_chunk_square(p, p2, tok0, i_hv, T_seq, t0, HV: tl.constexpr, BT: tl.constexpr, DOT_DTYPE: tl.constexpr,
                      TMA: tl.constexpr = False):
    """A chunk's [BT, BT] tile that this pass stored as two bf16 parts at p, p2 [tokens, HV, BT]
    (the output attention of store_attention, or T diag(beta)): the two parts in DOT_DTYPE, rows past
    the sequence's end zero. With TMA, p and p2 are descriptors of this sequence and head."""
    b_1 = load_rows(p, tok0, i_hv, T_seq, t0, HV, BT, BT, BT, 0, TMA).to(DOT_DTYPE)
    b_2 = load_rows(p2, tok0, i_hv, T_seq, t0, HV, BT, BT, BT, 0, TMA).to(DOT_DTYPE)
    return b_1, b_2

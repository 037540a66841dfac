"""The lean state walk (opt-in, ``walk="lean"``): the intra-chunk attention moved into the WY pass.

Per chunk, with S the state at its start, q~ = diag(r_q scale e^G) q and attn = (q k^T . D) with the
norm factors and scale inside (causal, diagonal included), the outputs are
    o = q~ S + attn (u - w S) = (q~ - M_w k) S + M_u v,    M = attn (I + A)^-1,
    M_w = M diag(beta r_k e^G),  M_u = M diag(beta)
so the parallel WY pass can emit q' = q~ - M_w k (two bf16 parts) and o_loc = M_u v (fp32), and the
sequential walk keeps only the products with S: U = u - w S, o = o_loc + q' S, S <- e^{G_C} S +
(k r_k e^{G_C - G})^T U. That takes q k^T, its decay tile and (q k^T . D) U off the walk's chain, for
twice the bytes between the two passes. Measured: not yet (benchmarks/NOTES.md, v4).
"""
from __future__ import annotations

import triton
import triton.language as tl

from .addressing import row_offsets, row_tile
from .decay import decay_matrix
from .split_dot import bf16_parts, dot_parts, split_dot, store_parts


@triton.jit
def output_factors(q, k, v, qp_out, qp2_out, oloc_out, b_k, b_T, b_G, b_beta, b_rq, b_rk, scale, row0,
                   i_h, i_hv, o_t, m_t, H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                   BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BC: tl.constexpr,
                   DOT_DTYPE: tl.constexpr):
    """q' [tokens, HV, K] as two bf16 parts at qp_out, qp2_out and o_loc [tokens, HV, V] fp32 at
    oloc_out for one chunk (module docstring). b_k [BT, BK] the chunk's keys as stored, b_T the
    chunk's (I + A)^-1, b_G its cumulative log-decays, b_rq, b_rk the norm factors (ones without
    l2norm). Every product here feeds outputs only, never the state, so two bf16 parts (16 bits,
    against the output's own 8) are enough: half the products and registers of three."""
    o_k = tl.arange(0, BK)
    b_q = tl.load(row_tile(q, row0, i_h, H, K, o_t, o_k), mask=m_t[:, None] & (o_k < K)[None, :],
                  other=0.0).to(DOT_DTYPE)
    b_D = decay_matrix(b_G, BT)                  # recomputed, not passed in: one tile fewer live
    b_attn = tl.dot(b_q, tl.trans(b_k)) * b_D * (b_rq * scale)[:, None] * b_rk[None, :]
    b_M = split_dot(b_attn, b_T, None, 2, True, True, DOT_DTYPE)
    o_c = tl.arange(0, BC)
    b_Mu = b_M * b_beta[None, :]
    for c0 in tl.static_range(0, BV, BC):
        m_tc = m_t[:, None] & ((c0 + o_c) < V)[None, :]
        b_v = tl.load(row_tile(v, row0, i_hv, HV, V, o_t, c0 + o_c), mask=m_tc, other=0.0).to(DOT_DTYPE)
        b_ol = split_dot(b_Mu, b_v, None, 2, True, False, DOT_DTYPE)
        tl.store(row_tile(oloc_out, row0, i_hv, HV, V, o_t, c0 + o_c), b_ol, mask=m_tc)
    b_Mw = b_M * (-b_beta * b_rk * tl.exp(b_G))[None, :]
    b_qs = b_rq * scale * tl.exp(b_G)
    for c0 in tl.static_range(0, BK, BC):
        m_tc = m_t[:, None] & ((c0 + o_c) < K)[None, :]
        b_kc = tl.load(row_tile(k, row0, i_h, H, K, o_t, c0 + o_c), mask=m_tc, other=0.0).to(DOT_DTYPE)
        b_qc = tl.load(row_tile(q, row0, i_h, H, K, o_t, c0 + o_c), mask=m_tc, other=0.0).to(tl.float32)
        b_qp = split_dot(b_Mw, b_kc, b_qc * b_qs[:, None], 2, True, False, DOT_DTYPE)
        o_w = row_offsets(row0, i_hv, HV, K, o_t, c0 + o_c)
        store_parts(qp_out + o_w, qp2_out + o_w, qp2_out + o_w, b_qp, m_tc, 2)


@triton.jit
def lean_step(b_S, b_k, b_w, b_w2, b_qp, b_qp2, b_u, b_ol, b_rk, b_g, DOT_DTYPE: tl.constexpr):
    """One chunk of the lean walk on a [BK, BV] block of the state: returns the next state and the
    chunk's outputs [BT, BV] fp32. b_k [BT, BK] as stored; w and q' as two bf16 parts each; b_u, b_ol
    [BT, BV] fp32; b_rk the keys' norm factors; b_g the chunk's log-decays."""
    b_G_last = tl.sum(b_g, axis=0)
    b_G = tl.cumsum(b_g, axis=0)
    # The parts of -S serve both products: U = u + w (-S), and -o = -o_loc + q' (-S).
    b_s1, b_s2, b_s3 = bf16_parts(-b_S, 2, DOT_DTYPE)
    b_U = dot_parts(b_w, b_w2, b_w2, 2, b_s1, b_s2, b_s3, 2, b_u)
    b_o = -dot_parts(b_qp, b_qp2, b_qp2, 2, b_s1, b_s2, b_s3, 2, -b_ol)
    b_Uc = b_U * (b_rk * tl.exp(b_G_last - b_G))[:, None]
    b_S = split_dot(tl.trans(b_k), b_Uc, b_S * tl.exp(b_G_last), 2, False, True, DOT_DTYPE)
    return b_S, b_o

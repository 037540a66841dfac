"""The chunk math of gdn.ops.wy in Triton: device functions and the parallel WY kernel.

For one chunk of BT tokens (rows), with G the in-chunk cumulative log-decay and r the keys'
l2-norm factors (ones without l2norm):
    D_ij = e^{G_i - G_j} for j <= i, else 0          (formed from non-positive exponents only)
    A    = beta_i r_i (k_i . k_j) r_j D_ij for j < i   (strictly lower)
    T    = (I + A)^-1
    u    = T diag(beta) v,   w = T diag(beta r e^G) k  (the WY factors; writes are U = u - w S)

(the inverse's algorithms: gdn.ops.triton.inverse; a chunk's loads and the tiles stored for the
walks: gdn.ops.triton.chunk_io).

``wy_kernel`` computes for every chunk of every sequence and head at once what does not depend on
the state, so the sequential state walk only multiplies: u and w, or (the default on the bf16 path)
T diag(beta) itself, from which the walk forms U = T diag(beta) (v - diag(r e^G) k S), and the
output attention.

With bf16 inputs the products can run as split products (gdn.ops.triton.split_dot).
"""
from __future__ import annotations

import triton
import triton.language as tl

from ..common import triton_interpreting
from .addressing import decay_ptrs, row_offsets, row_offsets_t, row_tile, row_vec
from .chunk_io import l2norm_factors, l2norm_rows, load_chunk, store_square, store_t_f16
from .decay import chunk_decay, floored
from .inverse import f16_out_of_range, inverse_subst, inverse_tf32x3, unit_lower_inverse
from .split_dot import split_dot, store_parts, tile_max
from .split_walk import feed_chunk, forgets


_READ_CTAID = tl.constexpr(not triton_interpreting())    # (the interpreter runs no inline assembly)


@triton.jit
def fresh_program_id():
    """tl.program_id(0) of a one-dimensional grid, read again from the hardware's register by an
    instruction the compiler cannot merge with the first reading: what is derived from it at a
    kernel's end is then not kept live through the kernel (in the interpreter: program_id)."""
    if _READ_CTAID:
        return tl.inline_asm_elementwise("mov.u32 $0, %ctaid.x;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
    else:
        return tl.program_id(0)


@triton.jit
def fresh_int(x):
    """An int32 scalar x, as a value the compiler cannot merge with x itself: what a kernel's second
    phase derives from its arguments is then formed again there, not kept live through the first."""
    if _READ_CTAID:
        # (x plus a zero the compiler cannot see through: x may be a constant, an int Triton folded.)
        return x + tl.inline_asm_elementwise("mov.u32 $0, 0;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
    else:
        return x


@triton.jit
def counting_head(i_hv, H: tl.constexpr, HV: tl.constexpr, SHARED_QK: tl.constexpr):
    """The head whose done count (SIGNAL / the walk's WAIT) chunks of value head i_hv add to and wait
    on: i_hv itself, or with SHARED_QK (the fp16 walk, whose q and k the first value head of each
    group stores) the group's first, which then counts HV // H per chunk."""
    if SHARED_QK:
        return i_hv // (HV // H) * (HV // H)
    return i_hv


@triton.jit
def chunk_wy_inverse(b_k, b_rk, b_beta, b_D, BT: tl.constexpr, BLOCK: tl.constexpr, LOG_BLOCKS: tl.constexpr,
                     PRECISION: tl.constexpr, INVERSE: tl.constexpr, F16_DOT: tl.constexpr = tl.float16):
    """T = (I + A)^-1 with A_ij = beta_i (k_i . k_j) r_i r_j D_ij, j < i: b_k [BT, BK] the keys as
    stored (fp32 keys multiply at PRECISION), b_rk [BT] their l2-norm factors (F16_DOT: the dtype of
    the fp16 products of INVERSE="blocks_f16", fp32 in Triton's interpreter)."""
    if b_k.dtype == tl.float32:
        b_kk = tl.dot(b_k, tl.trans(b_k), input_precision=PRECISION)
    else:
        b_kk = tl.dot(b_k, tl.trans(b_k))
    return unit_lower_inverse(chunk_A(scaled_gram(b_kk, b_rk), b_beta, b_D, BT), BT, BLOCK, LOG_BLOCKS, INVERSE,
                              F16_DOT)


@triton.jit
def scaled_gram(b_xy, b_rx, b_ry=None):
    """r_x,i (x_i . y_j) r_y,j [BT, BT] from the products x y^T of the vectors as stored and their norm
    factors r_x [BT] (r_y: r_x where None): formed once a chunk, before the value heads' decays."""
    if b_ry is None:
        b_ry = b_rx
    return b_xy * b_rx[:, None] * b_ry[None, :]


@triton.jit
def chunk_A(b_kkn, b_beta, b_D, BT: tl.constexpr, TRANSPOSED: tl.constexpr = False):
    """A [BT, BT] = beta_i r_i (k_i . k_j) r_j D_ij below the diagonal, 0 elsewhere, from the normalised
    keys' products r_i (k_i . k_j) r_j [BT, BT] (scaled_gram), beta [BT] and D [BT, BT]. TRANSPOSED:
    A^T from D^T (decay_matrix's), the keys' products being symmetric."""
    o_i = tl.arange(0, BT)
    if TRANSPOSED:
        return tl.where(o_i[:, None] < o_i[None, :], b_beta[None, :] * b_kkn * b_D, 0.0)
    return tl.where(o_i[:, None] > o_i[None, :], b_beta[:, None] * b_kkn * b_D, 0.0)


@triton.jit
def store_attention(attn_out, attn2_out, b_qkn, b_D, row0, i_hv, o_t, m_t,
                    HV: tl.constexpr, BT: tl.constexpr, F16: tl.constexpr = False, TRANSPOSED: tl.constexpr = False):
    """The chunk's output attention P = diag(scale r_q) (q k^T . D) diag(r_k) [BT, BT] (causal, diagonal
    included) as two bf16 parts at attn_out, attn2_out [tokens, HV, BT]: row i of the chunk at token
    row0 + i. The state walk's outputs are (q S) e^G (scaled) + P U; with P stored, the walk forms no
    q k^T and no decay tile. b_qkn [BT, BT] the products of the queries and keys as stored, scaled by
    scale r_q and r_k (scaled_gram: once for a chunk's value heads), b_D the decay matrix. Two parts:
    16 bits, where the output keeps 8. F16: one fp16 tile at attn_out (11 bits; |entries| <= |scale|
    with l2-normalised q and k, |scale| |q| |k| without: walk_f16). TRANSPOSED: P^T from (k q^T) scaled and D^T, stored where P
    goes."""
    b_P = b_qkn * b_D
    if TRANSPOSED:
        o_w = row_offsets_t(row0, i_hv, HV, BT, o_t, o_t)
        store_square(attn_out + o_w, attn2_out + o_w, b_P, (o_t < BT)[:, None] & m_t[None, :], F16)
    else:
        o_w = row_offsets(row0, i_hv, HV, BT, o_t, o_t)
        store_square(attn_out + o_w, attn2_out + o_w, b_P, m_t[:, None] & (o_t < BT)[None, :], F16)


@triton.jit
def _t_times_columns(b_Tx, b_x, NSPLIT: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr, DOT_DTYPE: tl.constexpr):
    """b_Tx [BT, BT] fp32 (cut into NSPLIT bf16 parts) @ b_x [BT, BC] in DOT_DTYPE: BC columns of u or
    w. At BT = 64 and BC < 64 as the transposed product (b_x^T b_Tx^T)^T, which runs on mma.sync: the
    direct one's wgmma (m64n32k16, B from shared memory) came out of ptxas (Triton 3.6) reading a
    uniform register that nothing writes, so k-steps 2-4 read B from a wrong address: o 0.6-0.7
    relative error on an H200 at K < 64 (benchmarks/NOTES.md v14; compile_report.py's "ur?" column
    finds such reads)."""
    if BT == 64 and BC < 64:
        return tl.trans(split_dot(tl.trans(b_x), tl.trans(b_Tx), None, NSPLIT, False, True, DOT_DTYPE))
    return split_dot(b_Tx, b_x, None, NSPLIT, True, False, DOT_DTYPE)


@triton.jit
def wy_split_factors(q, k, v, g, beta, w_out, w2_out, w3_out, u_out, rq_out, rk_out, G_out, attn_out, attn2_out,
                     t_out, t2_out, tlow_out, qn_out, kn_out,
                     scale, tok0, t0, T_seq, i_h, i_hv,
                     H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                     BK: tl.constexpr, BV: tl.constexpr, BC: tl.constexpr, BLOCK: tl.constexpr,
                     LOG_BLOCKS: tl.constexpr, USE_L2NORM: tl.constexpr, INVERSE: tl.constexpr,
                     DOT_DTYPE: tl.constexpr, NSPLIT: tl.constexpr, W_PARTS: tl.constexpr,
                     STORE_NORMS: tl.constexpr, STORE_ATTN: tl.constexpr, STORE_T: tl.constexpr = False,
                     F16: tl.constexpr = False, F16_DOT: tl.constexpr = tl.float16, HEADS: tl.constexpr = 1,
                     FALLBACK_AFTER: tl.constexpr = False, g_rows=0, G_BY_HEAD: tl.constexpr = False,
                     STORE_QK: tl.constexpr = True):
    """w and u (or T diag(beta): STORE_T) of one chunk from bf16 k and v, without fp32 copies of
    either: the l2-norms of the keys are the diagonal of k k^T (the same exact products as a sum of
    squares, summed in another order; the queries', needed only here, are a plain sum of squares),
    and T's products with k and v are NSPLIT bf16 products (split_dot), BC columns of w and u at a
    time so that only a [BT, BC] accumulator is live. Only the norm factors of the keys are kept
    across the inverse, as a [BT] vector along rows (2 registers a thread, against 16 along columns).
    STORE_ATTN: also the cumulative log-decays G [tokens, HV] (G_BY_HEAD: [HV, g_rows]) and the
    chunk's output attention (store_attention). STORE_T: instead of w and u, T diag(beta) [BT, BT] as
    two bf16 parts at t_out, t2_out [tokens, HV, BT] (row i of the chunk at token row0 + i): the walk
    then forms U = T diag(beta) (v - diag(r e^G) k S) itself (gdn.ops.triton.chunk_fwd), and this pass
    neither reads v nor writes the 64 KB of w and u a chunk-head. F16 (with STORE_T): T diag(beta) and the
    output attention as one fp16 tile each, and q and k in fp16 (l2-normalised with l2norm) at qn_out,
    kn_out [tokens, H, K] (by the first value head of each group), for the walk on fp16 operands (walk_f16);
    not STORE_QK: no copies (fp16 inputs without l2norm, which the walk reads as they are). With F16
    each chunk's flag goes to tlow_out (int32, G's layout, at the chunk's first row; decay_ptrs): 1
    where the chunk's T was formed at tf32x3 (some |A_ij| > 1: beta past 1 on near-parallel keys), and
    its tile then carries its low parts too (store_t_f16), else 0.
    HEADS: value heads i_hv .. i_hv + HEADS - 1 (all reading q/k head i_h), one after the other: q and
    k loaded once, and k k^T, q k^T and the norm factors formed once for all of them.
    FALLBACK_AFTER (F16 with INVERSE="f16_subst"): every head's fp16 inverse formed unconditionally, its
    range tested after it (f16_out_of_range) and its T stored only where it passes, and the tf32x3
    fallback for the heads that fail after all of them (t_at_tf32x3), so that no branch parts one
    head's chain of products from the next's; otherwise each head's inverse waits behind its range
    test and its fallback (unit_lower_inverse).
    INVERSE="f16_subst_t" (F16 only): inverse_subst on the transposes, from A^T formed in place (D^T
    and P^T too: decay_matrix's and store_attention's TRANSPOSED), T diag(beta) and P stored where
    the untransposed tiles go; without FALLBACK_AFTER a head that needs the fallback takes it right
    after its own store (t_at_tf32x3 either way, so both orders store the same bits).
    """
    TR: tl.constexpr = INVERSE == "f16_subst_t"
    tl.static_assert(not FALLBACK_AFTER or (F16 and STORE_T and STORE_ATTN and (INVERSE == "f16_subst" or TR)),
                     "FALLBACK_AFTER: the fp16 walk's pass with INVERSE='f16_subst' or 'f16_subst_t'")
    tl.static_assert(not TR or (F16 and STORE_T and STORE_ATTN), "INVERSE='f16_subst_t': the fp16 walk's pass")
    row0 = tok0 + t0
    o_t = tl.arange(0, BT)
    m_t = (t0 + o_t) < T_seq
    o_k = tl.arange(0, BK)
    m_qk = m_t[:, None] & (o_k < K)[None, :]
    # The chunk's q, k, g and beta all loaded before the first store: a store may alias a later load
    # as far as the compiler knows, so a load after a store waits for it, and each such round trip
    # leaves the program idle. (Only the w and u path, not the default, loads again after storing.)
    NEED_Q: tl.constexpr = STORE_ATTN or (USE_L2NORM and STORE_NORMS)
    if NEED_Q:
        b_q = tl.load(row_tile(q, row0, i_h, H, K, o_t, o_k), mask=m_qk, other=0.0).to(DOT_DTYPE)
    b_k = tl.load(row_tile(k, row0, i_h, H, K, o_t, o_k), mask=m_qk, other=0.0).to(DOT_DTYPE)
    b_g_all, b_beta_all = load_head_gates(g, beta, row0, i_hv, HV, o_t, m_t, HEADS)
    b_kkn, b_rk = keys_gram(b_k, BT, USE_L2NORM)
    b_rq = tl.full([BT], 1.0, dtype=tl.float32)
    if USE_L2NORM:
        if NEED_Q:
            b_rq = l2norm_rows(b_q)
        if STORE_NORMS:
            # The norm factors for the split walk (it reads no fp32 tiles; the fp16 walk reads q and k
            # normalised instead).
            for j in tl.static_range(HEADS):
                tl.store(row_vec(rq_out, row0, i_hv + j, HV, o_t), b_rq, mask=m_t)
                tl.store(row_vec(rk_out, row0, i_hv + j, HV, o_t), b_rk, mask=m_t)
    if F16 and STORE_QK:
        if i_hv % (HV // H) == 0:
            o_qk = row_offsets(row0, i_h, H, K, o_t, o_k)
            tl.store(kn_out + o_qk, (b_k.to(tl.float32) * b_rk[:, None]).to(tl.float16), mask=m_qk)
            tl.store(qn_out + o_qk, (b_q.to(tl.float32) * b_rq[:, None]).to(tl.float16), mask=m_qk)
    if STORE_ATTN:
        if TR:
            b_qkn = scaled_gram(tl.dot(b_k, tl.trans(b_q)), b_rk, b_rq * scale)        # (q k^T)^T, scaled
        else:
            b_qkn = scaled_gram(tl.dot(b_q, tl.trans(b_k)), b_rq * scale, b_rk)
    if TR:
        m_tt = (o_t < BT)[:, None] & m_t[None, :]          # (the tiles formed transposed: rows along columns)
    else:
        m_tt = m_t[:, None] & (o_t < BT)[None, :]
    wide_bits = 0
    for j in tl.static_range(HEADS):
        i_hvj = i_hv + j
        b_beta = head_column(b_beta_all, j, HEADS)
        b_G, b_D = chunk_decay(head_column(b_g_all, j, HEADS), BT, TR)
        if STORE_ATTN:
            tl.store(decay_ptrs(G_out, row0, o_t, i_hvj, HV, g_rows, G_BY_HEAD), b_G, mask=m_t)
            store_attention(attn_out, attn2_out, b_qkn, b_D, row0, i_hvj, o_t, m_t, HV, BT, F16, TR)
        b_A = chunk_A(b_kkn, b_beta, b_D, BT, TR)
        wide = 0
        if FALLBACK_AFTER or TR:
            # The fp16 inverse unconditionally: no branch between this head and the next.
            b_T = inverse_subst(b_A, BT, F16_DOT, TR)
            wide = f16_out_of_range(b_A, b_T)
            wide_bits += wide << j
            m_ok = m_tt & (wide == 0)
        else:
            b_T = unit_lower_inverse(b_A, BT, BLOCK, LOG_BLOCKS, INVERSE, F16_DOT)
            m_ok = m_tt
            if F16 and STORE_T:
                wide = (tile_max(b_A) > 1.0).to(tl.int32)     # (every inverse form took tf32x3 there)
        if STORE_T:
            if TR:
                o_tt = row_offsets_t(row0, i_hvj, HV, BT, o_t, o_t)
                store_square(t_out + o_tt, t2_out + o_tt, b_T * b_beta[:, None], m_ok, F16)
            elif F16:
                # (A chunk FALLBACK_AFTER forms again is stored by t_at_tf32x3, with its low parts.)
                o_tt = row_offsets(row0, i_hvj, HV, BT, o_t, o_t)
                store_t_f16(t_out + o_tt, b_T * b_beta[None, :], m_ok, 0 if FALLBACK_AFTER else wide, BT)
            else:
                o_tt = row_offsets(row0, i_hvj, HV, BT, o_t, o_t)
                store_square(t_out + o_tt, t2_out + o_tt, b_T * b_beta[None, :], m_ok, F16)
            if F16:
                tl.store(decay_ptrs(tlow_out, row0, 0, i_hvj, HV, g_rows, G_BY_HEAD), wide.to(tl.int32),
                         mask=T_seq > t0)
        else:
            _store_wu(k, v, w_out, w2_out, w3_out, u_out, b_T, b_beta, b_rk, b_G, row0, i_h, i_hvj, o_t, m_t,
                      H, HV, K, V, BT, BK, BV, BC, DOT_DTYPE, NSPLIT, W_PARTS)
        if TR and not FALLBACK_AFTER:
            if wide:
                t_at_tf32x3(k, g, beta, t_out, row0, o_t, m_t, i_h, i_hv, j, H, HV, K, BT, BK, USE_L2NORM,
                            DOT_DTYPE, HEADS)
    if FALLBACK_AFTER:
        # The heads whose chunk leaves fp16's range, formed again from the inputs at tf32x3 (rare: beta
        # past 1, gates that grow, T past 16384), after every head's fp16 path.
        for j in tl.static_range(HEADS):
            if (wide_bits >> j) & 1:
                t_at_tf32x3(k, g, beta, t_out, row0, o_t, m_t, i_h, i_hv, j, H, HV, K, BT, BK, USE_L2NORM,
                            DOT_DTYPE, HEADS)


@triton.jit
def load_head_gates(g, beta, row0, i_hv, HV: tl.constexpr, o_t, m_t, HEADS: tl.constexpr):
    """g (decay.floored) and beta [BT] of value head i_hv, or [BT, HEADS] of heads i_hv .. i_hv +
    HEADS - 1 (adjacent in [tokens, HV]), one column a head; rows past the sequence's end zero."""
    if HEADS == 1:
        b_g = tl.load(row_vec(g, row0, i_hv, HV, o_t), mask=m_t, other=0.0)
        b_beta = tl.load(row_vec(beta, row0, i_hv, HV, o_t), mask=m_t, other=0.0)
    else:
        o_j = tl.arange(0, HEADS)
        b_g = tl.load(row_tile(g, row0, i_hv, HV, 1, o_t, o_j), mask=m_t[:, None], other=0.0)
        b_beta = tl.load(row_tile(beta, row0, i_hv, HV, 1, o_t, o_j), mask=m_t[:, None], other=0.0)
    return floored(b_g), b_beta


@triton.jit
def head_column(b, j, HEADS: tl.constexpr):
    """Head j's [BT] of load_head_gates' tile (the tile itself for one head)."""
    if HEADS > 1:
        b = _column(b, tl.arange(0, HEADS), j)
    return b


@triton.jit
def keys_gram(b_k, BT: tl.constexpr, USE_L2NORM: tl.constexpr):
    """The normalised keys' products r_i (k_i . k_j) r_j [BT, BT] (bf16 products of the keys as stored,
    fp32 sums, then scaled_gram) and their l2-norm factors r_k [BT] from k k^T's diagonal (ones, and
    k k^T itself, without l2norm)."""
    o_i = tl.arange(0, BT)
    b_kk = tl.dot(b_k, tl.trans(b_k))
    b_rk = tl.full([BT], 1.0, dtype=tl.float32)
    if USE_L2NORM:
        b_rk = l2norm_factors(tl.sum(tl.where(o_i[:, None] == o_i[None, :], b_kk, 0.0), axis=1))
        b_kk = scaled_gram(b_kk, b_rk)
    return b_kk, b_rk


@triton.jit
def t_at_tf32x3(k, g, beta, t_out, row0, o_t, m_t, i_h, i_hv, j, H: tl.constexpr, HV: tl.constexpr,
                K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, USE_L2NORM: tl.constexpr,
                DOT_DTYPE: tl.constexpr, HEADS: tl.constexpr):
    """T diag(beta) of value head i_hv + j of one chunk formed again from the inputs, its inverse at
    tf32x3 (inverse_tf32x3, as unit_lower_inverse's fallback), stored in fp16 at t_out. k k^T, r_k,
    G, D and A as the fp16 path formed them (the same loads, products and sums, bit for bit),
    nothing of them kept in registers across that path; with T's low parts (store_t_f16), the chunk
    flagged in t_low by wy_split_factors."""
    o_k = tl.arange(0, BK)
    b_k = tl.load(row_tile(k, row0, i_h, H, K, o_t, o_k), mask=m_t[:, None] & (o_k < K)[None, :],
                  other=0.0).to(DOT_DTYPE)
    b_kkn, b_rk = keys_gram(b_k, BT, USE_L2NORM)
    b_g_all, b_beta_all = load_head_gates(g, beta, row0, i_hv, HV, o_t, m_t, HEADS)
    b_beta = head_column(b_beta_all, j, HEADS)
    b_G, b_D = chunk_decay(head_column(b_g_all, j, HEADS), BT)
    b_T = inverse_tf32x3(chunk_A(b_kkn, b_beta, b_D, BT), BT, tl.float16)
    o_tt = row_offsets(row0, i_hv + j, HV, BT, o_t, o_t)
    store_t_f16(t_out + o_tt, b_T * b_beta[None, :], m_t[:, None] & (o_t < BT)[None, :], 1, BT)


@triton.jit
def _column(b, o_j, j):
    """Column j of an fp32 tile b [rows, J] (o_j = 0..J-1), bit for bit: selected as integers, where
    a float sum with zeros would turn -0.0 (logsigmoid of a large gate) into +0.0."""
    b_bits = b.to(tl.int32, bitcast=True)
    return tl.sum(tl.where(o_j[None, :] == j, b_bits, 0), axis=1).to(tl.float32, bitcast=True)


@triton.jit
def _store_wu(k, v, w_out, w2_out, w3_out, u_out, b_T, b_beta, b_rk, b_G, row0, i_h, i_hv, o_t, m_t,
              H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
              BK: tl.constexpr, BV: tl.constexpr, BC: tl.constexpr, DOT_DTYPE: tl.constexpr,
              NSPLIT: tl.constexpr, W_PARTS: tl.constexpr):
    """u = T diag(beta) v and w = T diag(beta r e^G) k of one chunk and value head, BC columns at a
    time (only a [BT, BC] accumulator live): u in u_out's dtype, w as W_PARTS bf16 parts."""
    o_c = tl.arange(0, BC)
    b_Tu = b_T * b_beta[None, :]
    for c0 in tl.static_range(0, BV, BC):
        m_c = (c0 + o_c) < V
        b_v = tl.load(row_tile(v, row0, i_hv, HV, V, o_t, c0 + o_c), mask=m_t[:, None] & m_c[None, :],
                      other=0.0).to(DOT_DTYPE)
        b_u = _t_times_columns(b_Tu, b_v, NSPLIT, BT, BC, DOT_DTYPE)
        tl.store(row_tile(u_out, row0, i_hv, HV, V, o_t, c0 + o_c), b_u.to(u_out.dtype.element_ty),
                 mask=m_t[:, None] & m_c[None, :])
    b_Tw = b_T * (b_beta * b_rk * tl.exp(b_G))[None, :]
    for c0 in tl.static_range(0, BK, BC):
        m_c = (c0 + o_c) < K
        b_kc = tl.load(row_tile(k, row0, i_h, H, K, o_t, c0 + o_c), mask=m_t[:, None] & m_c[None, :],
                       other=0.0).to(DOT_DTYPE)
        b_w = _t_times_columns(b_Tw, b_kc, NSPLIT, BT, BC, DOT_DTYPE)
        o_w = row_offsets(row0, i_hv, HV, K, o_t, c0 + o_c)
        store_parts(w_out + o_w, w2_out + o_w, w3_out + o_w, b_w, m_t[:, None] & m_c[None, :], W_PARTS)


@triton.jit
def locate_chunk(i_slot, chunk_offsets, slot_seqs, cu_seqlens, T, NT, C0, FEED_P, FEED_L, FEED_W,
                 IS_VARLEN: tl.constexpr, FEED: tl.constexpr):
    """Map a flat chunk slot to (sequence, chunk within it, first token, length of the sequence).

    Dense batches: slot = sequence * NT + chunk - C0, for a launch over chunks C0 .. C0 + NT - 1 of
    every sequence (NT: all of them, C0 = 0, unless the launcher cuts the pass into pieces). Packed
    sequences: chunk_offsets [N + 1] holds the cumulative chunk counts and slot_seqs [slots] each
    slot's sequence, found by the launcher on the device (a search here would be a chain of
    dependent loads at the start of every program, with nothing else to do meanwhile). Slots past
    the last chunk belong to the last sequence and return a chunk index past its end. FEED (dense,
    one launch over all chunks): a sequence's chunks in the certified split's order (feed_chunk)."""
    if IS_VARLEN:
        i_n = tl.load(slot_seqs + i_slot)
        i_c = i_slot - tl.load(chunk_offsets + i_n)
        tok0 = tl.load(cu_seqlens + i_n).to(tl.int64)
        T_seq = (tl.load(cu_seqlens + i_n + 1).to(tl.int64) - tok0).to(tl.int32)
    else:
        i_n = i_slot // NT
        i_c = C0 + i_slot % NT
        if FEED:
            i_c = feed_chunk(i_c, NT, FEED_P, FEED_L, FEED_W)
        tok0 = i_n.to(tl.int64) * T
        T_seq = T
    return i_n, i_c, tok0, T_seq


@triton.jit(do_not_specialize=["NT", "C0", "FEED_P", "FEED_L", "FEED_W", "FORGET_P", "FORGET_L", "FORGET_W",
                               "FORGET_L0", "g_rows"])   # one compiled kernel for all bounds
def wy_kernel(
    q, k, v, g, beta, w_out, w2_out, w3_out, u_out, rq_out, rk_out, G_out, attn_out, attn2_out, t_out, t2_out,
    tlow_out, qn_out, kn_out, scale, chunk_offsets, slot_seqs, cu_seqlens, done, T, NT, NUM_SLOTS, C0, FEED_P, FEED_L,
    FEED_W,
    heads, FORGET_P, FORGET_L, FORGET_W, FORGET_L0, forget_ln, g_rows,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    BLOCK: tl.constexpr, LOG_BLOCKS: tl.constexpr, USE_L2NORM: tl.constexpr,
    IS_VARLEN: tl.constexpr, PRECISION: tl.constexpr, INVERSE: tl.constexpr, DOT_DTYPE: tl.constexpr,
    WY_SPLIT: tl.constexpr = 0, BC: tl.constexpr = 64, W_PARTS: tl.constexpr = 0, STORE_NORMS: tl.constexpr = False,
    STORE_ATTN: tl.constexpr = False, STORE_T: tl.constexpr = False, SIGNAL: tl.constexpr = False,
    GROUP: tl.constexpr = 1, F16: tl.constexpr = False, F16_DOT: tl.constexpr = tl.float16,
    HEADS: tl.constexpr = 1, FEED: tl.constexpr = False, FALLBACK_AFTER: tl.constexpr = False,
    FORGET: tl.constexpr = False, FORGET_BLOCK: tl.constexpr = 64, G_BY_HEAD: tl.constexpr = False,
    STORE_QK: tl.constexpr = True,
):
    """w [tokens, HV, K] and u [tokens, HV, V] (in u_out's dtype), or T diag(beta) (STORE_T), for one
    chunk of HEADS value heads (one unless the launcher's wy_heads asks for more).
    Grid: (chunk slots x HV / HEADS,), chunk-major: HEADS value heads a program (split path; they
    share a q/k head: wy_split_factors).

    WY_SPLIT = 0: fp32 tiles and tf32x3 products (any input dtype); 2 or 3 (bf16 inputs only):
    wy_split_factors. W_PARTS = 0: w in w_out's dtype; 2 or 3: as that many bf16 parts at w_out,
    w2_out (, w3_out) for the split products of the state walk. STORE_NORMS: also store the l2-norm
    factors of q and k [tokens, HV] at rq_out, rk_out, so that the state walk needs no fp32 tiles.
    STORE_ATTN (split path only): also the output attention as two bf16 parts at attn_out, attn2_out
    [tokens, HV, BT] (store_attention; scale is the output scale it includes) and the cumulative
    log-decays G at G_out [tokens, HV] (G_BY_HEAD: [HV, g_rows], g_rows the tokens of all sequences;
    addressing.decay_ptrs), so the walk forms neither. STORE_T (with STORE_ATTN): T diag(beta)
    at t_out, t2_out instead of w and u (wy_split_factors). F16 (with STORE_T): T diag(beta) and the
    output attention as one fp16 tile each (t_out, attn_out; the chunks' flags at tlow_out:
    wy_split_factors) and q and k in fp16 (l2-normalised with
    l2norm; qn_out, kn_out [tokens, H, K]; not STORE_QK: none, the walk reading fp16 inputs without l2norm
    as they are), for the walk on fp16 operands; with SIGNAL each group of value heads
    sharing a q/k head counts at its first head.
    SIGNAL (dense, split path, one launch over all chunks: the walk runs beside it and waits, see
    chunk_fwd's WAIT): the chunks are taken in order, and each program adds 1 to
    done[sequence, chunk // GROUP, head] for each value head it formed, once its stores are visible.
    FEED (with SIGNAL, one launch over all chunks): a sequence's chunks in the order the certified
    split's programs need them (split_walk.feed_chunk, segments of FEED_L chunks, FEED_P of them, each
    warmed up over the FEED_W chunks before it), so that they all start at once.
    FORGET (with SIGNAL, F16, no FEED; the automatic split, split_heads_in="wy"): each sequence's
    chunk-0 programs also mark their value heads at heads [N x HV] int32 (zeroed before the launch)
    as split_walk.forgetting_heads would (split_walk.forgets: segments FORGET_P, FORGET_L, FORGET_L0,
    warm-ups of FORGET_W chunks, threshold forget_ln), before their count: so the ordered walk, whose
    first wait is for chunk 0's group, reads them once that wait is over, and one launch (and its
    host time) less is needed for them. Past the first group, a program whose q/k group's value heads
    are all marked counts nothing: the ordered walk returns for those heads after their first
    group, and the count (a barrier, a release at GPU scope) held each program's exit (no counts took
    ~8-12% off the WY pass at B = 1 on an H200: NOTES.md v36). A mark not yet seen reads as 0, and
    the chunk is counted: never a count missing that a walk waits for."""
    tl.static_assert(not SIGNAL or (WY_SPLIT > 0 and not IS_VARLEN), "SIGNAL: dense batches, split path")
    tl.static_assert(HEADS == 1 or WY_SPLIT > 0, "HEADS > 1: split path only")
    tl.static_assert(not FEED or (SIGNAL and not IS_VARLEN), "FEED: with SIGNAL, dense batches")
    tl.static_assert(not FORGET or (SIGNAL and F16 and not FEED), "FORGET: with SIGNAL and F16, no FEED")
    # Chunk-major, the value heads of a chunk side by side: with SIGNAL the chunks are taken in order,
    # and the heads that share a q/k head read its tiles while they are in L2.
    NPH: tl.constexpr = HV // HEADS                      # programs a chunk
    i_slot, i_hv = tl.program_id(0) // NPH, tl.program_id(0) % NPH * HEADS
    if i_slot >= NUM_SLOTS:
        return
    i_n, i_c, tok0, T_seq = locate_chunk(i_slot, chunk_offsets, slot_seqs, cu_seqlens, T, NT, C0, FEED_P, FEED_L,
                                         FEED_W, IS_VARLEN, FEED)
    i_h = i_hv // (HV // H)
    if WY_SPLIT > 0:
        wy_split_factors(q, k, v, g, beta, w_out, w2_out, w3_out, u_out, rq_out, rk_out, G_out, attn_out, attn2_out,
                         t_out, t2_out, tlow_out, qn_out, kn_out, scale, tok0, i_c * BT, T_seq, i_h, i_hv, H, HV, K, V, BT, BK, BV, BC, BLOCK, LOG_BLOCKS,
                         USE_L2NORM, INVERSE, DOT_DTYPE, WY_SPLIT, W_PARTS, STORE_NORMS, STORE_ATTN, STORE_T, F16,
                         F16_DOT, HEADS, FALLBACK_AFTER, g_rows, G_BY_HEAD, STORE_QK)
        if SIGNAL:
            # The chunk's place is found again from the program id read anew, so that nothing of it
            # stays live through the pass (kept, it made ptxas spill more).
            pid = fresh_program_id()
            j_slot, j_hv = pid // NPH, pid % NPH * HEADS
            j_n, j_c, _, _ = locate_chunk(j_slot, chunk_offsets, slot_seqs, cu_seqlens, T, NT, C0, FEED_P, FEED_L,
                                          FEED_W, IS_VARLEN, FEED)
            counted = True
            if FORGET:
                o_h = j_hv + tl.arange(0, HEADS)
                m_h = o_h < HV
                if j_c == 0:
                    tl.store(heads + j_n * HV + o_h,
                             forgets(g, beta, j_n.to(tl.int64) * T * HV, o_h, m_h, T, FORGET_P, FORGET_L,
                                     FORGET_W, FORGET_L0, forget_ln, HV, BT, FORGET_BLOCK), mask=m_h)
                elif j_c >= GROUP:
                    # The count is the q/k group's (F16: at its first value head), so it goes only
                    # where every value head of the group is marked. Each mark read at L2 by one
                    # scalar atomic (one value for the whole program: plain loads could differ
                    # between warps, and an SM's L1 could keep the zero it read before chunk 0's
                    # store). Marks only go from 0 to 1, so a 1 read is final.
                    counted = False
                    p_group = heads + j_n * HV + counting_head(j_hv, H, HV, F16)
                    for j in tl.static_range(HV // H):
                        counted |= tl.atomic_add(p_group + j, 0, sem="relaxed") == 0
            if counted:
                # Every thread's stores before the count (bar.sync, then a release at GPU scope).
                tl.debug_barrier()
                p_counts = done + (j_n * tl.cdiv(NT, GROUP) + j_c // GROUP) * HV      # [HV] of the chunk's group
                if F16:
                    # The program's heads are of one q/k group (HEADS divides HV / H), counted at the
                    # group's first head: one add for all of them.
                    tl.atomic_add(p_counts + counting_head(j_hv, H, HV, F16), HEADS, sem="release")
                else:
                    for j in tl.static_range(HEADS):
                        tl.atomic_add(p_counts + j_hv + j, 1, sem="release")
        return
    b_q, b_k, b_rq, b_rk, b_g, b_beta, row0, o_t, m_t = load_chunk(q, k, g, beta, tok0, i_c * BT, T_seq, i_h, i_hv,
                                                                    H, HV, K, BT, BK, USE_L2NORM, DOT_DTYPE,
                                                                    USE_L2NORM and STORE_NORMS)
    if USE_L2NORM and STORE_NORMS:
        tl.store(row_vec(rq_out, row0, i_hv, HV, o_t), b_rq, mask=m_t)
        tl.store(row_vec(rk_out, row0, i_hv, HV, o_t), b_rk, mask=m_t)
    b_G, b_D = chunk_decay(b_g, BT)
    b_T = chunk_wy_inverse(b_k, b_rk, b_beta, b_D, BT, BLOCK, LOG_BLOCKS, PRECISION, INVERSE, F16_DOT)
    o_k = tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    m_v = o_v < V
    b_v = tl.load(row_tile(v, row0, i_hv, HV, V, o_t, o_v), mask=m_t[:, None] & m_v[None, :], other=0.0)
    b_u = tl.dot(b_T * b_beta[None, :], b_v.to(tl.float32), input_precision="tf32x3")
    b_w = tl.dot(b_T * (b_beta * b_rk * tl.exp(b_G))[None, :], b_k.to(tl.float32), input_precision="tf32x3")
    o_w = row_offsets(row0, i_hv, HV, K, o_t, o_k)
    p_u = row_tile(u_out, row0, i_hv, HV, V, o_t, o_v)
    store_parts(w_out + o_w, w2_out + o_w, w3_out + o_w, b_w, m_t[:, None] & (o_k < K)[None, :], W_PARTS)
    tl.store(p_u, b_u.to(u_out.dtype.element_ty), mask=m_t[:, None] & m_v[None, :])

"""The state walk of the Triton forward, and the segment maps that split it (launched by
gdn.ops.triton.forward, after the WY pass of gdn.ops.triton.wy).

* ``_segment_maps_kernel``: only when sequences x heads cannot fill the GPU. Each sequence is cut into
  segments and every segment but the last is summarised as its affine map S -> A S + B (seed 000):
  the same recurrence as the state walk, [A | B] starting at [I | 0], the A columns driven by zero
  values. No truncation, whatever the gates. ``_segment_maps_f16_kernel``: the same maps by the fp16
  walk's step (walk_f16.walk_chunk_f16 with MAP), from what that walk reads (maps="f16").
* ``_chunk_fwd_kernel``: grid (V blocks x sequences x value heads, segments). One program walks the
  chunks of one segment (or of one piece: chunks C_BEGIN .. C_END - 1) with a K x BV block of the
  state in registers: the writes U = u - w S (or, by default on the bf16 path, U = T diag(beta)
  (v - diag(r_k e^G) k S) from the WY pass's T: it then stores 16 KB a chunk-head instead of w and u's
  64 KB), outputs O = (q e^G) S + P U, then S <- e^{G_C} S + (k e^{G_C - G})^T U. Segment p first
  folds the maps of segments 0..p-1 onto the initial state. Nothing per chunk is written but o.
  ``_walk_chunk`` is one chunk of it. Where it takes one program an SM its pace is the latency of
  its chain of products, so by default (FUSED) each product of bf16 parts is one matrix product
  (split_dot.dot_cat), its tiles move by TMA (descriptors of its sequence and head: each product
  waits for its own operands only); and the WY pass may run beside it, the walk waiting for its
  counts (WAIT). F16 (the default with l2norm): each chunk is gdn.ops.triton.walk_f16's instead,
  one fp16 operand a product, each scaled by a power of two from its largest entry.

With bf16 inputs both run split products (gdn.ops.triton.split_dot: bf16 matrix units, the computed
fp32 operands cut into bf16 parts), reading T diag(beta) (or w) as bf16 parts and the l2-norm
factors of q and k from the WY pass, so the walk loads nothing it must convert, and its loads are
pipelined straight into shared memory (``walk_stages``). benchmarks/compile_report.py shows what each variant costs in
registers, spills and shared memory; benchmarks/NOTES.md what each one measured.

The l2 normalisation of q and k is a per-row scaling applied to fp32 products, never a rounding of the
bf16 tiles. Naming: ``p_`` pointers, ``b_`` register blocks, ``o_`` offsets, ``m_`` masks, ``i_``
program ids. Token offsets are int64: tokens x heads x dim passes 2^31 at a million tokens.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .addressing import load_rows, row_tile, rows_block, rows_desc, store_rows
from .decay import chunk_decay
from .split_dot import bf16_parts, dot_parts, dot_split, load_parts, split_dot, store_parts, tile_max
from .walk_f16 import pow2_below_inverse, walk_chunk_f16
from .chunk_io import load_chunk, load_chunk_decays, load_chunk_square
from .wy import counting_head


@triton.jit
def _mm(a, b, FAST_DOTS: tl.constexpr, PRECISION: tl.constexpr, LOW: tl.constexpr):
    """fp32 x fp32 product: operands in LOW (the input dtype) on the fast path, else fp32 at PRECISION."""
    if FAST_DOTS:
        return tl.dot(a.to(LOW), b.to(LOW))
    else:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision=PRECISION)


@triton.jit
def _dot_inputs(a, b, PRECISION: tl.constexpr):
    """Product of two input-dtype tiles (exact products, fp32 accumulation); fp32 inputs at PRECISION."""
    if a.dtype == tl.float32:
        return tl.dot(a, b, input_precision=PRECISION)
    else:
        return tl.dot(a, b)


@triton.jit
def _load_w(w, w2, w3, tok0, i_hv, T_seq, t0, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
            BK: tl.constexpr, SPLIT: tl.constexpr, DOT_DTYPE: tl.constexpr):
    """One chunk's w [BT, BK] (or its SPLIT bf16 parts), as the WY pass stored it."""
    return load_parts(rows_block(w, tok0, i_hv, T_seq, t0, HV, K, BT, BK),
                      rows_block(w2, tok0, i_hv, T_seq, t0, HV, K, BT, BK),
                      rows_block(w3, tok0, i_hv, T_seq, t0, HV, K, BT, BK), SPLIT, DOT_DTYPE)


@triton.jit
def _square_block(base, i_map, K: tl.constexpr, BK: tl.constexpr):
    """Block pointer to map i_map of a [maps, K, K] tensor."""
    return tl.make_block_ptr(base + i_map * K * K, (K, K), (K, 1), (0, 0), (BK, BK), (1, 0))


@triton.jit
def _map_columns(i_m, i_nh, i_p, T, L, H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                 BT: tl.constexpr, BK: tl.constexpr, BM: tl.constexpr, NMK: tl.constexpr):
    """A map program's place: column block i_m of [A | B] (the first NMK blocks A's K columns, the
    rest B's V), sequence x value head i_nh, segment i_p of L chunks. Returns the sequence, value and
    q/k heads, the sequence's first token, the segment's chunks c0 .. c1 - 1, whether the block is
    A's, its value block i_v (B's; 0 for A's, whose programs read and drop the values), the column
    offsets o_c and mask m_c, the row offsets o_k and mask m_k, and the block of [I | 0] it starts at."""
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)
    tok0 = i_n.to(tl.int64) * T
    c0 = i_p * L
    c1 = tl.minimum(c0 + L, tl.cdiv(T, BT))
    is_a = i_m < NMK
    i_v = tl.where(is_a, 0, i_m - NMK)
    o_c = tl.where(is_a, i_m, i_v) * BM + tl.arange(0, BM)
    m_c = o_c < tl.where(is_a, K, V)
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    b_M = tl.where((o_k[:, None] == o_c[None, :]) & is_a, 1.0, 0.0)
    return i_n, i_hv, i_h, tok0, c0, c1, is_a, i_v, o_c, m_c, o_k, m_k, b_M


@triton.jit
def _segment_maps_kernel(
    q, k, g, beta, w, w2, w3, u, rk, maps_A, maps_A2, maps_A3, maps_B, T, L, P,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BM: tl.constexpr, NMK: tl.constexpr, USE_L2NORM: tl.constexpr,
    FAST_DOTS: tl.constexpr, PRECISION: tl.constexpr, DOT_DTYPE: tl.constexpr, SPLIT: tl.constexpr = 0,
):
    """[A | B] of segment i_p, BM of its columns per program (see the module docstring). SPLIT > 0:
    the products of chunk_fwd's split path, and A stored as SPLIT bf16 parts (maps_A, maps_A2, maps_A3)
    for the fold; B stays fp32 (it is only added)."""
    i_m, i_nh, i_p = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_n, i_hv, i_h, tok0, c0, c1, is_a, i_v, o_c, m_c, o_k, m_k, b_M = _map_columns(
        i_m, i_nh, i_p, T, L, H, HV, K, V, BT, BK, BM, NMK)

    for c in range(c0, c1):
        b_q, b_k, b_rq, b_rk, b_g, b_beta, row0, o_t, m_t = load_chunk(
            q, k, g, beta, tok0, c * BT, T, i_h, i_hv, H, HV, K, BT, BK, USE_L2NORM, DOT_DTYPE, False,
            rk, rk, SPLIT > 0)
        b_w, b_w2, b_w3 = _load_w(w, w2, w3, tok0, i_hv, T, c * BT, HV, K, BT, BK, SPLIT, DOT_DTYPE)
        # The A columns see zero values: their "state" is the product of the chunks' linear parts.
        b_u = tl.load(row_tile(u, row0, i_hv, HV, V, o_t, o_c), mask=m_t[:, None] & m_c[None, :] & (i_m >= NMK),
                      other=0.0)
        b_G_last = tl.sum(b_g, axis=0)
        b_G = tl.cumsum(b_g, axis=0)
        if SPLIT > 0:
            b_m1, b_m2, b_m3 = bf16_parts(-b_M, SPLIT, DOT_DTYPE)
            b_U = dot_parts(b_w, b_w2, b_w3, SPLIT, b_m1, b_m2, b_m3, SPLIT, b_u.to(tl.float32))
            b_Uc = b_U * (b_rk * tl.exp(b_G_last - b_G))[:, None]
            b_M = split_dot(tl.trans(b_k), b_Uc, b_M * tl.exp(b_G_last), SPLIT, False, True, DOT_DTYPE)
        else:
            b_U = b_u.to(tl.float32) - _mm(b_w, b_M, FAST_DOTS, PRECISION, DOT_DTYPE)
            b_kd = b_k.to(tl.float32) * (b_rk * tl.exp(b_G_last - b_G))[:, None]
            b_M = b_M * tl.exp(b_G_last) + _mm(tl.trans(b_kd), b_U, FAST_DOTS, PRECISION, DOT_DTYPE)

    i_map = (i_nh * (P - 1) + i_p).to(tl.int64)
    o_A = i_map * K * K + o_k[:, None] * K + o_c[None, :]
    p_B = maps_B + i_map * K * V + o_k[:, None] * V + o_c[None, :]
    m_out = m_k[:, None] & m_c[None, :]
    store_parts(maps_A + o_A, maps_A2 + o_A, maps_A3 + o_A, b_M, m_out & is_a, SPLIT)
    tl.store(p_B, b_M, mask=m_out & (i_m >= NMK))


@triton.jit
def _segment_maps_f16_kernel(
    k, g, beta, Gc, v, tb, t_low, maps_A, maps_A2, maps_B, T, L, P,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
    BM: tl.constexpr, NMK: tl.constexpr, DOT_DTYPE: tl.constexpr, F16_DOT: tl.constexpr, TMA: tl.constexpr = False,
):
    """[A | B] of segment i_p on the fp16 walk's operands (maps="f16"): BM columns a program (grid:
    column blocks x sequences x value heads on one axis, as the walk's, segments), each
    chunk walk_f16.walk_chunk_f16's step (MAP: no outputs), from the WY pass's fp16 copies of k
    (kn), T diag(beta) (tb, its chunks' flags t_low) and its decays G (Gc), the same as the walk that
    then reads the maps.
    [A | B] starts at [I | 0] scaled as the walk scales its state; A's columns see zero values.
    A is stored as two bf16 parts (maps_A, maps_A2 [maps, K, K]: 16 bits, for the walk's fold on
    bf16 parts, as _segment_maps_kernel's), B in fp32 (maps_B [maps, K, V]: it is only added)."""
    NM: tl.constexpr = NMK + (V + BM - 1) // BM
    i_m, i_nh, i_p = tl.program_id(0) % NM, tl.program_id(0) // NM, tl.program_id(1)
    i_n, i_hv, i_h, tok0, c0, c1, is_a, i_v, o_c, m_c, o_k, m_k, b_M = _map_columns(
        i_m, i_nh, i_p, T, L, H, HV, K, V, BT, BK, BM, NMK)
    b_sig = pow2_below_inverse(tile_max(b_M))
    b_M = b_M * b_sig
    if TMA:
        d_k = rows_desc(k, tok0, i_h, T, H, K, BT, BK)
        d_v = rows_desc(v, tok0, i_hv, T, HV, V, BT, BM)
        d_T = rows_desc(tb, tok0, i_hv, T, HV, BT, BT, BT)
        k, v, tb = d_k, d_v, d_T
    # walk_f16's tensors: k in q's place, T in P's and v in o's (MAP reads neither q nor P, writes no
    # o), g in those of w, u and the norms (which it never reads).
    tensors = (k, k, g, beta, g, g, g, g, g, g, Gc, tb, tb, v, tb, tb, v, t_low)
    where = (tok0, T, i_h, i_hv, i_nh, i_v, o_k, o_c, m_c, m_k[:, None] & m_c[None, :])
    for c in range(c0, c1):
        b_M, b_sig = walk_chunk_f16(c, b_M, b_sig, tensors, where, 1.0, H, HV, K, V, BT, BK, BM, DOT_DTYPE,
                                    F16_DOT, TMA, True, not is_a)
    b_M = b_M * (1.0 / b_sig)                        # a power of two: exact

    i_map = (i_nh * (P - 1) + i_p).to(tl.int64)
    m_out = m_k[:, None] & m_c[None, :]
    o_A = i_map * K * K + o_k[:, None] * K + o_c[None, :]
    store_parts(maps_A + o_A, maps_A2 + o_A, maps_A2 + o_A, b_M, m_out & is_a, 2)
    tl.store(maps_B + i_map * K * V + o_k[:, None] * V + o_c[None, :], b_M, mask=m_out & (i_m >= NMK))


@triton.jit
def stored_attention_outputs(b_nqS, b_rq, scale, b_G, b_P, b_P2, b_u1, b_u2, FUSED: tl.constexpr = False):
    """One chunk's outputs o = (q S) scale r_q e^G + P U [BT, BV] (fp32) from -(q S) (b_nqS), the
    output attention P that the WY pass stored (its two bf16 parts; wy.store_attention) and the two
    bf16 parts of U (P U as one product with FUSED: split_dot.dot_split)."""
    b_o = b_nqS * (-b_rq * scale * tl.exp(b_G))[:, None]
    return dot_split(b_P, b_P2, 2, b_u1, b_u2, b_o, FUSED)


@triton.jit
def _walk_chunk(c, b_S, tensors, where, scale,
                H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, USE_L2NORM: tl.constexpr,
                FAST_DOTS: tl.constexpr, PRECISION: tl.constexpr, DOT_DTYPE: tl.constexpr, SPLIT: tl.constexpr,
                ATTN_IN: tl.constexpr, T_IN: tl.constexpr, FUSED: tl.constexpr,
                Q_REGS: tl.constexpr = False, TMA: tl.constexpr = False, Q_LATE: tl.constexpr = False):
    """Chunk c of the state walk (_chunk_fwd_kernel, whose docstring says what each flag does): its
    outputs, and the state after it, returned. tensors and where: the kernel's pointers (with TMA,
    descriptors for q, k, v, the parts of P and T and o) and this program's place, as tuples."""
    q, k, g, beta, w, w2, w3, u, rq, rk, Gc, attn, attn2, v, tb, tb2, o, t_low = tensors
    tok0, T_seq, i_h, i_hv, i_nh, i_v, o_k, o_v, m_v, m_kv = where
    b_q, b_k, b_rq, b_rk, b_g, b_beta, row0, o_t, m_t = load_chunk(
        q, k, g, beta, tok0, c * BT, T_seq, i_h, i_hv, H, HV, K, BT, BK, USE_L2NORM, DOT_DTYPE,
        not Q_LATE, rq, rk, SPLIT > 0, TMA)
    if T_IN:     # the values in u's place: U is formed from them below
        b_u = load_rows(v, tok0, i_hv, T_seq, c * BT, HV, V, BT, BV, i_v * BV, TMA)
    else:
        b_w, b_w2, b_w3 = _load_w(w, w2, w3, tok0, i_hv, T_seq, c * BT, HV, K, BT, BK, SPLIT, DOT_DTYPE)
        b_u = tl.load(rows_block(u, tok0, i_hv, T_seq, c * BT, HV, V, BT, BV, i_v * BV), boundary_check=(0, 1),
                      padding_option="zero")
    if SPLIT > 0:
        if ATTN_IN:     # G as the WY pass stored it (no scan here)
            b_G, b_G_last = load_chunk_decays(Gc, row0, c * BT, T_seq, i_hv, HV, BT, o_t, m_t)
        else:
            b_G_last = tl.sum(b_g, axis=0)
            b_G = tl.cumsum(b_g, axis=0)
        # The parts of -S serve both products with S: U = u + w (-S) (or k S), and q S = -(q (-S)).
        b_s1, b_s2, b_s3 = bf16_parts(-b_S, SPLIT, DOT_DTYPE)
        # FUSED (T_IN): each product of parts as ONE matrix product (split_dot.dot_split:
        # one wait for the matrix units instead of 2-3; the chain's latency, not its arithmetic, sets
        # the walk's pace where it takes one program an SM).
        if T_IN:
            # U = T diag(beta) Z with Z = v - (r_k e^G) . (k S): k exact, S and Z in parts.
            b_Z = dot_split(b_k, b_k, 1, b_s1, b_s2, None, FUSED) * (b_rk * tl.exp(b_G))[:, None]
            b_Z += b_u.to(tl.float32)
            b_T, b_T2 = load_chunk_square(tb, tb2, tok0, i_hv, T_seq, c * BT, HV, BT, DOT_DTYPE, TMA)
            b_z1, b_z2, _ = bf16_parts(b_Z, SPLIT, DOT_DTYPE)
            b_U = dot_split(b_T, b_T2, 2, b_z1, b_z2, None, FUSED)                                   # the real writes
        else:
            b_U = dot_parts(b_w, b_w2, b_w3, SPLIT, b_s1, b_s2, b_s3, SPLIT, b_u.to(tl.float32))   # the real writes
        if Q_LATE:        # q loaded where it is used: its own barrier, not k's (TMA)
            b_q = load_rows(q, tok0, i_h, T_seq, c * BT, H, K, BT, BK, 0, TMA).to(b_k.dtype)
        if Q_REGS:
            # q through registers (the mask changes nothing: rows past the end are zeros already):
            # its pipeline then keeps one buffer fewer (a product's shared-memory operand takes an
            # extra one), 16 KB, which three stages need to leave room for a WY program beside.
            b_q = tl.where(m_t[:, None], b_q, 0.0).to(b_k.dtype)
        b_qS = dot_split(b_q, b_q, 1, b_s1, b_s2, None, FUSED)                                   # -(q S)
        if ATTN_IN:
            # o = (q S) scale r_q e^G + P U, P the output attention from the WY pass (two bf16 parts).
            b_P, b_P2 = load_chunk_square(attn, attn2, tok0, i_hv, T_seq, c * BT, HV, BT, DOT_DTYPE, TMA)
            b_u1, b_u2, b_u3 = bf16_parts(b_U, SPLIT, DOT_DTYPE)
            b_o = stored_attention_outputs(b_qS, b_rq, scale, b_G, b_P, b_P2, b_u1, b_u2, FUSED)
        else:
            b_o = b_qS * (-tl.exp(b_G))[:, None]
            # (q k^T . D) with the keys' norm factors inside the exponent, e^(G_i - G_j + log r_j): one
            # [BT] vector along columns instead of two (16 registers each); r_q scales o's rows at the end.
            o_i = tl.arange(0, BT)
            b_lrk = tl.log(tl.maximum(b_rk, 1e-30))          # rows past the end: r = 0, their k rows are 0
            b_e = tl.where(o_i[:, None] >= o_i[None, :], b_G[:, None] - (b_G - b_lrk)[None, :], float("-inf"))
            b_attn = tl.dot(b_q, tl.trans(b_k)) * tl.exp(b_e)
            b_o = split_dot(b_attn, b_U, b_o, SPLIT, True, True, DOT_DTYPE) * (b_rq * scale)[:, None]
        # k^T (c U), the decay and norm factors c on U's rows: k stays an exact bf16 operand.
        b_Uc = b_U * (b_rk * tl.exp(b_G_last - b_G))[:, None]
        b_c1, b_c2, _ = bf16_parts(b_Uc, SPLIT, DOT_DTYPE)
        b_kT = tl.trans(b_k)
        b_S = dot_split(b_kT, b_kT, 1, b_c1, b_c2, b_S * tl.exp(b_G_last), FUSED)
    else:
        b_G_last = tl.sum(b_g, axis=0)
        b_G, b_D = chunk_decay(b_g, BT)
        b_attn = _dot_inputs(b_q, tl.trans(b_k), PRECISION) * (b_rq[:, None] * b_rk[None, :] * b_D)
        b_U = b_u.to(tl.float32) - _mm(b_w, b_S, FAST_DOTS, PRECISION, DOT_DTYPE)       # the real writes
        b_o = _mm(b_q, b_S, FAST_DOTS, PRECISION, DOT_DTYPE) * (b_rq * tl.exp(b_G))[:, None]
        b_o = (b_o + _mm(b_attn, b_U, FAST_DOTS, PRECISION, DOT_DTYPE)) * scale
        b_kd = b_k.to(tl.float32) * (b_rk * tl.exp(b_G_last - b_G))[:, None]
        b_S = b_S * tl.exp(b_G_last) + _mm(tl.trans(b_kd), b_U, FAST_DOTS, PRECISION, DOT_DTYPE)
    store_rows(o, b_o, tok0, i_hv, T_seq, c * BT, HV, V, BT, BV, i_v * BV, TMA)
    return b_S


@triton.jit
def wait_group(done, i_n, i_hv, c, NT, HV: tl.constexpr, GROUP: tl.constexpr, HEADS: tl.constexpr = 1):
    """Spin until the WY pass has counted every chunk of the group holding chunk c done
    (done [N, groups, HV]; the last group may hold fewer than GROUP), for HEADS value heads counted
    at i_hv. (Also the Gluon walk's: walk_gluon.)"""
    g0 = c - c % GROUP
    p_done = done + (i_n * tl.cdiv(NT, GROUP) + g0 // GROUP) * HV + i_hv
    n_need = tl.minimum(GROUP, NT - g0) * HEADS
    n_done = tl.atomic_add(p_done, 0, sem="acquire")
    while n_done < n_need:
        n_done = tl.atomic_add(p_done, 0, sem="acquire")


@triton.jit(do_not_specialize=["C_BEGIN", "C_END"])     # piece bounds: one compiled kernel for all
def _chunk_fwd_kernel(
    q, k, g, beta, w, w2, w3, u, rq, rk, Gc, attn, attn2, v, tb, tb2, t_low, o, h0, ht, maps_A, maps_A2, maps_A3,
    maps_B, cu_seqlens, seq_order, done, scale, T, L, P, C_BEGIN, C_END,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, USE_L2NORM: tl.constexpr,
    IS_VARLEN: tl.constexpr, HAS_H0: tl.constexpr, STORE_FINAL: tl.constexpr,
    FAST_DOTS: tl.constexpr, PRECISION: tl.constexpr, DOT_DTYPE: tl.constexpr, SPLIT: tl.constexpr = 0,
    HAS_MAPS: tl.constexpr = True, ATTN_IN: tl.constexpr = False, T_IN: tl.constexpr = False,
    LONGEST_FIRST: tl.constexpr = False, FUSED: tl.constexpr = False,
    WAIT: tl.constexpr = False, GROUP: tl.constexpr = 1, AHEAD: tl.constexpr = 1, Q_REGS: tl.constexpr = False,
    ALL_LOADS: tl.constexpr = False, TMA: tl.constexpr = False, Q_LATE: tl.constexpr = False,
    F16: tl.constexpr = False, F16_DOT: tl.constexpr = tl.float16,
):
    """The state walk (see the module docstring). SPLIT > 0 (bf16 inputs): every product on bf16
    matrix units with the computed operand in SPLIT bf16 parts (wy.split_dot): q and k stay as stored,
    w and the maps' A come as parts from the earlier kernels, the norm factors from wy_kernel, so the
    loop holds no fp32 copy of an input tile. SPLIT = 0: fp32 operands at PRECISION, or the input
    dtype with FAST_DOTS. ATTN_IN (split path): the output attention P (two bf16 parts at attn, attn2;
    wy.store_attention) and the cumulative log-decays G (Gc) come from the WY pass. T_IN (with
    ATTN_IN): the WY pass stored T diag(beta) (two bf16 parts at tb, tb2 [tokens, HV, BT]) instead of
    w and u, and the walk forms the writes from the values v: U = T diag(beta) (v - (r_k e^G) . (k S)).
    F16 (T_IN): one fp16 tile of T diag(beta) at tb, and t_low [tokens, HV] int32 flags the chunks
    whose tile carries its low parts too (walk_f16.low_part_fix).
    IS_VARLEN with LONGEST_FIRST: program row i walks sequence seq_order[i // HV] (the launcher orders
    them longest first). FUSED (T_IN, BV <= 32): each product of bf16 parts as one matrix product
    (split_dot.dot_cat). WAIT (one segment, C_BEGIN = 0): the WY pass runs beside the walk over the
    same chunks and counts the chunks of each group of GROUP it has finished in done [N, groups, HV]
    (wy_kernel's SIGNAL); the walk waits for a group's count before it loads anything of it: AHEAD
    chunks before it needs the group (AHEAD >= the loop's pipeline stages, whose loads run AHEAD - 1
    chunks ahead of the chunk being formed). Q_REGS (FUSED): q reaches its product through registers,
    not straight from its pipeline buffers (one buffer fewer: three stages then fit beside a WY
    program). ALL_LOADS: the loop is pipelined in AHEAD stages through tl.range, which takes every load
    of the loop, not only those that feed products (the kernel's num_stages): r_q, which only scales
    the outputs, then comes ahead like the rest. TMA (T_IN): q, k, v, the parts of P and T, and o move
    by TMA through descriptors of this program's sequence and head (addressing.rows_desc): no
    per-thread addresses, and each pipelined load gets its own barrier, so a product waits for its
    operands only. Q_LATE: q is loaded right before its product, after k S (in the TTGIR of the TMA
    walk it then gets a barrier of its own: the chunk's first wait is for k alone)."""
    # Grid (V blocks x sequences x value heads, segments): one flat first axis (CUDA caps the second
    # at 65535, which thousands of packed sequences pass), the V blocks of a head side by side.
    NV: tl.constexpr = (V + BV - 1) // BV
    i_v, i_nh, i_p = tl.program_id(0) % NV, tl.program_id(0) // NV, tl.program_id(1)
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)
    if IS_VARLEN:
        if LONGEST_FIRST:
            # Longest sequences first (seq_order [N]): programs start in launch order, and a long
            # walk started in the last wave would end the kernel alone.
            i_n = tl.load(seq_order + i_n)
            i_nh = i_n * HV + i_hv
        tok0 = tl.load(cu_seqlens + i_n).to(tl.int64)
        T_seq = (tl.load(cu_seqlens + i_n + 1).to(tl.int64) - tok0).to(tl.int32)
    else:
        tok0 = i_n.to(tl.int64) * T
        T_seq = T
    NT = tl.cdiv(T_seq, BT)
    c0 = C_BEGIN + i_p * L                        # C_BEGIN, C_END: this launch's chunks (pieces)
    c1 = tl.minimum(tl.minimum(c0 + L, NT), C_END)

    o_k = tl.arange(0, BK)
    m_k = o_k < K
    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < V
    m_kv = m_k[:, None] & m_v[None, :]
    i_state = i_nh.to(tl.int64) * K * V
    b_S = tl.zeros([BK, BV], dtype=tl.float32)
    if HAS_H0:
        b_S = tl.load(h0 + i_state + o_k[:, None] * V + o_v[None, :], mask=m_kv, other=0.0).to(tl.float32)
    # Segment p starts from the initial state carried through the maps of segments 0..p-1.
    if HAS_MAPS:                      # compiled out for single-segment launches
        for s in range(0, i_p):
            i_map = (i_nh * (P - 1) + s).to(tl.int64)
            o_A = i_map * K * K + o_k[:, None] * K + o_k[None, :]
            b_B = tl.load(maps_B + i_map * K * V + o_k[:, None] * V + o_v[None, :], mask=m_kv, other=0.0)
            if SPLIT > 0:
                b_A, b_A2, b_A3 = load_parts(_square_block(maps_A, i_map, K, BK),
                                             _square_block(maps_A2, i_map, K, BK),
                                             _square_block(maps_A3, i_map, K, BK), SPLIT, DOT_DTYPE)
                b_s1, b_s2, b_s3 = bf16_parts(b_S, SPLIT, DOT_DTYPE)
                b_S = dot_parts(b_A, b_A2, b_A3, SPLIT, b_s1, b_s2, b_s3, SPLIT, b_B)
            else:
                b_A = tl.load(maps_A + o_A, mask=m_k[:, None] & m_k[None, :], other=0.0).to(tl.float32)
                b_S = tl.dot(b_A, b_S, input_precision="tf32x3") + b_B

    tl.static_assert(not FUSED or T_IN, "FUSED: the writes from T")
    tl.static_assert(not F16 or T_IN, "F16: the writes from T")
    b_sig = tl.full([], 1.0, tl.float32)         # F16: the walk holds sigma S (walk_f16)
    if F16 and (HAS_H0 or HAS_MAPS):
        b_sig = pow2_below_inverse(tile_max(b_S))
        b_S = b_S * b_sig
    tl.static_assert(not TMA or T_IN, "TMA: the loads of the walk that forms U from T diag(beta)")
    if TMA:           # made once: this program's sequence and head, tiles of the shapes it loads
        d_q, d_k = rows_desc(q, tok0, i_h, T_seq, H, K, BT, BK), rows_desc(k, tok0, i_h, T_seq, H, K, BT, BK)
        d_v, d_o = rows_desc(v, tok0, i_hv, T_seq, HV, V, BT, BV), rows_desc(o, tok0, i_hv, T_seq, HV, V, BT, BV)
        d_P = rows_desc(attn, tok0, i_hv, T_seq, HV, BT, BT, BT)
        d_P2 = rows_desc(attn2, tok0, i_hv, T_seq, HV, BT, BT, BT)
        d_T = rows_desc(tb, tok0, i_hv, T_seq, HV, BT, BT, BT)
        d_T2 = rows_desc(tb2, tok0, i_hv, T_seq, HV, BT, BT, BT)
        tensors = (d_q, d_k, g, beta, w, w2, w3, u, rq, rk, Gc, d_P, d_P2, d_v, d_T, d_T2, d_o, t_low)
    else:
        tensors = (q, k, g, beta, w, w2, w3, u, rq, rk, Gc, attn, attn2, v, tb, tb2, o, t_low)
    where = (tok0, T_seq, i_h, i_hv, i_nh, i_v, o_k, o_v, m_v, m_kv)
    # F16: the WY pass counts each group of value heads (which share q and k, stored by the first).
    COUNTED: tl.constexpr = HV // H if F16 else 1
    i_count = counting_head(i_hv, H, HV, F16)
    if WAIT:
        # One pipelined loop (v9): the loads of chunk c + 1 are issued while chunk c is formed (AHEAD,
        # the pipeline's stages, bounds how far ahead), so chunk c waits for the group of chunk
        # c + AHEAD and no group starts with its loads exposed. (v8 waited at each group's start and
        # ran the group in a loop of its own, pipelined on its own: 44 B of spills, a 1533-instruction
        # loop body against 1284, and each group's first loads issued after its wait.)
        for c_first in range(c0, tl.minimum(c0 + AHEAD, c1), GROUP):
            wait_group(done, i_n, i_count, c_first, NT, HV, GROUP, COUNTED)
    for c in tl.range(c0, c1, num_stages=AHEAD if ALL_LOADS else None):
        if WAIT:
            if ((c + AHEAD) % GROUP == 0) & (c + AHEAD < c1):
                wait_group(done, i_n, i_count, c + AHEAD, NT, HV, GROUP, COUNTED)
        if F16:
            b_S, b_sig = walk_chunk_f16(c, b_S, b_sig, tensors, where, scale, H, HV, K, V, BT, BK, BV, DOT_DTYPE,
                                        F16_DOT, TMA)
        else:
            b_S = _walk_chunk(c, b_S, tensors, where, scale, H, HV, K, V, BT, BK, BV, USE_L2NORM, FAST_DOTS,
                              PRECISION, DOT_DTYPE, SPLIT, ATTN_IN, T_IN, FUSED, Q_REGS, TMA, Q_LATE)

    if STORE_FINAL:
        if i_p == P - 1:
            if F16:
                b_S = b_S * (1.0 / b_sig)             # a power of two: exact
            tl.store(ht + i_state + o_k[:, None] * V + o_v[None, :], b_S, mask=m_kv)

"""The chunk math of gdn.ops.wy in Triton: device functions and the parallel WY kernel.

For one chunk of BT tokens (rows), with G the in-chunk cumulative log-decay:
    D_ij = e^{G_i - G_j} for j <= i, else 0          (formed from non-positive exponents only)
    A    = beta_i (k_i . k_j) D_ij for j < i           (strictly lower)
    T    = (I + A)^-1
    u    = T diag(beta) v,   w = T diag(beta e^G) k    (the WY factors; writes are U = u - w S)

``wy_kernel`` computes u and w for every chunk of every sequence and head at once (they do not
depend on the state), so the sequential state walk only multiplies.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def load_chunk(q, k, g, beta, tok0, t0, T_seq, i_h, i_hv,
                H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                USE_L2NORM: tl.constexpr, DOT_DTYPE: tl.constexpr, WITH_Q: tl.constexpr = True):
    """One chunk's q, k [BT, BK] in DOT_DTYPE, as stored; their l2-norm factors r_q, r_k [BT] (ones
    without l2norm); g, beta [BT] fp32. Rows past T_seq are zero (g = beta = 0: the identity map).
    With WITH_Q=False, q is not read (zeros).

    The normalisation is never applied to the tiles: it is a per-row scaling that every product below
    applies to its fp32 result, so normalised keys are not rounded back to bf16."""
    o_t = t0 + tl.arange(0, BT)
    m_t = o_t < T_seq
    o_k = tl.arange(0, BK)
    m_qk = m_t[:, None] & (o_k < K)[None, :]
    rows = tok0 + o_t.to(tl.int64)
    b_q = tl.load(q + (rows[:, None] * H + i_h) * K + o_k[None, :], mask=m_qk & WITH_Q, other=0.0)
    b_k = tl.load(k + (rows[:, None] * H + i_h) * K + o_k[None, :], mask=m_qk, other=0.0)
    if USE_L2NORM:
        b_qf = b_q.to(tl.float32)
        b_kf = b_k.to(tl.float32)
        b_rq = tl.rsqrt(tl.sum(b_qf * b_qf, axis=1) + 1e-6)
        b_rk = tl.rsqrt(tl.sum(b_kf * b_kf, axis=1) + 1e-6)
    else:
        b_rq = tl.full([BT], 1.0, dtype=tl.float32)
        b_rk = tl.full([BT], 1.0, dtype=tl.float32)
    b_g = tl.load(g + rows * HV + i_hv, mask=m_t, other=0.0).to(tl.float32)
    b_beta = tl.load(beta + rows * HV + i_hv, mask=m_t, other=0.0).to(tl.float32)
    return b_q.to(DOT_DTYPE), b_k.to(DOT_DTYPE), b_rq, b_rk, b_g, b_beta, rows, m_t


@triton.jit
def chunk_decay(b_g, BT: tl.constexpr):
    """In-chunk cumulative log-decay G [BT] and the causal decay matrix D [BT, BT] (diagonal included)."""
    b_G = tl.cumsum(b_g, axis=0)
    o_i = tl.arange(0, BT)
    causal = o_i[:, None] >= o_i[None, :]
    b_D = tl.exp(tl.where(causal, b_G[:, None] - b_G[None, :], float("-inf")))
    return b_G, b_D


@triton.jit
def unit_lower_inverse(b_A, BT: tl.constexpr, BLOCK: tl.constexpr, LOG_BLOCKS: tl.constexpr,
                       INVERSE: tl.constexpr):
    """(I + A)^-1 for a strictly lower-triangular fp32 tile A [BT, BT]; LOG_BLOCKS = log2(BT / BLOCK).

    1. The BLOCK x BLOCK diagonal blocks, all at once: INVERSE="substitution" by forward substitution
       over their BLOCK rows (row r of every block in one step: elementwise work and reductions);
       INVERSE="product" as (I - A_d)(I + A_d^2)(I + A_d^4)(I + A_d^8) (A_d^BLOCK = 0; matrix units
       only, at tf32x3 because the partial products can exceed the inverse's entries).
    2. With X = (I + A_diag)^-1 and N = X A_off (strictly block-lower, so N^(BT/BLOCK) = 0):
       (I + A)^-1 = (I + N)^-1 X = (I - N)(I + N^2)(I + N^4)... X: a few BT^3 products.
    """
    o_i = tl.arange(0, BT)
    same_block = (o_i[:, None] // BLOCK) == (o_i[None, :] // BLOCK)
    eye = tl.where(o_i[:, None] == o_i[None, :], 1.0, 0.0)
    b_Ad = tl.where(same_block, b_A, 0.0)
    if INVERSE == "product":
        b_X = eye - b_Ad
        b_P = b_Ad
        for _ in tl.static_range(1, 4):          # BLOCK = 16 = 2^4
            b_P = tl.dot(b_P, b_P, input_precision="tf32x3")
            b_X = tl.dot(b_X, eye + b_P, input_precision="tf32x3")
    else:
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
                     PRECISION: tl.constexpr, INVERSE: tl.constexpr):
    """T = (I + A)^-1 with A_ij = beta_i (k_i . k_j) r_i r_j D_ij, j < i: b_k [BT, BK] the keys as
    stored (fp32 keys multiply at PRECISION), b_rk [BT] their l2-norm factors."""
    o_i = tl.arange(0, BT)
    if b_k.dtype == tl.float32:
        b_kk = tl.dot(b_k, tl.trans(b_k), input_precision=PRECISION)
    else:
        b_kk = tl.dot(b_k, tl.trans(b_k))
    b_A = tl.where(o_i[:, None] > o_i[None, :], (b_beta * b_rk)[:, None] * b_kk * b_rk[None, :] * b_D, 0.0)
    return unit_lower_inverse(b_A, BT, BLOCK, LOG_BLOCKS, INVERSE)


@triton.jit
def locate_chunk(i_slot, chunk_offsets, cu_seqlens, T, NT, N, IS_VARLEN: tl.constexpr, LOG_N: tl.constexpr):
    """Map a flat chunk slot to (sequence, chunk within it, first token, length of the sequence).

    Dense batches: slot = sequence * NT + chunk. Packed sequences: chunk_offsets [N + 1] holds the
    cumulative chunk counts; a binary search finds the last sequence starting at or before the slot
    (empty sequences own no slot). Slots past the last chunk return a chunk index past the end."""
    if IS_VARLEN:
        lo = 0
        hi = N
        for _ in tl.static_range(LOG_N):
            mid = (lo + hi) // 2
            go_right = tl.load(chunk_offsets + mid) <= i_slot
            lo = tl.where(go_right, mid, lo)
            hi = tl.where(go_right, hi, mid)
        i_n = lo
        i_c = i_slot - tl.load(chunk_offsets + i_n)
        tok0 = tl.load(cu_seqlens + i_n).to(tl.int64)
        T_seq = (tl.load(cu_seqlens + i_n + 1).to(tl.int64) - tok0).to(tl.int32)
    else:
        i_n = i_slot // NT
        i_c = i_slot % NT
        tok0 = i_n.to(tl.int64) * T
        T_seq = T
    return i_n, i_c, tok0, T_seq


@triton.jit
def wy_kernel(
    q, k, v, g, beta, w_out, u_out, chunk_offsets, cu_seqlens, T, NT, N, NUM_SLOTS,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    BLOCK: tl.constexpr, LOG_BLOCKS: tl.constexpr, LOG_N: tl.constexpr, USE_L2NORM: tl.constexpr,
    IS_VARLEN: tl.constexpr, PRECISION: tl.constexpr, INVERSE: tl.constexpr, DOT_DTYPE: tl.constexpr,
):
    """w [tokens, HV, K] and u [tokens, HV, V] (in w_out's dtype) for one chunk of one value head.
    Grid: (chunk slots, HV)."""
    i_slot, i_hv = tl.program_id(0), tl.program_id(1)
    if i_slot >= NUM_SLOTS:
        return
    i_n, i_c, tok0, T_seq = locate_chunk(i_slot, chunk_offsets, cu_seqlens, T, NT, N, IS_VARLEN, LOG_N)
    i_h = i_hv // (HV // H)
    b_q, b_k, b_rq, b_rk, b_g, b_beta, rows, m_t = load_chunk(q, k, g, beta, tok0, i_c * BT, T_seq, i_h, i_hv,
                                                          H, HV, K, BT, BK, USE_L2NORM, DOT_DTYPE, False)
    b_G, b_D = chunk_decay(b_g, BT)
    b_T = chunk_wy_inverse(b_k, b_rk, b_beta, b_D, BT, BLOCK, LOG_BLOCKS, PRECISION, INVERSE)
    o_k = tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    m_v = o_v < V
    b_v = tl.load(v + (rows[:, None] * HV + i_hv) * V + o_v[None, :], mask=m_t[:, None] & m_v[None, :],
                  other=0.0).to(tl.float32)
    b_u = tl.dot(b_T * b_beta[None, :], b_v, input_precision="tf32x3")
    b_w = tl.dot(b_T * (b_beta * b_rk * tl.exp(b_G))[None, :], b_k.to(tl.float32), input_precision="tf32x3")
    p_w = w_out + (rows[:, None] * HV + i_hv) * K + o_k[None, :]
    p_u = u_out + (rows[:, None] * HV + i_hv) * V + o_v[None, :]
    tl.store(p_w, b_w.to(w_out.dtype.element_ty), mask=m_t[:, None] & (o_k < K)[None, :])
    tl.store(p_u, b_u.to(u_out.dtype.element_ty), mask=m_t[:, None] & m_v[None, :])

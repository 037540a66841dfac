"""Triton forward of Gated DeltaNet: a parallel WY pass, then a lean state walk that writes the outputs.

Kernels:

* ``wy_kernel`` (gdn.ops.triton.wy): every chunk of every sequence and head at once: the WY factors
  w [tokens, HV, K] and u [tokens, HV, V] (they do not depend on the state).
* ``_segment_maps_kernel``: only when sequences x heads cannot fill the GPU. Each sequence is cut into
  segments and every segment but the last is summarised as its affine map S -> A S + B (seed 000):
  the same recurrence as the state walk, [A | B] starting at [I | 0], the A columns driven by zero
  values. No truncation, whatever the gates.
* ``_chunk_fwd_kernel``: grid (V blocks, sequences x value heads, segments). One program walks the
  chunks of one segment with a K x BV block of the state in registers: U = u - w S, outputs
  O = (q e^G) S + (q k^T . D) U, then S <- e^{G_C} S + (k e^{G_C - G})^T U. Segment p first folds
  the maps of segments 0..p-1 onto the initial state. Nothing per chunk is written but o.

The l2 normalisation of q and k is a per-row scaling applied to fp32 products, never a rounding of the
bf16 tiles. Naming: ``p_`` pointers, ``b_`` register blocks, ``o_`` offsets, ``m_`` masks, ``i_``
program ids. Token offsets are int64: tokens x heads x dim passes 2^31 at a million tokens.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .wy import chunk_decay, load_chunk, wy_kernel

SUBBLOCK = 16            # diagonal-block size of the in-chunk triangular inverse


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
def _segment_maps_kernel(
    q, k, g, beta, w, u, maps_A, maps_B, T, L, P,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BM: tl.constexpr, NMK: tl.constexpr, USE_L2NORM: tl.constexpr,
    FAST_DOTS: tl.constexpr, PRECISION: tl.constexpr, DOT_DTYPE: tl.constexpr,
):
    i_m, i_nh, i_p = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)
    tok0 = i_n.to(tl.int64) * T
    NT = tl.cdiv(T, BT)
    c0 = i_p * L
    c1 = tl.minimum(c0 + L, NT)

    is_a = i_m < NMK                                 # columns of A (K of them) or of B (V of them)
    o_c = tl.where(is_a, i_m, i_m - NMK) * BM + tl.arange(0, BM)
    m_c = o_c < tl.where(is_a, K, V)
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    b_M = tl.where((o_k[:, None] == o_c[None, :]) & is_a, 1.0, 0.0)     # [I | 0], this block's columns

    for c in range(c0, c1):
        b_q, b_k, b_rq, b_rk, b_g, b_beta, rows, m_t = load_chunk(q, k, g, beta, tok0, c * BT, T, i_h, i_hv,
                                                                  H, HV, K, BT, BK, USE_L2NORM, DOT_DTYPE)
        b_w = tl.load(w + (rows[:, None] * HV + i_hv) * K + o_k[None, :], mask=m_t[:, None] & m_k[None, :], other=0.0)
        # The A columns see zero values: their "state" is the product of the chunks' linear parts.
        b_u = tl.load(u + (rows[:, None] * HV + i_hv) * V + o_c[None, :],
                      mask=m_t[:, None] & m_c[None, :] & (i_m >= NMK), other=0.0)
        b_G_last = tl.sum(b_g, axis=0)
        b_G = tl.cumsum(b_g, axis=0)
        b_U = b_u.to(tl.float32) - _mm(b_w, b_M, FAST_DOTS, PRECISION, DOT_DTYPE)
        b_kd = b_k.to(tl.float32) * (b_rk * tl.exp(b_G_last - b_G))[:, None]
        b_M = b_M * tl.exp(b_G_last) + _mm(tl.trans(b_kd), b_U, FAST_DOTS, PRECISION, DOT_DTYPE)

    i_map = (i_nh * (P - 1) + i_p).to(tl.int64)
    p_A = maps_A + i_map * K * K + o_k[:, None] * K + o_c[None, :]
    p_B = maps_B + i_map * K * V + o_k[:, None] * V + o_c[None, :]
    m_out = m_k[:, None] & m_c[None, :]
    tl.store(p_A, b_M, mask=m_out & is_a)
    tl.store(p_B, b_M, mask=m_out & (i_m >= NMK))


@triton.jit
def _chunk_fwd_kernel(
    q, k, g, beta, w, u, o, h0, ht, maps_A, maps_B, cu_seqlens, scale, T, L, P,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, USE_L2NORM: tl.constexpr,
    IS_VARLEN: tl.constexpr, HAS_H0: tl.constexpr, STORE_FINAL: tl.constexpr,
    FAST_DOTS: tl.constexpr, PRECISION: tl.constexpr, DOT_DTYPE: tl.constexpr,
):
    i_v, i_nh, i_p = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)
    if IS_VARLEN:
        tok0 = tl.load(cu_seqlens + i_n).to(tl.int64)
        T_seq = (tl.load(cu_seqlens + i_n + 1).to(tl.int64) - tok0).to(tl.int32)
    else:
        tok0 = i_n.to(tl.int64) * T
        T_seq = T
    NT = tl.cdiv(T_seq, BT)
    c0 = i_p * L
    c1 = tl.minimum(c0 + L, NT)

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
    for s in range(0, i_p):
        i_map = (i_nh * (P - 1) + s).to(tl.int64)
        b_A = tl.load(maps_A + i_map * K * K + o_k[:, None] * K + o_k[None, :],
                      mask=m_k[:, None] & m_k[None, :], other=0.0).to(tl.float32)
        b_B = tl.load(maps_B + i_map * K * V + o_k[:, None] * V + o_v[None, :], mask=m_kv, other=0.0).to(tl.float32)
        b_S = tl.dot(b_A, b_S, input_precision="tf32x3") + b_B

    for c in range(c0, c1):
        b_q, b_k, b_rq, b_rk, b_g, b_beta, rows, m_t = load_chunk(q, k, g, beta, tok0, c * BT, T_seq, i_h, i_hv,
                                                                  H, HV, K, BT, BK, USE_L2NORM, DOT_DTYPE)
        b_w = tl.load(w + (rows[:, None] * HV + i_hv) * K + o_k[None, :], mask=m_t[:, None] & m_k[None, :], other=0.0)
        b_u = tl.load(u + (rows[:, None] * HV + i_hv) * V + o_v[None, :], mask=m_t[:, None] & m_v[None, :], other=0.0)
        b_G, b_D = chunk_decay(b_g, BT)
        b_U = b_u.to(tl.float32) - _mm(b_w, b_S, FAST_DOTS, PRECISION, DOT_DTYPE)       # the real writes
        b_attn = _dot_inputs(b_q, tl.trans(b_k), PRECISION) * (b_rq[:, None] * b_rk[None, :] * b_D)
        b_o = _mm(b_q, b_S, FAST_DOTS, PRECISION, DOT_DTYPE) * (b_rq * tl.exp(b_G))[:, None]
        b_o = (b_o + _mm(b_attn, b_U, FAST_DOTS, PRECISION, DOT_DTYPE)) * scale
        p_o = o + (rows[:, None] * HV + i_hv) * V + o_v[None, :]
        tl.store(p_o, b_o.to(o.dtype.element_ty), mask=m_t[:, None] & m_v[None, :])
        b_G_last = tl.sum(b_g, axis=0)
        b_kd = b_k.to(tl.float32) * (b_rk * tl.exp(b_G_last - b_G))[:, None]
        b_S = b_S * tl.exp(b_G_last) + _mm(tl.trans(b_kd), b_U, FAST_DOTS, PRECISION, DOT_DTYPE)

    if STORE_FINAL:
        if i_p == P - 1:
            tl.store(ht + i_state + o_k[:, None] * V + o_v[None, :], b_S, mask=m_kv)


_TL_DTYPES = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4                       # Triton's CPU interpreter: small, so small tests exercise the split


def choose_segments(programs: int, num_chunks: int, num_sms: int, min_chunks: int = 4) -> int:
    """How many segments to cut each sequence into so that about two programs run per SM, keeping
    at least ``min_chunks`` chunks per segment (the segment maps cost about one extra state walk)."""
    if programs >= 2 * num_sms or num_chunks < 2 * min_chunks:
        return 1
    return max(1, min(triton.cdiv(2 * num_sms, programs), num_chunks // min_chunks))


def triton_forward(q, k, v, g, beta, *, scale: float, initial_state=None, output_final_state=False,
                   cu_seqlens=None, use_qk_l2norm=False, chunk_size=64, num_segments=None,
                   fast_dots=False, precision=None, wy_dtype=torch.float32, inverse="substitution",
                   num_warps=4, num_stages=1, out=None):
    """Launch the forward. Arguments and results as :func:`gdn.gated_delta_rule` (checked there).

    Extra knobs (benchmarks and tests): ``num_segments`` forces the per-sequence split (dense batches
    only; default chooses from the SM count); ``fast_dots`` runs the state products with operands in
    the input dtype (FLA's choice: faster, less exact); ``precision`` the fp32 products' Triton
    ``input_precision`` otherwise ("tf32", "tf32x3" or "ieee"; default "tf32x3" for fp32 inputs,
    "tf32" for 16-bit ones, whose own rounding is larger); ``wy_dtype`` the dtype w and u are kept
    in between the two passes; ``inverse`` how the in-chunk triangular inverse is formed
    ("substitution" or "product", see gdn.ops.triton.wy); ``out`` an output buffer ``[B, T, HV, V]``
    in v's dtype to write into.
    """
    if chunk_size not in (16, 32, 64, 128):
        raise ValueError(f"backend='triton' supports chunk_size 16, 32, 64 or 128, got {chunk_size}")
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if K > 256 or V > 256:
        raise ValueError(f"backend='triton' supports head dims K, V <= 256, got K={K}, V={V}")
    N = B if cu_seqlens is None else cu_seqlens.numel() - 1
    if q.dtype == torch.float64:           # no fp64 matrix units: compute from fp32 inputs
        q = q.float()
    q, k, v = q.contiguous(), k.to(q.dtype).contiguous(), v.contiguous()
    if precision is None:
        precision = "tf32x3" if q.dtype == torch.float32 else "tf32"
    g, beta = g.float().contiguous(), beta.float().contiguous()
    h0 = None if initial_state is None else initial_state.float().contiguous()
    o = torch.empty(B, T, HV, V, dtype=v.dtype, device=v.device) if out is None else out
    ht = torch.empty(N, HV, K, V, dtype=torch.float32, device=v.device) if output_final_state else None
    if T == 0:
        if ht is not None:
            ht.copy_(h0) if h0 is not None else ht.zero_()
        return o, ht

    BT = chunk_size
    BK = max(16, triton.next_power_of_2(K))
    BV = max(16, min(64, triton.next_power_of_2(V)))
    NV = triton.cdiv(V, BV)
    BLOCK = min(SUBBLOCK, BT)
    NT = triton.cdiv(T, BT)
    # Triton's CPU interpreter multiplies 16-bit tiles wrongly (it reads their raw bits): upcast there.
    dot_dtype = tl.float32 if _interpreting() else _TL_DTYPES[q.dtype]
    common = dict(H=H, HV=HV, K=K, V=V, BT=BT, BK=BK, USE_L2NORM=use_qk_l2norm, PRECISION=precision,
                  DOT_DTYPE=dot_dtype, num_warps=num_warps, num_stages=num_stages)
    dummy = o

    # 1. WY factors of every chunk, in parallel.
    w = torch.empty(B, T, HV, K, dtype=wy_dtype, device=q.device)
    u = torch.empty(B, T, HV, V, dtype=wy_dtype, device=q.device)
    if cu_seqlens is None:
        slots, chunk_offsets, log_n = N * NT, dummy, 0
    else:
        lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).to(torch.int32)
        chunk_offsets = torch.zeros(N + 1, dtype=torch.int32, device=q.device)
        torch.cumsum((lengths + BT - 1) // BT, 0, out=chunk_offsets[1:])
        slots, log_n = NT + N, max(1, N.bit_length())       # an upper bound: no host sync
    wy_kernel[(slots, HV)](
        q, k, v, g, beta, w, u, chunk_offsets, dummy if cu_seqlens is None else cu_seqlens, T, NT, N, slots,
        BV=max(16, triton.next_power_of_2(V)), BLOCK=BLOCK, LOG_BLOCKS=(BT // BLOCK).bit_length() - 1,
        LOG_N=log_n, IS_VARLEN=cu_seqlens is not None, INVERSE=inverse, **common)

    # 2. Segments (dense batches that cannot fill the GPU) and their affine maps.
    if cu_seqlens is not None:
        P = 1                      # packed sequences: parallel over sequences x heads already
    elif num_segments is not None:
        P = max(1, min(int(num_segments), NT))
    else:
        P = choose_segments(N * HV * NV, NT, _num_sms(q.device))
    L = triton.cdiv(NT, P) if P > 1 else max(NT, 1 << 30)
    if P > 1:
        P = triton.cdiv(NT, L)     # no empty segments
    maps_A = maps_B = dummy
    if P > 1:
        maps_A = torch.empty(N * HV * (P - 1), K, K, dtype=torch.float32, device=q.device)
        maps_B = torch.empty(N * HV * (P - 1), K, V, dtype=torch.float32, device=q.device)
        NMK = triton.cdiv(K, BV)
        _segment_maps_kernel[(NMK + NV, N * HV, P - 1)](
            q, k, g, beta, w, u, maps_A, maps_B, T, L, P, BM=BV, NMK=NMK, FAST_DOTS=fast_dots, **common)

    # 3. The state walk and the outputs.
    _chunk_fwd_kernel[(NV, N * HV, P)](
        q, k, g, beta, w, u, o, dummy if h0 is None else h0, dummy if ht is None else ht, maps_A, maps_B,
        dummy if cu_seqlens is None else cu_seqlens, scale, T, L, P, BV=BV,
        IS_VARLEN=cu_seqlens is not None, HAS_H0=h0 is not None, STORE_FINAL=ht is not None,
        FAST_DOTS=fast_dots, **common)
    return o, ht

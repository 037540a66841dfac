"""The outputs of a piece of chunks, beside the state walk (``outputs="beside"``, launched by
gdn.ops.triton.forward).

The state walk is a chain of dependent products a chunk; a chunk's outputs O = (q e^G) S + P U are
not on that chain, yet inside the walk they sit in series with it. With ``outputs="beside"`` the
walk of one piece of chunks (gdn.ops.triton.chunk_fwd, OUT_RING) leaves each chunk's start state S
(as the bf16 parts of -S it forms anyway) and its writes U (two bf16 parts) in a ring of two
pieces, and ``_chunk_out_kernel`` forms that piece's outputs in parallel over chunks, heads and
state columns, on its own stream, while the walk goes on with the next piece. The ring holds two
pieces, whatever the sequence length (the forward keeps no per-chunk state beyond it).

The products are the walk's own, on the same parts: the outputs do not change.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .addressing import row_vec, rows_block
from .split_dot import dot_parts, dot_split
from .chunk_io import load_chunk_square


@triton.jit
def ring_offsets(i_slot, i_nh, NHV, ROWS: tl.constexpr, V: tl.constexpr, o_r, o_v):
    """Offsets of the tile (rows o_r, columns o_v) of ring slot i_slot, sequence x head i_nh, in a
    [slots, NHV, ROWS, V] ring: the chunk states (ROWS = K) or the writes (ROWS = BT)."""
    return ((i_slot.to(tl.int64) * NHV + i_nh) * ROWS + o_r[:, None]) * V + o_v[None, :]


@triton.jit
def stored_attention_outputs(b_nqS, b_rq, scale, b_G, b_P, b_P2, b_u1, b_u2, FUSED: tl.constexpr = False):
    """One chunk's outputs o = (q S) scale r_q e^G + P U [BT, BV] (fp32) from -(q S) (b_nqS), the
    output attention P that the WY pass stored (its two bf16 parts; wy.store_attention) and the two
    bf16 parts of U (P U as one product with FUSED: split_dot.dot_split). The walk (chunk_fwd) and
    the outputs beside it (_chunk_out_kernel) both form them here."""
    b_o = b_nqS * (-b_rq * scale * tl.exp(b_G))[:, None]
    return dot_split(b_P, b_P2, 2, b_u1, b_u2, b_o, FUSED)


@triton.jit(do_not_specialize=["C_BEGIN", "RING_BASE"])
def _chunk_out_kernel(
    q, rq, Gc, attn, attn2, ring_s, ring_s2, ring_u, ring_u2, o, scale, T, NHV, C_BEGIN, RING_BASE,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, USE_L2NORM: tl.constexpr, DOT_DTYPE: tl.constexpr,
):
    """o for chunk C_BEGIN + i_c of sequence x value head i_nh, columns i_v * BV .. of a dense batch
    ([B, T] tokens). Grid: (V blocks, chunks of the piece, B x HV). The ring slot of the chunk is
    RING_BASE + i_c."""
    i_v, i_c, i_nh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)
    c = C_BEGIN + i_c
    tok0 = i_n.to(tl.int64) * T
    row0 = tok0 + c * BT
    o_t = tl.arange(0, BT)
    m_t = (c * BT + o_t) < T
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_kv = (o_k < K)[:, None] & (o_v < V)[None, :]
    m_tv = m_t[:, None] & (o_v < V)[None, :]
    i_slot = RING_BASE + i_c

    b_q = tl.load(rows_block(q, tok0, i_h, T, c * BT, H, K, BT, BK), boundary_check=(0, 1),
                  padding_option="zero").to(DOT_DTYPE)
    if USE_L2NORM:
        b_rq = tl.load(row_vec(rq, row0, i_hv, HV, o_t), mask=m_t, other=0.0)
    else:
        b_rq = tl.full([BT], 1.0, dtype=tl.float32)
    b_G = tl.load(row_vec(Gc, row0, i_hv, HV, o_t), mask=m_t, other=0.0)
    o_s = ring_offsets(i_slot, i_nh, NHV, K, V, o_k, o_v)
    b_s1 = tl.load(ring_s + o_s, mask=m_kv, other=0.0).to(DOT_DTYPE)        # the parts of -S
    b_s2 = tl.load(ring_s2 + o_s, mask=m_kv, other=0.0).to(DOT_DTYPE)
    o_u = ring_offsets(i_slot, i_nh, NHV, BT, V, o_t, o_v)
    b_u1 = tl.load(ring_u + o_u, mask=m_tv, other=0.0).to(DOT_DTYPE)        # the parts of U
    b_u2 = tl.load(ring_u2 + o_u, mask=m_tv, other=0.0).to(DOT_DTYPE)
    b_P, b_P2 = load_chunk_square(attn, attn2, tok0, i_hv, T, c * BT, HV, BT, DOT_DTYPE)
    b_nqS = dot_parts(b_q, b_q, b_q, 1, b_s1, b_s2, b_s2, 2, None)          # -(q S) = q (-S)
    b_o = stored_attention_outputs(b_nqS, b_rq, scale, b_G, b_P, b_P2, b_u1, b_u2)
    tl.store(rows_block(o, tok0, i_hv, T, c * BT, HV, V, BT, BV, i_v * BV), b_o.to(o.dtype.element_ty),
             boundary_check=(0, 1))

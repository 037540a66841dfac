"""One chunk of the state walk on fp16 matrix operands, scaled by powers of two (``operands="fp16"``).

The split walk (chunk_fwd._walk_chunk) keeps every computed operand of its products as two bf16
parts: 16 bits of mantissa, at two to four times the matrix work of one product. One fp16 operand
keeps 11 bits (bf16 keeps 8), which is enough here: replayed in float64 (benchmarks/precision_study.py)
the walk on single fp16 operands gives o 1.72e-3 / 1.77e-3 and S 4.2e-4 / 5.6e-4 against float64
(decaying / long-memory gates), where single bf16 operands give 3.9e-3 / 5.1e-3 and 3.4e-3 / 4.5e-3
(FLA's rounding) and the bf16 output's own rounding is 1.66e-3. Each product is then one product.

fp16 has a narrow range (normal from 2^-14, largest 65504), so nothing goes to fp16 unscaled:
* q and k are l2-normalised before rounding (|entries| <= 1; this mode needs use_qk_l2norm: the WY
  pass stores them so, [tokens, H, K] in fp16, which the walk loads as it loads q and k), and the
  WY pass's T diag(beta) (|entries| <= 1 for beta in [0, 1]: the delta rule's projections are
  contractions; a few times that for beta up to 2) and output attention P (|entries| <= |scale|) are
  stored in fp16 as they are (inputs that make the recurrence itself blow up, beta far above 2 or
  growing gates g > 0, would overflow there: NaN, never a quiet error);
* the state, the values and everything linear in them (Z, U) are carried at a scale sigma, a power of
  two, so that they stay near 1: the walk holds S^ = sigma S, reads v^ = sigma v, writes o = o^ / sigma
  and stores S = S^ / sigma at the end. Powers of two scale fp32 values exactly, so the scaling itself
  changes no number.
* Per chunk: zeta <= 1 brings this chunk's values to |v^ zeta| <= 1 before Z is formed (a value that
  jumps by any factor stays in range); after the update, rho (at most 4) brings the decayed old state
  back to <= 1, from the state's maximum at the chunk's start (a reduction that runs beside the
  chunk's products: it is needed only at the chunk's end). The new state is then at most 1 plus one
  chunk's writes, far inside fp16's range; a state that shrinks is scaled back up by 4 a chunk.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .addressing import load_rows, row_vec, store_rows
from .wy import load_chunk


@triton.jit
def pow2_below_inverse(m):
    """A power of two p with m p in [1/2, 1) for normal m > 0 (from m's exponent bits, exact),
    clamped to 2^-100 .. 2^99 (p = 2^99 for m = 0)."""
    e = ((m.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    e = tl.minimum(tl.maximum(e, -100), 99)
    return ((126 - e) << 23).to(tl.float32, bitcast=True)


@triton.jit
def to_f16(x, F16_DOT: tl.constexpr):
    """x rounded to fp16, as the matrix units take it (F16_DOT: fp16; fp32 in Triton's interpreter,
    whose 16-bit products read raw bits: the values are still rounded to fp16)."""
    return x.to(tl.float16).to(F16_DOT)


@triton.jit
def walk_chunk_f16(c, b_S, b_sig, tensors, where, scale,
                   H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                   BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, DOT_DTYPE: tl.constexpr,
                   F16_DOT: tl.constexpr, TMA: tl.constexpr = False):
    """Chunk c of the walk from S^ = sigma S (b_S [BK, BV] fp32, b_sig = sigma): writes the chunk's
    outputs, returns (S^, sigma) after it. tensors and where as chunk_fwd._walk_chunk's (the WY pass
    stored T diag(beta) at tb, P at attn and the l2-normalised q and k at q, k in fp16, G at Gc)."""
    q, k, g, beta, w, w2, w3, u, rq, rk, Gc, attn, attn2, v, tb, tb2, o = tensors
    tok0, T_seq, i_h, i_hv, i_nh, i_v, o_k, o_v, m_v, m_kv = where
    # q and k: the WY pass's l2-normalised fp16 copies (|entries| <= 1).
    b_qn, b_kn, b_rq, b_rk, b_g, b_beta, row0, o_t, m_t = load_chunk(
        q, k, g, beta, tok0, c * BT, T_seq, i_h, i_hv, H, HV, K, BT, BK, False, F16_DOT, True, rq, rk, True, TMA)
    b_v = load_rows(v, tok0, i_hv, T_seq, c * BT, HV, V, BT, BV, i_v * BV, TMA).to(tl.float32)
    # G as the WY pass stored it; rows past the end take G_last (identity rows).
    b_G_last = tl.load(Gc + (row0 + tl.minimum(BT, T_seq - c * BT) - 1) * HV + i_hv)
    b_G = tl.where(m_t, tl.load(row_vec(Gc, row0, i_hv, HV, o_t), mask=m_t, other=0.0), b_G_last)
    # The state's largest entry at the chunk's start: needed only at its end (rho), so off the chain.
    b_mS = tl.max(tl.max(tl.abs(b_S), axis=1), axis=0)
    b_s = to_f16(b_S, F16_DOT)
    # zeta: this chunk's values at |v sigma zeta| <= 1 (a power of two, <= 1).
    b_zeta = tl.minimum(pow2_below_inverse(tl.max(tl.max(tl.abs(b_v), axis=1), axis=0) * b_sig), 1.0)
    # Z^ = zeta (v^ - e^G . (k_n S^)), U^ = T diag(beta) Z^: both at scale sigma zeta.
    b_Z = b_v * (b_sig * b_zeta) - tl.dot(b_kn, b_s) * (b_zeta * tl.exp(b_G))[:, None]
    b_T = load_rows(tb, tok0, i_hv, T_seq, c * BT, HV, BT, BT, BT, 0, TMA).to(F16_DOT)
    b_U = tl.dot(b_T, to_f16(b_Z, F16_DOT))
    # o = (scale e^G . (q_n S^) + P U^ / zeta) / sigma
    b_P = load_rows(attn, tok0, i_hv, T_seq, c * BT, HV, BT, BT, BT, 0, TMA).to(F16_DOT)
    b_o = tl.dot(b_qn, b_s) * (scale * b_zeta * tl.exp(b_G))[:, None]
    b_o = tl.dot(b_P, to_f16(b_U, F16_DOT), b_o) * (1.0 / (b_sig * b_zeta))   # powers of two: exact
    store_rows(o, b_o, tok0, i_hv, T_seq, c * BT, HV, V, BT, BV, i_v * BV, TMA)
    # S^ <- rho (e^{G_C} zeta S^ + k_n^T (e^{G_C - G} . U^)), now at scale sigma zeta rho.
    b_gamma = tl.exp(b_G_last) * b_zeta
    # rho <= 4, and sigma <= 2^64: a state and values that stay zero scale up no further.
    b_rho = tl.minimum(pow2_below_inverse(b_mS * b_gamma), 4.0)
    b_rho = tl.where(b_sig * b_zeta * b_rho > 18446744073709551616.0, 1.0, b_rho)
    b_c = to_f16(b_U * tl.exp(b_G_last - b_G)[:, None], F16_DOT)
    b_S = tl.dot(tl.trans(b_kn), b_c, b_S * b_gamma) * b_rho
    return b_S, b_sig * b_zeta * b_rho

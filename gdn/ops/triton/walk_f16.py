"""One chunk of the state walk on fp16 matrix operands, scaled by powers of two (``operands="fp16"``).

The split walk (chunk_fwd._walk_chunk) keeps every computed operand of its products as two bf16
parts: 16 bits of mantissa, at two to four times the matrix work of one product. One fp16 operand
keeps 11 bits (bf16 keeps 8), which is enough here: replayed in float64 (benchmarks/precision_study.py)
the walk on single fp16 operands gives o 1.72e-3 / 1.77e-3 and S 4.2e-4 / 5.6e-4 against float64
(decaying / long-memory gates), where single bf16 operands give 3.9e-3 / 5.1e-3 and 3.4e-3 / 4.5e-3
(FLA's rounding) and the bf16 output's own rounding is 1.66e-3. Each product is then one product.

fp16 has a narrow range (normal from 2^-14, largest 65504), so nothing goes to fp16 unscaled:
* q and k: the WY pass stores fp16 copies, [tokens, H, K], which the walk loads as it loads q and k.
  With use_qk_l2norm they are l2-normalised before rounding (|entries| <= 1). Without it they are the
  inputs as given: exact for bf16 entries of magnitude 2^-16 to 65504 and for fp16 inputs; smaller
  bf16 entries keep an absolute error <= 2^-25; larger ones overflow (inf, so NaN in o: never a quiet
  error; operands="bf16_parts" keeps bf16's range). Stable keys (beta |k|^2 <= 2, which the delta
  rule itself needs) keep the bounds below within a factor |k| of the unit-key ones.
  The WY pass's T diag(beta) (|entries| <= 1 for beta |k|^2 in [0, 1]: the delta rule's projections
  are contractions; a few times that up to 2) and output attention P (|entries| <= |scale| |q| |k|)
  are stored in fp16 as they are (inputs that make the recurrence itself blow up, beta |k|^2 far
  above 2 or growing gates g > 0, would overflow there: NaN, never a quiet error);
* the state, the values and everything linear in them (Z, U) go to fp16 scaled by powers of two
  (exact in fp32: the scaling changes no number), each from the largest entry of what it scales, so
  that its largest entry lands near 1 (its smaller ones then keep fp16's bits; a loose bound would
  push them below fp16's normal range, 2^-14, where they lose bits: a bound up to 2^13 too large
  doubled S's error at K = 128 in the interpreter):
  - the walk holds S^ = sigma S (sigma a power of two per program), reads it to fp16 as it is;
  - tau, the scale of Z = v - e^G (k S) and of the writes U = T diag(beta) Z, from this chunk's
    max |v| and max |S| e^{G_0} (e^G <= e^{G_0} with g <= 0; |k . S_col| <= |k| sqrt(K) max |S|,
    so |Z tau| <= 1 + |k| sqrt(K) and |U tau| <= BT (1 + |k| sqrt(K)): inside fp16's range for
    |k| up to ~80);
  - the next sigma from the two parts of the new state, e^{G_C} max |S| and 4 max |U| (the new S^
    then stays below 1 + BT / 4), so that the larger lands near 1.
  Ratios of scales meet e^G inside one exponent (exp2(G log2 e + log2 tau - log2 sigma)): a gate
  that forgets (G < -88) would otherwise overflow the ratio alone. The maxima are three reductions
  (the state's at the chunk's start and the values' beside the first product, the writes' beside
  the last): the chain waits for none. Each scale is chosen afresh from true magnitudes, so nothing
  drifts: 1e-30 or 1e30, a jump inside a sequence, a state erased by the delta rule or forgotten by a
  gate, at a chunk's start or late in it, are all scaled to near 1 (growing gates, g > 0, break the
  first bound; the contract is g <= 0).
  In the interpreter (K = V = 32, 256 tokens; tests/ops/triton/test_walk_f16.py) v and S0 scaled
  anywhere from 1e-30 to 1e36, values that jump by 3e4 or 1e16 after zeros, a gate that forgets (at a
  chunk's first token or its last, or at -100) with values 1e6-1e8 smaller after it: o within
  bf16's rounding (3.3-3.5e-3 at these dims), S 3.7-4.1e-4; v = 0 on a random state (the delta rule
  erasing it) S 1.0e-3.
  One limit is left: inside one chunk, a row of Z or U far below the chunk's largest keeps fewer
  bits (from ~2^14 below, fp16's normal range). That takes a gate that forgets mid-chunk a state
  ~1e5 or more larger than the values after it: with S0 x 1e6 and g = -60 at a chunk's second token
  the rows after it came out 7e-2 off, and the chunks after it 1.7e-2 (the state is rebuilt from
  those rows); the tensor's error in norm stays small only while the large rows dominate it.
  A second: where one chunk erases most of the state (v = 0 on keys that span its rows, beta near
  1), the new state is the difference of two near-equal terms, each rounded to fp16 relative to the
  state the chunk started from, so its error is relative to that state, not to what is left. At
  K = V = 64 and chunks of 64 (a chunk erasing ~1e6 of it, the state 1e-19 of S0 after 256 tokens)
  S came out 0.12 off relative to itself, 2.5e-7 of the last chunk's starting state, in this walk
  and in both Gluon walks alike (bf16_parts 5e-5; the fp32 backends 1e-6). At 32 dims and chunks of
  32 (1e3 a chunk) it is 1e-3. o is not affected (1.6e-3 there).
  Beta near 2 on repeated or nearly parallel keys (each step a reflection, I - 2 k k^T, which keeps
  the state's norm and so carries every rounding on instead of erasing it) was a third: T
  diag(beta)'s rows then alternate in sign across the chunk (row sums of |T diag(beta)| ~38 at beta
  1.9, ~190 at 1.99 where the true rows sum to ~2), and its fp16 rounding, the same in every chunk of
  repeated keys, grew into o and S (identical keys, K = V = 32 in the interpreter: o / S 7e-2 /
  1.7e-1 at beta 1.9, 1.2e-1 / 2.4e-1 at 1.99; on an H100 at K = V = 128, FLA and FlashQLA 0.4 /
  0.65 at 1.9 and past 1e19 at 1.99). Rounding Z and the state cost far less (an emulation in
  float64: 8e-4 and 2e-4 of it). Since v67 the WY pass stores, for every chunk with some |A_ij| > 1
  (where it formed T at tf32x3), T diag(beta)'s low parts in the tile's free strictly upper triangle
  and flags the chunk (chunk_io.store_t_f16, its t_low), and the walk adds their product
  (low_part_fix; the Gluon walks' walk_gluon.low_parts), the diagonal's from beta itself (without it
  2.5e-2 was left): o / S 3.1e-3 / 3.5e-3 at beta 1.9 and 5.0e-3 / 4.8e-3 at 1.99 on the GPU
  (benchmarks/hard_inputs.py; interpreter 4e-3 / 3e-3), the bf16 output's rounding and the fp16
  writes U. Chunks with |A_ij| <= 1 (beta <= 1 with l2norm) store and add nothing.
  And T diag(beta), P: beta |k|^2 <= 2 bounds T diag(beta) by ~beta, not by 2, where keys are far
  from unit norm (no l2norm): |k| = 1e-3 with beta = 1e6 overflows (NaN), |k| = 300 with beta =
  1e-5 falls to fp16's subnormals (o 1.2e-2, 1.1e-1 at |k| = 1000); P = scale q k^T D the same
  way, for which plan_forward keeps this walk to 2^-10 <= |scale| <= 256.
  operands="bf16_parts" (16 bits, bf16's range) has no such limits.
The knobs of the split walk (fused, walk_loads) do not apply here; q_late is refused (plan_forward).
"""
from __future__ import annotations

import triton
import triton.language as tl

from .addressing import load_rows, row_vec, store_rows
from .decay import _LOG2E, exp_ftz
from .split_dot import tile_max, to_f16
from .chunk_io import load_chunk, load_chunk_decays


@triton.jit
def pow2_below_inverse(m):
    """A power of two p with m p in [1/2, 1) for normal m > 0 (from m's exponent bits, exact),
    within fp32's normal range (2^-126 .. 2^125); 1 for m = 0 (nothing to scale). The walk's ratios of
    two such scales stay near 1: each follows the magnitudes it scales."""
    e = ((m.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    e = tl.minimum(tl.maximum(e, -126), 125)
    return tl.where(m == 0.0, 1.0, ((126 - e) << 23).to(tl.float32, bitcast=True))


@triton.jit
def log2_pow2(p):
    """log2 of a normal power of two p (its exponent bits, exact, as fp32)."""
    return (((p.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127).to(tl.float32)


@triton.jit
def pow2_of(d):
    """2^d for integer-valued d, clamped to fp32's normal range (2^-126 .. 2^127)."""
    e = tl.minimum(tl.maximum(d, -126.0), 127.0).to(tl.int32)
    return ((e + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def tau_of(m_v, b_mS, b_eG0):
    """tau, the power of two that scales Z = v - e^G k S and U (module docstring), from max |v| (m_v)
    and the state's largest entry b_mS (or a bound on it) times e^{G_0} (b_eG0; e^G <= e^{G_0} with
    g <= 0). Elementwise: one tau a tile, or one a column (walk_gluon_t's)."""
    return pow2_below_inverse(tl.maximum(m_v, b_mS * b_eG0))


@triton.jit
def bound_of(b_gamma, b_mS, m_Uc, b_tau):
    """The next state's size from its two parts, the decayed state e^{G_C} max |S| (b_gamma b_mS) and
    4 max |U| (each entry of k_n^T U is at most BT |U|, so the next sigma S stays below 1 + BT / 4);
    m_Uc is max |e^{G_C - G} U| at scale tau. pow2_below_inverse of it is the next sigma.
    Elementwise, as tau_of."""
    return tl.maximum(b_gamma * b_mS, 4.0 * m_Uc * (1.0 / b_tau))


@triton.jit
def z_scale(b_v, b_mS, b_G0):
    """tau_of for a whole tile of values b_v and the chunk's first cumulative log-decay b_G0."""
    return tau_of(tile_max(b_v), b_mS, exp_ftz(b_G0))


@triton.jit
def state_bound(b_G_last, b_mS, b_Uc, b_tau):
    """bound_of for a whole tile b_Uc and the chunk's last cumulative log-decay b_G_last."""
    return bound_of(exp_ftz(b_G_last), b_mS, tile_max(b_Uc), b_tau)


@triton.jit
def low_part_fix(b_X, b_beta, BT: tl.constexpr):
    """C [BT, BT] such that X Z + C Z = (T diag(beta)) Z to ~fp16 x 2 precision, for a chunk the WY pass
    flagged: it stored in the tile X T diag(beta)'s fp16 rounding in its lower triangle and the low
    parts L of its strictly lower entries (L[i, j] = X[j, i]) transposed in its strictly upper
    triangle (chunk_io.store_t_f16). X Z took those as entries (i, j > i) of T, so C = L - L^T +
    diag(beta - X_ii): T's diagonal is 1, so X_ii is beta_i rounded to fp16 (b_beta [BT] fp32, zero on
    rows past the sequence, whose X rows are zero too) and its residual the diagonal's low part.
    Exact but for that residual's rounding to fp16. Where T diag(beta)'s rows alternate in sign (beta
    near 2, near-parallel keys), its fp16 rounding, the same in every chunk of repeated keys, grew into
    o and S (1.5e-1 off at beta 1.9 without the low parts, 2.5e-2 without the diagonal's: NOTES.md v67)."""
    o_i = tl.arange(0, BT)
    diag = o_i[:, None] == o_i[None, :]
    b_d = b_beta - tl.sum(tl.where(diag, b_X.to(tl.float32), 0.0), axis=1)
    b_c = tl.where(o_i[:, None] > o_i[None, :], tl.trans(b_X), -b_X)
    return tl.where(diag, b_d[:, None].to(tl.float16).to(b_X.dtype), b_c)


@triton.jit
def walk_chunk_f16(c, b_S, b_sig, tensors, where, scale,
                   H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                   BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, DOT_DTYPE: tl.constexpr,
                   F16_DOT: tl.constexpr, TMA: tl.constexpr = False, MAP: tl.constexpr = False, with_v=True):
    """Chunk c of the walk from S^ = sigma S (b_S [BK, BV] fp32, |entries| near 1; b_sig = sigma):
    writes the chunk's outputs, returns (S^, sigma) after it (module docstring). tensors and where as
    chunk_fwd._walk_chunk's (the WY pass stored T diag(beta) at tb, P at attn and q and k at q, k in
    fp16, l2-normalised with use_qk_l2norm, G at Gc, and at t_low [tokens, HV] int32 the flags of the
    chunks whose tile carries T's low parts: low_part_fix).
    MAP (chunk_fwd._segment_maps_f16_kernel): the same step on columns of a segment's map [A | B]
    instead of the state: no outputs (q and P not read), and the values read only where with_v (B's
    columns; A's see zeros)."""
    q, k, g, beta, w, w2, w3, u, rq, rk, Gc, attn, attn2, v, tb, tb2, o, t_low = tensors
    tok0, T_seq, i_h, i_hv, i_nh, i_v, o_k, o_v, m_v, m_kv = where
    # q and k: the WY pass's fp16 copies (with l2norm normalised, |entries| <= 1; else as given).
    b_qn, b_kn, b_rq, b_rk, b_g, b_beta, row0, o_t, m_t = load_chunk(
        q, k, g, beta, tok0, c * BT, T_seq, i_h, i_hv, H, HV, K, BT, BK, False, F16_DOT, not MAP, rq, rk, True, TMA)
    b_v = load_rows(v, tok0, i_hv, T_seq, c * BT, HV, V, BT, BV, i_v * BV, TMA).to(tl.float32)
    if MAP:
        b_v = tl.where(with_v, b_v, 0.0)
    b_G, b_G_last = load_chunk_decays(Gc, row0, c * BT, T_seq, i_hv, HV, BT, o_t, m_t)
    b_s = to_f16(b_S, F16_DOT)
    b_kS = tl.dot(b_kn, b_s)                                          # k_n S^: scale sigma
    # The state's largest entry in true units (beside the product above), then tau (Z's scale).
    b_mS = tile_max(b_S) * (1.0 / b_sig)
    # e^G <= e^{G_0} (g <= 0): the chunk's first row, a scalar load, not a reduction.
    b_G0 = tl.load(Gc + row0 * HV + i_hv, mask=T_seq > c * BT, other=0.0)
    b_tau = z_scale(b_v, b_mS, b_G0)
    # e^G tau / sigma as one exponent: the ratio alone overflows fp32 where a gate forgets (G < -88)
    # a state far larger than the values.
    b_ld = log2_pow2(b_tau) - log2_pow2(b_sig)
    b_eG = tl.exp2(b_G * _LOG2E + b_ld)
    # Z tau = v tau - e^G (k_n S^) tau / sigma;  U tau = T diag(beta) (Z tau)
    b_Z = b_v * b_tau - b_kS * b_eG[:, None]
    b_T = load_rows(tb, tok0, i_hv, T_seq, c * BT, HV, BT, BT, BT, 0, TMA).to(F16_DOT)
    b_z16 = to_f16(b_Z, F16_DOT)
    b_U = tl.dot(b_T, b_z16)
    if tl.load(t_low + row0 * HV + i_hv, mask=T_seq > c * BT, other=0) != 0:
        # (Rare: beta past 1, parallel keys.) The tile and beta loaded again here: kept from above, they
        # held registers across every chunk (the walk 147 -> 204 registers, +12% instructions a chunk:
        # NOTES.md v68) for a branch that almost never runs.
        b_X = load_rows(tb, tok0, i_hv, T_seq, c * BT, HV, BT, BT, BT, 0, TMA).to(F16_DOT)
        b_bt = tl.load(row_vec(beta, row0, i_hv, HV, o_t), mask=m_t, other=0.0)
        b_U = tl.dot(low_part_fix(b_X, b_bt, BT), b_z16, b_U)
    if not MAP:
        # o = (scale e^G . (q_n S^) tau / sigma + P (U tau)) / tau
        b_P = load_rows(attn, tok0, i_hv, T_seq, c * BT, HV, BT, BT, BT, 0, TMA).to(F16_DOT)
        b_o = tl.dot(b_qn, b_s) * (scale * b_eG)[:, None]
        b_o = tl.dot(b_P, to_f16(b_U, F16_DOT), b_o) * (1.0 / b_tau)         # powers of two: exact
        store_rows(o, b_o, tok0, i_hv, T_seq, c * BT, HV, V, BT, BV, i_v * BV, TMA)
    # S <- e^{G_C} S + k_n^T (e^{G_C - G} . U), formed at scale tau, stored at the next sigma, so that
    # the larger of the new state's two parts lands in [1/2, 1) (state_bound). The writes' maximum is
    # a reduction beside the product.
    b_Uc = b_U * exp_ftz(b_G_last - b_G)[:, None]
    b_sig_next = pow2_below_inverse(state_bound(b_G_last, b_mS, b_Uc, b_tau))
    b_S = tl.dot(tl.trans(b_kn), to_f16(b_Uc, F16_DOT), b_S * tl.exp2(b_G_last * _LOG2E + b_ld))
    return b_S * pow2_of(log2_pow2(b_sig_next) - log2_pow2(b_tau)), b_sig_next

"""The Gluon walk with each chunk's k S formed a chunk ahead (``walk="gluon_ahead"``; a candidate,
compiled for sm_90a and not yet run on a GPU: benchmarks/NOTES.md v19).

walk_gluon's chain carries the state through three products a chunk (k S, U = T Z, S's update).
Here the next chunk's k S comes from this chunk's writes instead of the new state:

    k' S' = e^{G_C} k' S + (k' k^T) (e^{G_C - G} U)           (k' the next chunk's keys)

The first term needs only the state at this chunk's start, the second only this chunk's U, so the
state's update is off the chain: each iteration issues the chunk before's update and output first,
then Z -> U = T Z; the update's result (in hand by the time U is) feeds k' S and q S; then the next
k S = e^{G_C} k' S + M Uc. The products of one warpgroup run in issue order, so the next k S still
queues behind k' S, M = k' k^T and q S: the chain loses the old k S and the state's update as
waits, not the matrix units' time for them (NOTES.md v19 expects -10-15% at B = 1; at 64 columns
this kernel spills, so it is meant for 32). M comes from the two k tiles the ring holds anyway and
feeds the product from registers (wgmma's A operand). Replayed in float64 with fp16 operands
(precision_study.py) this gives the same o and S errors as walk_gluon's order, within 1%.

The scales are walk_f16's, with one change: tau (Z's scale) needs max |S| of the chunk's start state
before that state is formed, so it takes the bound the state's scale sigma is made from, max(e^{G_C}
max |S_prev|, 4 max |Uc_prev| / tau_prev), instead of the state's true max (exact at the first
chunk). That bound can be up to 1 + BT / 4 below the true max (|Z tau| then up to ~190 at K = 128,
inside fp16's range) or above it (a state erased within a chunk: Z's small rows keep fewer bits for
a chunk). Units: the walk holds kS in kappa units (tau of the chunk before; sigma_0 at the first),
the state in mu units until it is waited for and rescaled to sigma.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

from .chunk_fwd import wait_group
from .split_dot import tile_max
from .walk_f16 import log2_pow2, pow2_below_inverse, pow2_of, state_bound, z_scale
from .walk_gluon import _LOG2E, _chunk_decays, _invalidate, _issue, _rings, _wait, initial_state, program_rows
from .wy import counting_head


@gluon.jit
def walk_ahead_kernel(d_q, d_k, d_v, d_t, d_p, Gc, o, h0, ht, cu_seqlens, seq_order, done, scale, T,
                      H: gl.constexpr, HV: gl.constexpr, K: gl.constexpr, V: gl.constexpr,
                      BT: gl.constexpr, BV: gl.constexpr, STAGES: gl.constexpr,
                      HAS_H0: gl.constexpr, STORE_FINAL: gl.constexpr, IS_VARLEN: gl.constexpr,
                      LONGEST_FIRST: gl.constexpr, MASK_ROWS: gl.constexpr, WAIT: gl.constexpr,
                      GROUP: gl.constexpr, num_warps: gl.constexpr):
    """walk_gluon_kernel's arguments, grid and results (its docstring), the chain as in the module
    docstring. The rings: k holds STAGES + 2 slots (chunk c - 1's until S_c's product is waited for,
    c's and c + 1's in use, STAGES ahead); q with T, v: STAGES slots, refilled as in walk_gluon; P:
    STAGES slots, refilled once P U of the chunk before is waited for (a chunk later than there).
    Iteration c starts with k_c S_c in hand and nothing in flight; it issues the chunk before's state
    update and output first (their inputs are all there), and waits for all it issued."""
    gl.static_assert(STAGES >= 2, "P's ring runs a chunk behind: two stages or more")
    KS: gl.constexpr = STAGES + 2
    i_v, i_n, i_nh, i_hv, row_base, T, NT, col_qk, col_v, col_tp = program_rows(
        cu_seqlens, seq_order, T, HV, H, K, V, BT, BV, IS_VARLEN, LONGEST_FIRST)

    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                     instr_shape=[16, BV, 16])
    accm_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                      instr_shape=[16, BT, 16])
    am_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_l, k_width=2)   # M as an A operand
    rows_l: gl.constexpr = gl.SliceLayout(1, acc_l)
    cols_l: gl.constexpr = gl.SliceLayout(0, acc_l)
    k_s, q_s, t_s, v_s, p_s, k_bars, qt_bars, v_bars, p_bars = _rings(d_q, d_k, d_v, d_t, d_p, STAGES, KS, BT, K, BV)
    # The B operands formed here: the state's fp16 copy, Z, U (P U of the chunk before still reads
    # it while Z is stored: no sharing here) and e^{G_C - G} U.
    s_s = gl.allocate_shared_memory(gl.float16, [K, BV], gl.NVMMASharedLayout.get_default_for([K, BV], gl.float16))
    b_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BT, BV], gl.float16)
    z_s = gl.allocate_shared_memory(gl.float16, [BT, BV], b_l)
    u_s = gl.allocate_shared_memory(gl.float16, [BT, BV], b_l)
    uc_s = gl.allocate_shared_memory(gl.float16, [BT, BV], b_l)

    o_k, o_v, o_t, i_state, b_S, b_sig = initial_state(h0, i_v, i_nh, K, V, BT, BV, HAS_H0, rows_l, cols_l)
    b_mu = b_sig                                    # S's units until it is rescaled to sigma
    b_bound = tile_max(b_S) * (1.0 / b_sig)         # max |S| (a bound after the first chunk)
    b_zero = gl.zeros([BT, BV], gl.float32, acc_l)
    b_zero_m = gl.zeros([BT, BT], gl.float32, accm_l)

    if WAIT:
        i_count = counting_head(i_hv, H, HV, True)
        for j in gl.static_range(0, STAGES + 1, GROUP):     # the groups of the rings' first fills
            if j < NT:
                wait_group(done, i_n, i_count, j, NT, HV, GROUP, HV // H)
    for c in gl.static_range(STAGES + 1):
        _issue(c, NT, k_bars, KS, row_base, BT, d_k, col_qk, k_s)
    for c in gl.static_range(STAGES):
        _issue(c, NT, qt_bars, STAGES, row_base, BT, d_q, col_qk, q_s, d_t, col_tp, t_s)
        _issue(c, NT, v_bars, STAGES, row_base, BT, d_v, col_v, v_s)
    for c in gl.static_range(STAGES - 1):          # P's ring runs a chunk behind (see the docstring)
        _issue(c, NT, p_bars, STAGES, row_base, BT, d_p, col_tp, p_s)
    b_G_next, b_G_last_next, b_G0_next = _chunk_decays(Gc, row_base, 0, T, i_hv, HV, BT, o_t)

    # k_0 S_0, in sigma_0 units (kappa_0); u_s and uc_s zeroed, so that chunk 0's update of the state
    # "from the chunk before" and its output "of the chunk before" are exact no-ops (S_0 + k_0^T 0, P_0 0).
    b_kS = b_zero
    s_s.store(b_S.to(gl.float16))
    u_s.store(b_zero.to(gl.float16))
    uc_s.store(b_zero.to(gl.float16))
    fence_async_shared()
    if NT > 0:
        _wait(k_bars, 0, KS)
        b_kS = warpgroup_mma(k_s.index(0), s_s, b_zero, use_acc=False)
    b_kap = b_sig
    b_acc_S = b_S                                   # S_c's product accumulates onto e^{G_C} S_{c-1}
    b_acc_o = b_zero                                # o_{c-1}'s onto its q S term
    b_tau_prev = b_sig

    for c in range(0, NT):
        if WAIT:
            if ((c + STAGES + 1) % GROUP == 0) & (c + STAGES + 1 < NT):
                wait_group(done, i_n, i_count, c + STAGES + 1, NT, HV, GROUP, HV // H)
        st = c % STAGES
        sk = c % KS
        sk_prev = gl.where(c > 0, (c + KS - 1) % KS, 0)     # chunk 0: k_0's slot (times zeros)
        sk_next = gl.where(c + 1 < NT, (c + 1) % KS, sk)     # the last chunk's k' S and M: unused
        sp_prev = gl.where(c > 0, (c + STAGES - 1) % STAGES, 0)
        row0 = (row_base + c * BT).to(gl.int64)
        m_t = (c * BT + o_t) < T
        b_G, b_G_last, b_G0 = b_G_next, b_G_last_next, b_G0_next
        b_G_next, b_G_last_next, b_G0_next = _chunk_decays(Gc, row_base, (c + 1) * BT, T, i_hv, HV, BT, o_t)

        # The chunk before's state update first in the matrix units' queue (its inputs are all here),
        # then this chunk's chain: Z from k S (in hand), U = T Z; then the chunk before's output.
        # Every product is issued and waited for within one iteration: an accumulator in flight across
        # the loop's back edge makes ptxas serialise every wgmma (C7514).
        b_S = warpgroup_mma(k_s.index(sk_prev).permute((1, 0)), uc_s, b_acc_S, is_async=True)     # [S]
        _wait(v_bars, c, STAGES)
        b_v = v_s.index(st).load(acc_l).to(gl.float32)
        if MASK_ROWS:
            b_v = gl.where(m_t[:, None], b_v, 0.0)
        b_tau = z_scale(b_v, b_bound, b_G0)
        b_Z = b_v * b_tau - b_kS * gl.exp2(b_G * _LOG2E + (log2_pow2(b_tau) - log2_pow2(b_kap)))[:, None]
        z_s.store(b_Z.to(gl.float16))
        fence_async_shared()
        _issue(c + STAGES, NT, v_bars, STAGES, row_base, BT, d_v, col_v, v_s)      # v is in registers
        _wait(qt_bars, c, STAGES)
        b_U = warpgroup_mma(t_s.index(st), z_s, b_zero, use_acc=False, is_async=True)         # [S, U]
        _wait(p_bars, gl.maximum(c - 1, 0), STAGES)
        b_o = warpgroup_mma(p_s.index(sp_prev), u_s, b_acc_o, is_async=True)               # [S, U, o_prev]

        # Beside U: S_c rescaled to sigma_c, to fp16; then k' S, M = k' k^T and q S from it.
        b_S = warpgroup_mma_wait(num_outstanding=2, deps=(b_S,))
        _issue(c + STAGES + 1, NT, k_bars, KS, row_base, BT, d_k, col_qk, k_s)    # chunk c - 1's slot
        b_S = b_S * pow2_of(log2_pow2(b_sig) - log2_pow2(b_mu))
        s_s.store(b_S.to(gl.float16))
        fence_async_shared()
        if c + 1 < NT:
            _wait(k_bars, c + 1, KS)
        b_A = warpgroup_mma(k_s.index(sk_next), s_s, b_zero, use_acc=False, is_async=True)
        b_M = warpgroup_mma(k_s.index(sk_next), k_s.index(sk).permute((1, 0)), b_zero_m, use_acc=False,
                            is_async=True)
        b_qS = warpgroup_mma(q_s.index(st), s_s, b_zero, use_acc=False, is_async=True)  # [U, o_prev, A, M, qS]
        b_mS = tile_max(b_S) * (1.0 / b_sig)        # for the next bound: its reduction beside the products

        # U, and the chunk before's output stored; U and Uc to shared memory once P U is done with it.
        b_U, b_o = warpgroup_mma_wait(num_outstanding=3, deps=(b_U, b_o))      # [A, M, qS]
        _issue(c + STAGES - 1, NT, p_bars, STAGES, row_base, BT, d_p, col_tp, p_s)     # o_prev's P slot
        if c > 0:
            p_o = o + ((row0 - BT) * HV + i_hv) * V + (o_t[:, None] * (HV * V) + o_v[None, :])
            gl.store(p_o, (b_o * (1.0 / b_tau_prev)).to(o.dtype.element_ty))     # a whole chunk: not the last
        if MASK_ROWS:
            b_U = gl.where(m_t[:, None], b_U, 0.0)
        b_Uc = b_U * gl.exp(b_G_last - b_G)[:, None]
        u_s.store(b_U.to(gl.float16))
        uc_s.store(b_Uc.to(gl.float16))
        fence_async_shared()

        # The next k S = e^{G_C} k' S + M Uc: the chain's second product.
        b_A, b_M = warpgroup_mma_wait(num_outstanding=1, deps=(b_A, b_M))      # [qS]
        b_step = gl.exp2(b_G_last * _LOG2E + (log2_pow2(b_tau) - log2_pow2(b_sig)))    # sigma_c -> e^{G_C} tau_c
        b_Ma = gl.convert_layout(b_M.to(gl.float16), am_l)
        b_kS = warpgroup_mma(b_Ma, uc_s, b_A * b_step, is_async=True)             # [qS, kS']
        b_qS = warpgroup_mma_wait(num_outstanding=1, deps=(b_qS,))
        _issue(c + STAGES, NT, qt_bars, STAGES, row_base, BT, d_q, col_qk, q_s, d_t, col_tp, t_s)
        # Beside it: the next iteration's accumulators and scales.
        b_acc_o = b_qS * (scale * gl.exp2(b_G * _LOG2E + (log2_pow2(b_tau) - log2_pow2(b_sig))))[:, None]
        b_acc_S = b_S * b_step
        b_bound = state_bound(b_G_last, b_mS, b_Uc, b_tau)
        b_kS = warpgroup_mma_wait(num_outstanding=0, deps=(b_kS,))
        b_sig = pow2_below_inverse(b_bound)
        b_kap = b_tau
        b_mu = b_tau
        b_tau_prev = b_tau

    # The last chunk's state update and output.
    if NT > 0:
        c_last = NT - 1
        b_S = warpgroup_mma(k_s.index(c_last % KS).permute((1, 0)), uc_s, b_acc_S)
        _wait(p_bars, c_last, STAGES)
        b_o = warpgroup_mma(p_s.index(c_last % STAGES), u_s, b_acc_o)
        row_last = (row_base + c_last * BT).to(gl.int64)
        p_o = o + (row_last * HV + i_hv) * V + (o_t[:, None] * (HV * V) + o_v[None, :])
        gl.store(p_o, (b_o * (1.0 / b_tau_prev)).to(o.dtype.element_ty), mask=((c_last * BT + o_t) < T)[:, None])
    _invalidate(k_bars, qt_bars, v_bars, p_bars, STAGES, KS)
    if STORE_FINAL:
        gl.store(ht + i_state + o_k[:, None] * V + o_v[None, :], b_S * (1.0 / b_mu))

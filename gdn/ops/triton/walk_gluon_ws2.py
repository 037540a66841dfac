"""walk_gluon_ws with two chains a program: the state's columns in two halves, each with its own scales,
their chunks interleaved across the three warpgroups (a v21 candidate, compiled for sm_90a only).

walk_gluon_ws runs one chain a program (NOTES.md v21: ~4.1 us a chunk, the chain in series across
warpgroups, one program an SM). Two walk_gluon programs an SM overlap two chains; here one program
does so itself. The state's K x V columns are two independent K x V/2 walks (the delta rule acts on
each column alone; walk_gluon's programs over 64 columns have their own tau and sigma, and so does
each half here). Each warpgroup alternates between the halves, so that one half's products run while
the other's element-wise work and hand-offs do:

    chain   k S_A | Z_A, T Z_A | k S_B | Uc_A -> A | Z_B, T Z_B | Uc_B -> B
    state   update A, publish A's next copy | update B, publish B's next copy
    output  q S_A, q S_B | o_A, o_B

Each half has walk_gluon_ws's four hand-offs (s_ready, s_free x2, u_ready, u_free x2: the same
protocol, one set of barriers a half). k, q, T and P serve both halves; v comes as two [BT, V/2]
tiles on one barrier. The chain refills a k slot once it has seen both halves' next s_ready (the
state's updates of that chunk are then done). Tau comes from the chain's bound after the first chunk
(walk_gluon_ws's BOUND_TAU, 4% there).
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

from .walk_gluon import _barriers, _chunk_decays, _issue, _wait, program_rows, values_and_scales
from .walk_gluon_ws import _arrive, _first_kS, _hand_over, _output_part, _state_part, hand_off_buffers

# The chain's and the output's registers a thread (the state's get the rest of 168 x 3: 216). The
# least spills in compile_report's sweep (64 B at B8 x T4k): the three warpgroups want ~520 together.
CHAIN_REGS = 176
OUTPUT_REGS = 112


@gluon.jit
def _chain_part2(d_k, d_v, d_t, Gc, k_s, vA_s, vB_s, t_s, k_bars, v_bars, t_bars, s_s, z_s, u_s, uc_s, sv_s, cv_s,
                 ov_s, s_ready, s_free, u_ready, u_free, cu_seqlens, seq_order, T, scale,
                 H: gl.constexpr, HV: gl.constexpr, K: gl.constexpr, V: gl.constexpr, BT: gl.constexpr,
                 BV: gl.constexpr, STAGES: gl.constexpr, IS_VARLEN: gl.constexpr,
                 LONGEST_FIRST: gl.constexpr, MASK_ROWS: gl.constexpr):
    """Both halves' chains, interleaved (the module docstring); loads k, v (two tiles) and T."""
    i_v, i_n, i_nh, i_hv, row_base, T, NT, col_qk, col_v, col_tp = program_rows(
        cu_seqlens, seq_order, T, HV, H, K, V, BT, V, IS_VARLEN, LONGEST_FIRST)
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BV, 16])
    rows_l: gl.constexpr = gl.SliceLayout(1, acc_l)
    vec_l: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    o_t = gl.arange(0, BT, layout=rows_l)
    b_zero = gl.zeros([BT, BV], gl.float32, acc_l)
    for c in gl.static_range(STAGES):
        _issue(c, NT, k_bars, STAGES, row_base, BT, d_k, col_qk, k_s)
        _issue(c, NT, v_bars, STAGES, row_base, BT, d_v, col_v, vA_s, d_v, col_v + BV, vB_s)
        _issue(c, NT, t_bars, STAGES, row_base, BT, d_t, col_tp, t_s)
    b_G_next, b_G_last_next, b_G0_next = _chunk_decays(Gc, row_base, 0, T, i_hv, HV, BT, o_t)
    b_sigA = gl.full([], 1.0, gl.float32)
    b_sigB = gl.full([], 1.0, gl.float32)
    b_boundA = gl.full([], 0.0, gl.float32)
    b_boundB = gl.full([], 0.0, gl.float32)
    for c in range(0, NT):
        st = c % STAGES
        m_t = (c * BT + o_t) < T
        b_G, b_G_last, b_G0 = b_G_next, b_G_last_next, b_G0_next
        b_G_next, b_G_last_next, b_G0_next = _chunk_decays(Gc, row_base, (c + 1) * BT, T, i_hv, HV, BT, o_t)
        _wait(k_bars, c, STAGES)
        k_tile = k_s.index(st)
        # Half A up to T Z_A.
        b_kS, b_sigA, b_mSA = _first_kS(0, c, k_tile, s_s, sv_s, s_ready, b_zero, b_sigA, b_boundA, vec_l, True)
        b_v, b_tauA, b_ldA, b_eGA = values_and_scales(vA_s, v_bars, c, STAGES, acc_l, MASK_ROWS, m_t, b_mSA, b_G,
                                                      b_G0, b_sigA)
        b_kS = warpgroup_mma_wait(num_outstanding=0, deps=(b_kS,))
        _arrive(s_free.index(0))
        z_s.index(0).store((b_v * b_tauA - b_kS * b_eGA[:, None]).to(gl.float16))
        fence_async_shared()
        _wait(t_bars, c, STAGES)
        b_UA = warpgroup_mma(t_s.index(st), z_s.index(0), b_zero, use_acc=False, is_async=True)
        # Half B's k S beside T Z_A; then k's slot of chunk c - 1 is free (both halves' updates of it
        # came before their s_ready of chunk c).
        b_kS, b_sigB, b_mSB = _first_kS(1, c, k_tile, s_s, sv_s, s_ready, b_zero, b_sigB, b_boundB, vec_l, True)
        if c > 0:
            _issue(c - 1 + STAGES, NT, k_bars, STAGES, row_base, BT, d_k, col_qk, k_s)
        b_UA = warpgroup_mma_wait(num_outstanding=1, deps=(b_UA,))          # k S_B may still run
        b_sigA, b_boundA = _hand_over(0, c, b_UA, b_G, b_G_last, b_mSA, b_tauA, b_ldA, b_eGA, m_t, u_s, uc_s, cv_s,
                                      ov_s, u_ready, u_free, scale, K, BT, MASK_ROWS, rows_l, vec_l)
        # Half B.
        b_v, b_tauB, b_ldB, b_eGB = values_and_scales(vB_s, v_bars, c, STAGES, acc_l, MASK_ROWS, m_t, b_mSB, b_G,
                                                      b_G0, b_sigB)
        _issue(c + STAGES, NT, v_bars, STAGES, row_base, BT, d_v, col_v, vA_s, d_v, col_v + BV, vB_s)
        b_kS = warpgroup_mma_wait(num_outstanding=0, deps=(b_kS,))
        _arrive(s_free.index(1))
        z_s.index(1).store((b_v * b_tauB - b_kS * b_eGB[:, None]).to(gl.float16))
        fence_async_shared()
        b_UB = warpgroup_mma(t_s.index(st), z_s.index(1), b_zero, use_acc=False, is_async=True)
        b_UB = warpgroup_mma_wait(num_outstanding=0, deps=(b_UB,))
        _issue(c + STAGES, NT, t_bars, STAGES, row_base, BT, d_t, col_tp, t_s)
        b_sigB, b_boundB = _hand_over(1, c, b_UB, b_G, b_G_last, b_mSB, b_tauB, b_ldB, b_eGB, m_t, u_s, uc_s, cv_s,
                                      ov_s, u_ready, u_free, scale, K, BT, MASK_ROWS, rows_l, vec_l)


@gluon.jit
def walk_ws2_kernel(d_q, d_k, d_v, d_t, d_p, Gc, o, h0, ht, cu_seqlens, seq_order, scale, T,
                    H: gl.constexpr, HV: gl.constexpr, K: gl.constexpr, V: gl.constexpr,
                    BT: gl.constexpr, STAGES: gl.constexpr,
                    HAS_H0: gl.constexpr, STORE_FINAL: gl.constexpr, IS_VARLEN: gl.constexpr,
                    LONGEST_FIRST: gl.constexpr, MASK_ROWS: gl.constexpr, CHAIN_NREG: gl.constexpr,
                    OUTPUT_NREG: gl.constexpr, num_warps: gl.constexpr):
    """One program walks all chunks of one (sequence, value head), its V columns as two halves of
    BV = V / 2 (the module docstring); tensors as walk_ws_kernel's (d_v's blocks [BT, V / 2])."""
    BV: gl.constexpr = V // 2
    # Only allocations and barrier inits here, on the default warpgroup alone (walk_ws_kernel).
    k_s = gl.allocate_shared_memory(d_k.dtype, [STAGES, BT, K], d_k.layout)
    q_s = gl.allocate_shared_memory(d_q.dtype, [STAGES, BT, K], d_q.layout)
    t_s = gl.allocate_shared_memory(d_t.dtype, [STAGES, BT, BT], d_t.layout)
    p_s = gl.allocate_shared_memory(d_p.dtype, [STAGES, BT, BT], d_p.layout)
    vA_s = gl.allocate_shared_memory(d_v.dtype, [STAGES, BT, BV], d_v.layout)
    vB_s = gl.allocate_shared_memory(d_v.dtype, [STAGES, BT, BV], d_v.layout)
    k_bars = _barriers(STAGES)
    q_bars = _barriers(STAGES)
    t_bars = _barriers(STAGES)
    p_bars = _barriers(STAGES)
    v_bars = _barriers(STAGES)
    s_s, z_s, u_s, uc_s, sv_s, cv_s, ov_s, s_ready, s_free, u_ready, u_free = hand_off_buffers(2, K, BT, BV)
    gl.warp_specialize([
        (_state_part, (h0, ht, k_s, k_bars, s_s, uc_s, sv_s, cv_s, s_ready, s_free, u_ready, u_free,
                       cu_seqlens, seq_order, T, H, HV, K, V, BT, BV, STAGES, HAS_H0, STORE_FINAL, IS_VARLEN,
                       LONGEST_FIRST, True, 2)),
        (_chain_part2, (d_k, d_v, d_t, Gc, k_s, vA_s, vB_s, t_s, k_bars, v_bars, t_bars, s_s, z_s, u_s, uc_s, sv_s,
                        cv_s, ov_s, s_ready, s_free, u_ready, u_free, cu_seqlens, seq_order, T, scale, H, HV, K, V,
                        BT, BV, STAGES, IS_VARLEN, LONGEST_FIRST, MASK_ROWS)),
        (_output_part, (d_q, d_p, o, q_s, p_s, q_bars, p_bars, s_s, u_s, ov_s, s_ready, s_free, u_ready, u_free,
                        cu_seqlens, seq_order, T, H, HV, K, V, BT, BV, STAGES, IS_VARLEN, LONGEST_FIRST, 2)),
    ], [4, 4], [CHAIN_NREG, OUTPUT_NREG])

"""The fp16 state walk in Gluon with warp specialisation: three warpgroups per program, each on its own
part of a chunk, so that the products off the state's chain run beside it (a v21 candidate).

walk_gluon's program is one warpgroup over 64 of the state's columns, and two such programs share an
SM: every product, scale and store of a chunk waits its turn in one instruction stream. Here one
program holds all V columns of one (sequence, value head) and splits the chunk's work three ways,
the warpgroups handing tiles to each other through shared memory and mbarriers:

    state   (S^ = sigma S, [K, V] fp32)   S^ -> fp16 copy s_s  .............  S <- e^{G_C} S + k^T Uc
    chain   k S^ (from s_s);  Z = v tau - e^G k S;  U = T diag(beta) Z;  Uc = e^{G_C - G} U;  scales
    output  q S^ (from s_s)  ....................................  o = e^G q S + P U  (from U)

The numbers are walk_f16's (and walk_gluon's): the same products on the same fp16 operands, scaled by
the same powers of two. The chain's scalars travel as broadcast vectors in shared memory: the state's
largest entry (state -> chain), and tau, sigma's next value and the output's row factors (chain ->
state, output).

Hand-offs, one mbarrier each, all counted once a chunk (so each wait's phase is c & 1):
  s_ready  state -> chain, output   s_s and the state's max are written
  s_free   chain, output -> state   both are done reading them (count 2)
  u_ready  chain -> state, output   U, Uc and the factors are written
  u_free   state, output -> chain   both are done reading them (count 2)
Each producer waits for its buffer's free barrier of the chunk before it writes again, so no
barrier can complete twice before a waiter has seen it. Tiles come by TMA into per-kind rings of
STAGES slots: the chain loads k (which the state reads too: the chain refills a k slot once it has
seen the state's next s_ready, i.e. after the state's update of that chunk), v and T; the output loads
q and P. Every arrive follows a warpgroup-local thread barrier (an mbarrier arrive is one thread's).

Dense or packed sequences, one segment, the WY pass first (no WAIT), chunk_size 64, BV = V (64 or
128), K 64 or 128. Registers: the state warpgroup holds [K, V] fp32 (128 a thread at 128 x 128).
On an H200 (benchmarks/NOTES.md v20-v21) it is correct, but no faster than walk_gluon's two 64-column
programs an SM (B8 x T4k 0.928 ms with BOUND_TAU, as the default): its chain still runs in series,
now across warpgroups, at ~4.1 us a chunk. A candidate to build on, not a default.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, warpgroup_mma, \
    warpgroup_mma_wait

from .split_dot import tile_max
from .walk_f16 import log2_pow2, pow2_below_inverse, pow2_of, state_bound
from .walk_gluon import (_LOG2E, _barriers, _chunk_decays, _issue, _rings, _wait, initial_state, program_rows,
                         values_and_scales, walk_launch)

# Registers a thread of the chain's and the output's warpgroups; the state's get the rest of 168 x 3
# (168 a thread at launch: 12 warps an SM). compile_report: no spills at 216 / 120 / 168; the state's
# spill at 152, the output's at 96 and below.
CHAIN_REGS = 216
OUTPUT_REGS = 120


@gluon.jit
def _arrive(bar):
    """This warpgroup is done (every thread: the barrier first), then one arrival on bar."""
    gl.thread_barrier()
    mbarrier.arrive(bar, count=1)


# One set of hand-offs for each of a program's column blocks h ("halves": walk_gluon_ws2 has two, this
# module's kernel one): s_s, z_s, u_s, uc_s [halves, ...]; the vectors' rows 2h, 2h + 1 of sv_s and
# ov_s, 3h .. 3h + 2 of cv_s; the barriers' entry h.

@gluon.jit
def _publish(b_S, h, s_s, sv_s, s_ready, BT: gl.constexpr, vec_l: gl.constexpr, WITH_MAX: gl.constexpr):
    """Block h's fp16 copy of S^ for the chain and the output (WITH_MAX: and the state's max), then its
    s_ready. The caller waited for its s_free."""
    s_s.index(h).store(b_S.to(gl.float16))
    if WITH_MAX:
        sv_s.index(2 * h).store(gl.zeros([BT], gl.float32, vec_l) + tile_max(b_S))
    fence_async_shared()
    _arrive(s_ready.index(h))


@gluon.jit
def _update(b_S, h, k_t, uc_s, cv_s, u_ready, u_free, c, rows_l: gl.constexpr):
    """Block h's S <- e^{G_C} S + k^T Uc at the chain's factors (its u_ready waited, its u_free arrived
    once the product is done). Returns S^ at the next sigma and 1 / sigma'."""
    mbarrier.wait(u_ready.index(h), c & 1)
    b_f1 = cv_s.index(3 * h).load(rows_l)           # e^{G_C} tau / sigma
    b_f2 = cv_s.index(3 * h + 1).load(rows_l)       # sigma' / tau
    b_inv = cv_s.index(3 * h + 2).load(rows_l)      # 1 / sigma'
    b_Sn = warpgroup_mma(k_t, uc_s.index(h), b_S * b_f1[:, None], is_async=True)
    b_Sn = warpgroup_mma_wait(num_outstanding=0, deps=(b_Sn,))
    _arrive(u_free.index(h))
    return b_Sn * b_f2[:, None], b_inv


@gluon.jit
def _first_kS(h, c, k_tile, s_s, sv_s, s_ready, b_zero, b_sig, b_bound, vec_l: gl.constexpr,
              BOUND_TAU: gl.constexpr):
    """Block h's k S^ issued once its copy is published (not waited); its sigma (at the first chunk from
    the state warpgroup, after it the chain's own) and the state's size for tau: the state's max, or
    with BOUND_TAU after the first chunk the bound the last sigma came from (up to ~17x above max |S|:
    |Z tau| stays within ~200). Returns the product, sigma and the size."""
    mbarrier.wait(s_ready.index(h), c & 1)
    if c == 0:
        b_sig = gl.max(sv_s.index(2 * h + 1).load(vec_l), 0)
    if BOUND_TAU:
        if c == 0:
            b_mS = gl.max(sv_s.index(2 * h).load(vec_l), 0) * (1.0 / b_sig)
        else:
            b_mS = b_bound
    else:
        b_mS = gl.max(sv_s.index(2 * h).load(vec_l), 0) * (1.0 / b_sig)
    b_kS = warpgroup_mma(k_tile, s_s.index(h), b_zero, use_acc=False, is_async=True)
    return b_kS, b_sig, b_mS


@gluon.jit
def _hand_over(h, c, b_U, b_G, b_G_last, b_mS, b_tau, b_ld, b_eG, m_t, u_s, uc_s, cv_s, ov_s, u_ready, u_free,
               scale, K: gl.constexpr, BT: gl.constexpr, MASK_ROWS: gl.constexpr, rows_l: gl.constexpr,
               vec_l: gl.constexpr):
    """Block h's U, Uc and factors for the state and the output (the chain's end of a chunk), after its
    u_free of the chunk before. Returns the next sigma and the bound it came from."""
    if MASK_ROWS:
        b_U = gl.where(m_t[:, None], b_U, 0.0)
    b_Uc = b_U * gl.exp(b_G_last - b_G)[:, None]
    b_bound = state_bound(b_G_last, b_mS, b_Uc, b_tau)
    b_sig_next = pow2_below_inverse(b_bound)
    if c > 0:
        mbarrier.wait(u_free.index(h), (c - 1) & 1)
    u_s.index(h).store(b_U.to(gl.float16))
    uc_s.index(h).store(b_Uc.to(gl.float16))
    k_vec = gl.zeros([K], gl.float32, vec_l)
    cv_s.index(3 * h).store(k_vec + gl.exp2(b_G_last * _LOG2E + b_ld))
    cv_s.index(3 * h + 1).store(k_vec + pow2_of(log2_pow2(b_sig_next) - log2_pow2(b_tau)))
    cv_s.index(3 * h + 2).store(k_vec + 1.0 / b_sig_next)
    ov_s.index(2 * h).store(scale * b_eG)
    ov_s.index(2 * h + 1).store(gl.zeros([BT], gl.float32, rows_l) + 1.0 / b_tau)
    fence_async_shared()
    _arrive(u_ready.index(h))
    return b_sig_next, b_bound


@gluon.jit
def _output_half(h, c, p_tile, u_s, ov_s, u_ready, u_free, b_qS, o, o_row, o_t, o_v, m_t, HV: gl.constexpr,
                 V: gl.constexpr, rows_l: gl.constexpr):
    """Block h's o = e^G q S + P U (at its tau), its u_free arrived, o / tau stored: rows o_t of the
    chunk from token row o_row, value columns o_v of head row o_row's (o_row = row0 HV + i_hv)."""
    mbarrier.wait(u_ready.index(h), c & 1)
    b_o = warpgroup_mma(p_tile, u_s.index(h), b_qS * ov_s.index(2 * h).load(rows_l)[:, None], is_async=True)
    b_o = warpgroup_mma_wait(num_outstanding=0, deps=(b_o,))
    b_it = ov_s.index(2 * h + 1).load(rows_l)
    _arrive(u_free.index(h))
    # The pointers after the product: [BT, BV] 64-bit offsets held across it would cost registers.
    p_o = o + o_row * V + (o_t[:, None] * (HV * V) + o_v[None, :])
    gl.store(p_o, (b_o * b_it[:, None]).to(o.dtype.element_ty), mask=m_t[:, None])


@gluon.jit
def _state_part(h0, ht, k_s, k_bars, s_s, uc_s, sv_s, cv_s, s_ready, s_free, u_ready, u_free,
                cu_seqlens, seq_order, T, H: gl.constexpr, HV: gl.constexpr, K: gl.constexpr,
                V: gl.constexpr, BT: gl.constexpr, BV: gl.constexpr, STAGES: gl.constexpr,
                HAS_H0: gl.constexpr, STORE_FINAL: gl.constexpr, IS_VARLEN: gl.constexpr,
                LONGEST_FIRST: gl.constexpr, BOUND_TAU: gl.constexpr, HALVES: gl.constexpr):
    """The default warpgroup: holds S^ = sigma S, [K, BV] fp32 for each of the program's HALVES column
    blocks (1 here, 2 in walk_gluon_ws2), hands each block's fp16 copy to the others and applies each
    chunk's update S <- e^{G_C} S + k^T Uc (scaled by the chain's factors), block by block."""
    i_v, i_n, i_nh, i_hv, row_base, T, NT, col_qk, col_v, col_tp = program_rows(
        cu_seqlens, seq_order, T, HV, H, K, V, BT, BV * HALVES, IS_VARLEN, LONGEST_FIRST)
    s_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BV, 16])
    rows_l: gl.constexpr = gl.SliceLayout(1, s_l)
    cols_l: gl.constexpr = gl.SliceLayout(0, s_l)
    vec_l: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    # The program's blocks are initial_state's column blocks HALVES i_v and HALVES i_v + 1 of BV.
    o_k, o_vA, o_t, i_state, b_SA, b_sigA = initial_state(h0, HALVES * i_v, i_nh, K, V, BT, BV, HAS_H0, rows_l,
                                                          cols_l)
    sv_s.index(1).store(gl.zeros([BT], gl.float32, vec_l) + b_sigA)     # the chain's first sigma
    b_invA = gl.zeros([K], gl.float32, rows_l) + 1.0 / b_sigA         # 1 / sigma, for the final store
    if HALVES == 2:
        o_k, o_vB, o_t, i_state, b_SB, b_sigB = initial_state(h0, 2 * i_v + 1, i_nh, K, V, BT, BV, HAS_H0, rows_l,
                                                              cols_l)
        sv_s.index(3).store(gl.zeros([BT], gl.float32, vec_l) + b_sigB)
        b_invB = gl.zeros([K], gl.float32, rows_l) + 1.0 / b_sigB
    if HALVES == 1:
        sv_s.index(0).store(gl.zeros([BT], gl.float32, vec_l) + tile_max(b_SA))
    elif NT > 0:
        _publish(b_SA, 0, s_s, sv_s, s_ready, BT, vec_l, True)
        _publish(b_SB, 1, s_s, sv_s, s_ready, BT, vec_l, True)
    for c in range(0, NT):
        if HALVES == 1:
            # One block: its copy at each chunk's start (the same time as right after the update
            # before it, and ptxas keeps fewer registers live across the loop with an initial state).
            if c > 0:
                mbarrier.wait(s_free.index(0), (c - 1) & 1)
            _publish(b_SA, 0, s_s, sv_s, s_ready, BT, vec_l, not BOUND_TAU)
        _wait(k_bars, c, STAGES)
        k_t = k_s.index(c % STAGES).permute((1, 0))
        b_SA, b_invA = _update(b_SA, 0, k_t, uc_s, cv_s, u_ready, u_free, c, rows_l)
        if HALVES == 2:
            # Two blocks: A's next copy before B's update, so that the chain starts A's next chunk
            # while this warpgroup works on B.
            if c + 1 < NT:
                mbarrier.wait(s_free.index(0), c & 1)
                _publish(b_SA, 0, s_s, sv_s, s_ready, BT, vec_l, not BOUND_TAU)
            b_SB, b_invB = _update(b_SB, 1, k_t, uc_s, cv_s, u_ready, u_free, c, rows_l)
            if c + 1 < NT:
                mbarrier.wait(s_free.index(1), c & 1)
                _publish(b_SB, 1, s_s, sv_s, s_ready, BT, vec_l, not BOUND_TAU)
    if STORE_FINAL:
        gl.store(ht + i_state + o_k[:, None] * V + o_vA[None, :], b_SA * b_invA[:, None])
        if HALVES == 2:
            gl.store(ht + i_state + o_k[:, None] * V + o_vB[None, :], b_SB * b_invB[:, None])


@gluon.jit
def _chain_part(d_k, d_v, d_t, Gc, k_s, v_s, t_s, k_bars, v_bars, t_bars, s_s, z_s, u_s, uc_s, sv_s, cv_s, ov_s,
                s_ready, s_free, u_ready, u_free, cu_seqlens, seq_order, T, scale,
                H: gl.constexpr, HV: gl.constexpr, K: gl.constexpr, V: gl.constexpr, BT: gl.constexpr,
                BV: gl.constexpr, STAGES: gl.constexpr, IS_VARLEN: gl.constexpr,
                LONGEST_FIRST: gl.constexpr, MASK_ROWS: gl.constexpr, BOUND_TAU: gl.constexpr):
    """The chain: k S^, Z, U = T diag(beta) Z, Uc and the scales (walk_f16's), handed to the state's and
    the output's warpgroups; loads k (for both), v and T."""
    i_v, i_n, i_nh, i_hv, row_base, T, NT, col_qk, col_v, col_tp = program_rows(
        cu_seqlens, seq_order, T, HV, H, K, V, BT, BV, IS_VARLEN, LONGEST_FIRST)
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BV, 16])
    rows_l: gl.constexpr = gl.SliceLayout(1, acc_l)
    vec_l: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    o_t = gl.arange(0, BT, layout=rows_l)
    b_zero = gl.zeros([BT, BV], gl.float32, acc_l)
    for c in gl.static_range(STAGES):
        _issue(c, NT, k_bars, STAGES, row_base, BT, d_k, col_qk, k_s)
        _issue(c, NT, v_bars, STAGES, row_base, BT, d_v, col_v, v_s)
        _issue(c, NT, t_bars, STAGES, row_base, BT, d_t, col_tp, t_s)
    b_G_next, b_G_last_next, b_G0_next = _chunk_decays(Gc, row_base, 0, T, i_hv, HV, BT, o_t)
    b_sig = gl.full([], 1.0, gl.float32)
    b_bound = gl.full([], 0.0, gl.float32)
    for c in range(0, NT):
        st = c % STAGES
        m_t = (c * BT + o_t) < T
        b_G, b_G_last, b_G0 = b_G_next, b_G_last_next, b_G0_next
        b_G_next, b_G_last_next, b_G0_next = _chunk_decays(Gc, row_base, (c + 1) * BT, T, i_hv, HV, BT, o_t)
        _wait(k_bars, c, STAGES)
        b_kS, b_sig, b_mS = _first_kS(0, c, k_s.index(st), s_s, sv_s, s_ready, b_zero, b_sig, b_bound, vec_l,
                                      BOUND_TAU)
        if c > 0:
            # The state's update of chunk c - 1 is done (it came before this s_ready): its k slot is free.
            _issue(c - 1 + STAGES, NT, k_bars, STAGES, row_base, BT, d_k, col_qk, k_s)
        b_v, b_tau, b_ld, b_eG = values_and_scales(v_s, v_bars, c, STAGES, acc_l, MASK_ROWS, m_t, b_mS, b_G, b_G0,
                                                   b_sig)
        b_kS = warpgroup_mma_wait(num_outstanding=0, deps=(b_kS,))
        _arrive(s_free.index(0))
        _issue(c + STAGES, NT, v_bars, STAGES, row_base, BT, d_v, col_v, v_s)     # v is in registers
        z_s.index(0).store((b_v * b_tau - b_kS * b_eG[:, None]).to(gl.float16))
        fence_async_shared()
        _wait(t_bars, c, STAGES)
        b_U = warpgroup_mma(t_s.index(st), z_s.index(0), b_zero, use_acc=False, is_async=True)
        b_U = warpgroup_mma_wait(num_outstanding=0, deps=(b_U,))
        _issue(c + STAGES, NT, t_bars, STAGES, row_base, BT, d_t, col_tp, t_s)
        b_sig, b_bound = _hand_over(0, c, b_U, b_G, b_G_last, b_mS, b_tau, b_ld, b_eG, m_t, u_s, uc_s, cv_s, ov_s,
                                    u_ready, u_free, scale, K, BT, MASK_ROWS, rows_l, vec_l)


@gluon.jit
def _output_part(d_q, d_p, o, q_s, p_s, q_bars, p_bars, s_s, u_s, ov_s, s_ready, s_free, u_ready, u_free,
                 cu_seqlens, seq_order, T, H: gl.constexpr, HV: gl.constexpr, K: gl.constexpr,
                 V: gl.constexpr, BT: gl.constexpr, BV: gl.constexpr, STAGES: gl.constexpr,
                 IS_VARLEN: gl.constexpr, LONGEST_FIRST: gl.constexpr, HALVES: gl.constexpr):
    """The outputs of each of the HALVES column blocks: o = e^G q S + P U at the block's tau, stored as
    o / tau (one block at a time, in registers' favour); loads q and P."""
    i_v, i_n, i_nh, i_hv, row_base, T, NT, col_qk, col_v, col_tp = program_rows(
        cu_seqlens, seq_order, T, HV, H, K, V, BT, BV * HALVES, IS_VARLEN, LONGEST_FIRST)
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BV, 16])
    rows_l: gl.constexpr = gl.SliceLayout(1, acc_l)
    o_t = gl.arange(0, BT, layout=rows_l)
    o_v = HALVES * i_v * BV + gl.arange(0, BV, layout=gl.SliceLayout(0, acc_l))
    b_zero = gl.zeros([BT, BV], gl.float32, acc_l)
    for c in gl.static_range(STAGES):
        _issue(c, NT, q_bars, STAGES, row_base, BT, d_q, col_qk, q_s)
        _issue(c, NT, p_bars, STAGES, row_base, BT, d_p, col_tp, p_s)
    for c in range(0, NT):
        st = c % STAGES
        o_row = (row_base + c * BT).to(gl.int64) * HV + i_hv
        m_t = (c * BT + o_t) < T
        _wait(q_bars, c, STAGES)
        mbarrier.wait(s_ready.index(0), c & 1)
        b_qSA = warpgroup_mma(q_s.index(st), s_s.index(0), b_zero, use_acc=False, is_async=True)
        if HALVES == 2:
            mbarrier.wait(s_ready.index(1), c & 1)
            b_qSB = warpgroup_mma(q_s.index(st), s_s.index(1), b_zero, use_acc=False, is_async=True)
            b_qSA = warpgroup_mma_wait(num_outstanding=1, deps=(b_qSA,))
            _arrive(s_free.index(0))
            b_qSB = warpgroup_mma_wait(num_outstanding=0, deps=(b_qSB,))
            _arrive(s_free.index(1))
        else:
            b_qSA = warpgroup_mma_wait(num_outstanding=0, deps=(b_qSA,))
            _arrive(s_free.index(0))
        _issue(c + STAGES, NT, q_bars, STAGES, row_base, BT, d_q, col_qk, q_s)
        _wait(p_bars, c, STAGES)
        _output_half(0, c, p_s.index(st), u_s, ov_s, u_ready, u_free, b_qSA, o, o_row, o_t, o_v, m_t, HV, V, rows_l)
        if HALVES == 2:
            _output_half(1, c, p_s.index(st), u_s, ov_s, u_ready, u_free, b_qSB, o, o_row, o_t, o_v + BV, m_t, HV,
                         V, rows_l)
        _issue(c + STAGES, NT, p_bars, STAGES, row_base, BT, d_p, col_tp, p_s)


@gluon.jit
def hand_off_buffers(HALVES: gl.constexpr, K: gl.constexpr, BT: gl.constexpr, BV: gl.constexpr):
    """The hand-offs' buffers and barriers for HALVES column blocks of BV (the comment above _publish):
    s_s [HALVES, K, BV], z_s, u_s, uc_s [HALVES, BT, BV] fp16; sv_s (max |S^|, sigma_0), ov_s (the
    output's row factors, 1 / tau) [2 HALVES, BT] and cv_s (f1, f2, 1 / sigma') [3 HALVES, K] fp32;
    s_ready, u_ready (count 1), s_free, u_free (count 2: two warpgroups read) [HALVES]."""
    s_s = gl.allocate_shared_memory(gl.float16, [HALVES, K, BV], gl.NVMMASharedLayout.get_default_for([K, BV],
                                                                                                       gl.float16))
    b_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BT, BV], gl.float16)
    z_s = gl.allocate_shared_memory(gl.float16, [HALVES, BT, BV], b_l)
    u_s = gl.allocate_shared_memory(gl.float16, [HALVES, BT, BV], b_l)
    uc_s = gl.allocate_shared_memory(gl.float16, [HALVES, BT, BV], b_l)
    vec_sl: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    sv_s = gl.allocate_shared_memory(gl.float32, [2 * HALVES, BT], vec_sl)
    cv_s = gl.allocate_shared_memory(gl.float32, [3 * HALVES, K], vec_sl)
    ov_s = gl.allocate_shared_memory(gl.float32, [2 * HALVES, BT], vec_sl)
    s_free = gl.allocate_shared_memory(gl.int64, [HALVES, 1], mbarrier.MBarrierLayout())
    u_free = gl.allocate_shared_memory(gl.int64, [HALVES, 1], mbarrier.MBarrierLayout())
    for h in gl.static_range(HALVES):
        mbarrier.init(s_free.index(h), count=2)
        mbarrier.init(u_free.index(h), count=2)
    return s_s, z_s, u_s, uc_s, sv_s, cv_s, ov_s, _barriers(HALVES), s_free, _barriers(HALVES), u_free


@gluon.jit
def walk_ws_kernel(d_q, d_k, d_v, d_t, d_p, Gc, o, h0, ht, cu_seqlens, seq_order, scale, T,
                   H: gl.constexpr, HV: gl.constexpr, K: gl.constexpr, V: gl.constexpr,
                   BT: gl.constexpr, BV: gl.constexpr, STAGES: gl.constexpr,
                   HAS_H0: gl.constexpr, STORE_FINAL: gl.constexpr, IS_VARLEN: gl.constexpr,
                   LONGEST_FIRST: gl.constexpr, MASK_ROWS: gl.constexpr, CHAIN_NREG: gl.constexpr,
                   OUTPUT_NREG: gl.constexpr, BOUND_TAU: gl.constexpr, num_warps: gl.constexpr):
    """One program walks all chunks of one (sequence, value head) with BV = V columns, in three
    warpgroups (the module docstring). Tensors as walk_gluon_kernel's; grid (N x HV,). MASK_ROWS as
    there (rows of the next sequence zeroed in v and U, outputs past the end not stored)."""
    # Only allocations and barrier inits here, on the default warpgroup alone: the workers' warps
    # wait at the fork (the compiler keeps this region's barriers to 128 threads).
    k_s, q_s, t_s, v_s, p_s, k_bars, q_bars, v_bars, p_bars = _rings(d_q, d_k, d_v, d_t, d_p, STAGES, STAGES,
                                                                     BT, K, BV)
    t_bars = _barriers(STAGES)
    s_s, z_s, u_s, uc_s, sv_s, cv_s, ov_s, s_ready, s_free, u_ready, u_free = hand_off_buffers(1, K, BT, BV)
    gl.warp_specialize([
        (_state_part, (h0, ht, k_s, k_bars, s_s, uc_s, sv_s, cv_s, s_ready, s_free, u_ready, u_free,
                       cu_seqlens, seq_order, T, H, HV, K, V, BT, BV, STAGES, HAS_H0, STORE_FINAL, IS_VARLEN,
                       LONGEST_FIRST, BOUND_TAU, 1)),
        (_chain_part, (d_k, d_v, d_t, Gc, k_s, v_s, t_s, k_bars, v_bars, t_bars, s_s, z_s, u_s, uc_s, sv_s, cv_s,
                       ov_s, s_ready, s_free, u_ready, u_free, cu_seqlens, seq_order, T, scale, H, HV, K, V, BT,
                       BV, STAGES, IS_VARLEN, LONGEST_FIRST, MASK_ROWS, BOUND_TAU)),
        (_output_part, (d_q, d_p, o, q_s, p_s, q_bars, p_bars, s_s, u_s, ov_s, s_ready, s_free, u_ready, u_free,
                        cu_seqlens, seq_order, T, H, HV, K, V, BT, BV, STAGES, IS_VARLEN, LONGEST_FIRST, 1)),
    ], [4, 4], [CHAIN_NREG, OUTPUT_NREG])


def ws_smem_bytes(K: int, V: int, BT: int = 64, stages: int = 2) -> int:
    """walk_ws_kernel's shared memory in fp16 tiles: rings of k, q (BT x K), v (BT x V), T, P (BT x BT),
    the state's copy (K x V), Z, U and Uc (BT x V), the vectors and a margin for the barriers."""
    return stages * 2 * (2 * BT * K + BT * V + 2 * BT * BT) + 2 * K * V + 3 * 2 * BT * V + 4 * (4 * BT + 3 * K) + 1024


def walk_gluon_ws(qn, kn, v, tb, attn, Gc, o, h0, ht, scale, H, HV, BT, stages=2, cu_seqlens=None, seq_order=None,
                  bound_tau=False, halves=1):
    """Launch walk_ws_kernel (halves=1: BV = V) or walk_gluon_ws2's walk_ws2_kernel (halves=2: two
    blocks of V / 2, V = 128, tau always from the bound); tensors as walk_gluon.walk_gluon's, one program
    a sequence and value head. bound_tau: walk_ws_kernel's BOUND_TAU (tau from the chain's own bound
    on the state after the first chunk, no max reduction of the state a chunk). The launcher
    (gdn.ops.triton.forward) checks the shapes first."""
    B, T, _, K = qn.shape
    V = v.shape[-1]
    walk = "gluon_ws2" if halves == 2 else "gluon_ws"
    values = (128,) if halves == 2 else (64, 128)
    if BT != 64 or K not in (64, 128) or V not in values:
        raise ValueError(f"walk={walk!r} needs chunk_size 64, K of 64 or 128 and V in {values}, got {BT}, {K}, {V}")
    if stages < 2:     # the chain refills chunk c - 1's k slot after waiting for chunk c's k
        raise ValueError(f"walk={walk!r} needs stages >= 2, got {stages}")
    N, args, flags = walk_launch(qn, kn, v, tb, attn, Gc, o, h0, ht, cu_seqlens, seq_order, BT, V // halves)
    if halves == 2:
        from .walk_gluon_ws2 import CHAIN_REGS as chain_regs, OUTPUT_REGS as output_regs, walk_ws2_kernel as kernel
        extra = {}
    else:
        kernel, chain_regs, output_regs, extra = walk_ws_kernel, CHAIN_REGS, OUTPUT_REGS, dict(BV=V,
                                                                                             BOUND_TAU=bound_tau)
    kernel[(N * HV,)](*args, scale, T, H=H, HV=HV, K=K, V=V, BT=BT, STAGES=stages, **flags, **extra,
                      CHAIN_NREG=chain_regs, OUTPUT_NREG=output_regs, num_warps=4, maxnreg=168)

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
from .walk_gluon import (_LOG2E, _barriers, _chunk_decays, _issue, _rings, _rows, _wait, initial_state, program_rows,
                         values_and_scales)

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


@gluon.jit
def _state_part(h0, ht, k_s, k_bars, s_s, uc_s, sv_s, cv_s, s_ready, s_free, u_ready, u_free,
                cu_seqlens, seq_order, T, H: gl.constexpr, HV: gl.constexpr, K: gl.constexpr,
                V: gl.constexpr, BT: gl.constexpr, BV: gl.constexpr, STAGES: gl.constexpr,
                HAS_H0: gl.constexpr, STORE_FINAL: gl.constexpr, IS_VARLEN: gl.constexpr,
                LONGEST_FIRST: gl.constexpr, BOUND_TAU: gl.constexpr):
    """The default warpgroup: holds S^ = sigma S [K, BV] fp32, hands its fp16 copy to the others and
    applies each chunk's update S <- e^{G_C} S + k^T Uc (scaled by the chain's factors)."""
    i_v, i_n, i_nh, i_hv, row_base, T, NT, col_qk, col_v, col_tp = program_rows(
        cu_seqlens, seq_order, T, HV, H, K, V, BT, BV, IS_VARLEN, LONGEST_FIRST)
    s_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BV, 16])
    rows_l: gl.constexpr = gl.SliceLayout(1, s_l)
    vec_l: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    o_k, o_v, o_t, i_state, b_S, b_sig = initial_state(h0, i_v, i_nh, K, V, BT, BV, HAS_H0, rows_l,
                                                       gl.SliceLayout(0, s_l))
    sv_s.index(1).store(gl.zeros([BT], gl.float32, vec_l) + b_sig)     # the chain's first sigma
    sv_s.index(0).store(gl.zeros([BT], gl.float32, vec_l) + tile_max(b_S))
    b_inv = gl.zeros([K], gl.float32, rows_l) + 1.0 / b_sig           # 1 / sigma, for the final store
    for c in range(0, NT):
        if c > 0:
            mbarrier.wait(s_free, (c - 1) & 1)
        s_s.store(b_S.to(gl.float16))
        if not BOUND_TAU:
            if c > 0:
                sv_s.index(0).store(gl.zeros([BT], gl.float32, vec_l) + tile_max(b_S))
        fence_async_shared()
        _arrive(s_ready)
        _wait(k_bars, c, STAGES)
        mbarrier.wait(u_ready, c & 1)
        b_f1 = cv_s.index(0).load(rows_l)          # e^{G_C} tau / sigma
        b_f2 = cv_s.index(1).load(rows_l)          # sigma' / tau
        b_inv = cv_s.index(2).load(rows_l)         # 1 / sigma'
        b_Sn = warpgroup_mma(k_s.index(c % STAGES).permute((1, 0)), uc_s, b_S * b_f1[:, None], is_async=True)
        b_S = warpgroup_mma_wait(num_outstanding=0, deps=(b_Sn,))
        _arrive(u_free)
        b_S = b_S * b_f2[:, None]
    if STORE_FINAL:
        gl.store(ht + i_state + o_k[:, None] * V + o_v[None, :], b_S * b_inv[:, None])


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
        mbarrier.wait(s_ready, c & 1)
        if c == 0:
            b_sig = gl.max(sv_s.index(1).load(vec_l), 0)
        else:
            # The state's update of chunk c - 1 is done (it came before this s_ready): its k slot is free.
            _issue(c - 1 + STAGES, NT, k_bars, STAGES, row_base, BT, d_k, col_qk, k_s)
        _wait(k_bars, c, STAGES)
        b_kS = warpgroup_mma(k_s.index(st), s_s, b_zero, use_acc=False, is_async=True)
        if BOUND_TAU:
            # After the first chunk, the state's size is the bound the last sigma came from (up to ~17x
            # above max |S|: |Z tau| stays within ~200), not the state warpgroup's max reduction.
            if c == 0:
                b_mS = gl.max(sv_s.index(0).load(vec_l), 0) * (1.0 / b_sig)
            else:
                b_mS = b_bound
        else:
            b_mS = gl.max(sv_s.index(0).load(vec_l), 0) * (1.0 / b_sig)
        b_v, b_tau, b_ld, b_eG = values_and_scales(v_s, v_bars, c, STAGES, acc_l, MASK_ROWS, m_t, b_mS, b_G, b_G0,
                                                   b_sig)
        b_kS = warpgroup_mma_wait(num_outstanding=0, deps=(b_kS,))
        _arrive(s_free)
        _issue(c + STAGES, NT, v_bars, STAGES, row_base, BT, d_v, col_v, v_s)     # v is in registers
        b_Z = b_v * b_tau - b_kS * b_eG[:, None]
        z_s.store(b_Z.to(gl.float16))
        fence_async_shared()
        _wait(t_bars, c, STAGES)
        b_U = warpgroup_mma(t_s.index(st), z_s, b_zero, use_acc=False, is_async=True)
        b_U = warpgroup_mma_wait(num_outstanding=0, deps=(b_U,))
        _issue(c + STAGES, NT, t_bars, STAGES, row_base, BT, d_t, col_tp, t_s)
        if MASK_ROWS:
            b_U = gl.where(m_t[:, None], b_U, 0.0)
        b_Uc = b_U * gl.exp(b_G_last - b_G)[:, None]
        b_bound = state_bound(b_G_last, b_mS, b_Uc, b_tau)
        b_sig_next = pow2_below_inverse(b_bound)
        if c > 0:
            mbarrier.wait(u_free, (c - 1) & 1)
        u_s.store(b_U.to(gl.float16))
        uc_s.store(b_Uc.to(gl.float16))
        k_vec = gl.zeros([K], gl.float32, vec_l)
        cv_s.index(0).store(k_vec + gl.exp2(b_G_last * _LOG2E + b_ld))
        cv_s.index(1).store(k_vec + pow2_of(log2_pow2(b_sig_next) - log2_pow2(b_tau)))
        cv_s.index(2).store(k_vec + 1.0 / b_sig_next)
        ov_s.index(0).store(scale * b_eG)
        ov_s.index(1).store(gl.zeros([BT], gl.float32, rows_l) + 1.0 / b_tau)
        fence_async_shared()
        _arrive(u_ready)
        b_sig = b_sig_next


@gluon.jit
def _output_part(d_q, d_p, o, q_s, p_s, q_bars, p_bars, s_s, u_s, ov_s, s_ready, s_free, u_ready, u_free,
                 cu_seqlens, seq_order, T, H: gl.constexpr, HV: gl.constexpr, K: gl.constexpr,
                 V: gl.constexpr, BT: gl.constexpr, BV: gl.constexpr, STAGES: gl.constexpr,
                 IS_VARLEN: gl.constexpr, LONGEST_FIRST: gl.constexpr):
    """The outputs: o = e^G q S + P U at the chain's scale tau, stored as o / tau; loads q and P."""
    i_v, i_n, i_nh, i_hv, row_base, T, NT, col_qk, col_v, col_tp = program_rows(
        cu_seqlens, seq_order, T, HV, H, K, V, BT, BV, IS_VARLEN, LONGEST_FIRST)
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BV, 16])
    rows_l: gl.constexpr = gl.SliceLayout(1, acc_l)
    o_t = gl.arange(0, BT, layout=rows_l)
    o_v = i_v * BV + gl.arange(0, BV, layout=gl.SliceLayout(0, acc_l))
    b_zero = gl.zeros([BT, BV], gl.float32, acc_l)
    for c in gl.static_range(STAGES):
        _issue(c, NT, q_bars, STAGES, row_base, BT, d_q, col_qk, q_s)
        _issue(c, NT, p_bars, STAGES, row_base, BT, d_p, col_tp, p_s)
    for c in range(0, NT):
        st = c % STAGES
        row0 = (row_base + c * BT).to(gl.int64)
        m_t = (c * BT + o_t) < T
        mbarrier.wait(s_ready, c & 1)
        _wait(q_bars, c, STAGES)
        b_qS = warpgroup_mma(q_s.index(st), s_s, b_zero, use_acc=False, is_async=True)
        b_qS = warpgroup_mma_wait(num_outstanding=0, deps=(b_qS,))
        _arrive(s_free)
        _issue(c + STAGES, NT, q_bars, STAGES, row_base, BT, d_q, col_qk, q_s)
        mbarrier.wait(u_ready, c & 1)
        b_fo = ov_s.index(0).load(rows_l)          # scale e^G tau / sigma
        b_it = ov_s.index(1).load(rows_l)          # 1 / tau
        _wait(p_bars, c, STAGES)
        b_o = warpgroup_mma(p_s.index(st), u_s, b_qS * b_fo[:, None], is_async=True)
        b_o = warpgroup_mma_wait(num_outstanding=0, deps=(b_o,))
        _arrive(u_free)
        _issue(c + STAGES, NT, p_bars, STAGES, row_base, BT, d_p, col_tp, p_s)
        p_o = o + (row0 * HV + i_hv) * V + (o_t[:, None] * (HV * V) + o_v[None, :])
        gl.store(p_o, (b_o * b_it[:, None]).to(o.dtype.element_ty), mask=m_t[:, None])


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
    s_s = gl.allocate_shared_memory(gl.float16, [K, BV], gl.NVMMASharedLayout.get_default_for([K, BV], gl.float16))
    b_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BT, BV], gl.float16)
    z_s = gl.allocate_shared_memory(gl.float16, [BT, BV], b_l)
    u_s = gl.allocate_shared_memory(gl.float16, [BT, BV], b_l)
    uc_s = gl.allocate_shared_memory(gl.float16, [BT, BV], b_l)
    vec_sl: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    sv_s = gl.allocate_shared_memory(gl.float32, [2, BT], vec_sl)     # state -> chain: max |S^|, sigma_0
    cv_s = gl.allocate_shared_memory(gl.float32, [3, K], vec_sl)      # chain -> state: f1, f2, 1 / sigma'
    ov_s = gl.allocate_shared_memory(gl.float32, [2, BT], vec_sl)     # chain -> output: row factors, 1 / tau
    s_ready = _barriers(1).index(0)
    u_ready = _barriers(1).index(0)
    s_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(s_free, count=2)
    u_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(u_free, count=2)
    gl.warp_specialize([
        (_state_part, (h0, ht, k_s, k_bars, s_s, uc_s, sv_s, cv_s, s_ready, s_free, u_ready, u_free,
                       cu_seqlens, seq_order, T, H, HV, K, V, BT, BV, STAGES, HAS_H0, STORE_FINAL, IS_VARLEN,
                       LONGEST_FIRST, BOUND_TAU)),
        (_chain_part, (d_k, d_v, d_t, Gc, k_s, v_s, t_s, k_bars, v_bars, t_bars, s_s, z_s, u_s, uc_s, sv_s, cv_s,
                       ov_s, s_ready, s_free, u_ready, u_free, cu_seqlens, seq_order, T, scale, H, HV, K, V, BT,
                       BV, STAGES, IS_VARLEN, LONGEST_FIRST, MASK_ROWS, BOUND_TAU)),
        (_output_part, (d_q, d_p, o, q_s, p_s, q_bars, p_bars, s_s, u_s, ov_s, s_ready, s_free, u_ready, u_free,
                        cu_seqlens, seq_order, T, H, HV, K, V, BT, BV, STAGES, IS_VARLEN, LONGEST_FIRST)),
    ], [4, 4], [CHAIN_NREG, OUTPUT_NREG])


def ws_smem_bytes(K: int, V: int, BT: int = 64, stages: int = 2) -> int:
    """walk_ws_kernel's shared memory in fp16 tiles: rings of k, q (BT x K), v (BT x V), T, P (BT x BT),
    the state's copy (K x V), Z, U and Uc (BT x V), the vectors and a margin for the barriers."""
    return stages * 2 * (2 * BT * K + BT * V + 2 * BT * BT) + 2 * K * V + 3 * 2 * BT * V + 4 * (4 * BT + 3 * K) + 1024


def walk_gluon_ws(qn, kn, v, tb, attn, Gc, o, h0, ht, scale, H, HV, BT, stages=2, cu_seqlens=None, seq_order=None,
                  bound_tau=False):
    """Launch walk_ws_kernel (tensors as walk_gluon.walk_gluon's; BV = V, one program a sequence and value
    head). bound_tau: walk_ws_kernel's BOUND_TAU (tau from the chain's own bound on the state after the
    first chunk, no max reduction of the state a chunk). The launcher (gdn.ops.triton.forward) checks
    the shapes first."""
    B, T, _, K = qn.shape
    V = v.shape[-1]
    if BT != 64 or K not in (64, 128) or V not in (64, 128):
        raise ValueError(f"walk='gluon_ws' needs chunk_size 64, K and V of 64 or 128, got {BT}, {K}, {V}")
    N = B if cu_seqlens is None else len(cu_seqlens) - 1
    mask_rows = cu_seqlens is not None or (B > 1 and T % BT != 0)
    walk_ws_kernel[(N * HV,)](
        _rows(qn, [BT, K]), _rows(kn, [BT, K]), _rows(v, [BT, V]), _rows(tb, [BT, BT]), _rows(attn, [BT, BT]),
        Gc, o, o if h0 is None else h0, o if ht is None else ht, o if cu_seqlens is None else cu_seqlens,
        o if seq_order is None else seq_order, scale, T,
        H=H, HV=HV, K=K, V=V, BT=BT, BV=V, STAGES=stages, HAS_H0=h0 is not None, STORE_FINAL=ht is not None,
        IS_VARLEN=cu_seqlens is not None, LONGEST_FIRST=seq_order is not None, MASK_ROWS=mask_rows,
        CHAIN_NREG=CHAIN_REGS, OUTPUT_NREG=OUTPUT_REGS, BOUND_TAU=bound_tau, num_warps=4, maxnreg=168)

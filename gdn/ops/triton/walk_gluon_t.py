"""The fp16 state walk in Gluon on the transposed state: every product on the state's chain takes its
left operand from registers (``walk="gluon_t"``; the default at the wide shapes since v22: 11-14%
faster there than walk_gluon on an H200, benchmarks/NOTES.md v22).

walk_gluon holds S [K, BV] and forms k S and q S with the state as the right operand, which a
warpgroup MMA reads from shared memory only; so every chunk stores three tiles to shared memory on
the chain (the state's fp16 copy, Z, then U and Uc), each behind a fence and a barrier. Here the
program holds S^T [BV, K] (the BV value columns as rows) and forms the transposed products

    (k S)^T = S^T k^T      (q S)^T = S^T q^T        A: S^T in registers, B: k, q permuted
    U^T = Z^T (T diag(beta))^T                       A: Z^T in registers, B: T permuted
    o^T = e^G (q S)^T + U^T P^T                      A: U^T in registers, B: P permuted
    S^T <- e^{G_C} S^T + (e^{G_C - G} U)^T k         A: Uc^T in registers, B: k

The accumulator of [M, N] fp32 converted to fp16 is already the left operand's layout of a product
over N, so none of the four left operands moves: the chain is three products and the element-wise
work between them, with nothing stored. Only the output goes through shared memory (o^T stored
transposed into a [BT, BV] tile, written by TMA).

Each value column of the state walks on its own (the delta rule never mixes them), so here each has
its own scales: sigma, tau and the next sigma are [BV] vectors, one a row of S^T, from that row's
maxima (a reduction over the four threads that hold a row: two shuffles, no shared memory and no
barrier). They are walk_f16's scales taken per column, never coarser, so each column keeps at least
walk_f16's bits. Ratios of scales that meet a gate's decay are formed so that no factor overflows:
e^G tau / sigma = e^{G - G_0} (<= 1, per token) times e^{G_0} tau / sigma (<= 2, per column, one
exponent), and the state's update is folded into one scaling of each side: S^T e^{G_C} sigma' /
sigma (one exponent, <= 2) plus (Uc sigma' / tau)^T k (a power of two on fp16: the same bits as Uc's).

Launch as walk_gluon's: one warpgroup a program over BV = 64 columns, two programs an SM (one stage:
80 KB of shared memory each), the same rings, WAIT and MASK_ROWS. The matrix units' 64 rows make 64
columns the least a program takes, so at B = 1 (32 columns a program there) walk_gluon stays.
Registers: at 255 a thread nothing spills (dense; 4 B outside the loop when packed); a [BV, BT] fp32
tile held from Z to o's product made ptxas spill the next chunk's decays, whose spill stores then
waited for their loads (NOTES.md v22: the op 11% slower at B8 x T4k).
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, tma, warpgroup_mma, warpgroup_mma_wait

from .addressing import decay_ptrs
from .chunk_fwd import wait_group
from .decay import exp_ftz
from .launch import launch
from .walk_f16 import bound_of, log2_pow2, pow2_below_inverse, pow2_of, tau_of
from .wy import fresh_int, fresh_program_id
from .walk_gluon import (_LOG2E, _chunk_decays, _invalidate, _issue, _rings, _rows, _tile_descriptor, _wait, low_parts,
                         first_fills, next_k, program_rows, ring_slot, walk_descriptors, walk_launch)


@gluon.jit
def _row_max(x):
    """max |x| along each row of a 2-D tile (an empty row, or all zeros: 0)."""
    return gl.max(gl.abs(x), 1)


@gluon.jit
def _state_t(p_state, o_k, o_vs, V: gl.constexpr, live, MASKED: gl.constexpr):
    """S^T [BV, K] of a [K, V] fp32 state at p_state (its columns o_vs as rows; with MASKED, zeros
    unless live), each row scaled by its sigma (walk_f16): returns sigma S^T and sigma [BV]."""
    p = p_state + o_k[None, :] * V + o_vs[:, None]
    if MASKED:
        b_S = gl.load(p, mask=(o_vs[:, None] >= 0) & live, other=0.0)
    else:
        b_S = gl.load(p)
    b_sig = pow2_below_inverse(_row_max(b_S))
    return b_S * b_sig[:, None], b_sig


@gluon.jit
def _segment_rows(pid, cu_seqlens, seq_order, T, P, L, W, L0, H: gl.constexpr, HV: gl.constexpr, K: gl.constexpr,
                  V: gl.constexpr, BT: gl.constexpr, BV: gl.constexpr, IS_VARLEN: gl.constexpr,
                  LONGEST_FIRST: gl.constexpr, SPLIT: gl.constexpr):
    """Program pid's walk (walk_t_kernel's grid): program_rows' of its (sequence, value head, columns),
    with SPLIT its segment i_p's chunks as a sequence of their own (the rings, the decays and o's rows
    all count from row_base): the warm-up's (SPLIT 1), the segment's (SPLIT 2), or both (SPLIT 3:
    segment 0 the first L0 chunks, segment p >= 1 the L from L0 + (p - 1) L, after its W warm-up
    chunks). Returns i_p, i_v, i_n, i_nh, i_hv, row_base, T, NT (this walk's), NT_all (the sequence's:
    the WY pass's counts), col_qk, col_v, col_tp, c_first (the sequence's first chunk walked here),
    c_own (SPLIT 3: the first with outputs, from c_first), c_ck (SPLIT 3: the checkpoint, where the
    next segment's warm-up starts, from c_first), n_hv (N x HV), i_seg (in seg_ok and seg_flags) and
    i_seg_state (in seg_warm and seg_pub)."""
    i_p = 0
    if SPLIT:
        n_rest = gl.num_programs(0) // P
        i_p = pid // n_rest
        pid = pid % n_rest
    i_v, i_n, i_nh, i_hv, row_base, T, NT, col_qk, col_v, col_tp = program_rows(
        pid, cu_seqlens, seq_order, T, HV, H, K, V, BT, BV, IS_VARLEN, LONGEST_FIRST)
    NT_all = NT
    c_first = 0
    c_own = 0
    c_ck = 0
    n_hv = 0
    i_seg = 0
    i_seg_state = gl.zeros([], gl.int64)
    if SPLIT:
        if SPLIT == 1:
            c_first = gl.maximum(i_p * L - W, 0)
            c_end = i_p * L
        elif SPLIT == 2:
            c_first = i_p * L
            c_end = gl.minimum(c_first + L, NT)
        else:
            c_own = gl.minimum(i_p, 1) * W
            c_first = gl.minimum(i_p, 1) * (L0 + (i_p - 1) * L) - c_own
            c_end = gl.minimum(L0 + i_p * L, NT)
            c_ck = gl.minimum(L0 + i_p * L - W, NT) - c_first
        row_base = row_base + c_first * BT
        T = gl.minimum(T, c_end * BT) - c_first * BT
        NT = c_end - c_first
        n_hv = gl.num_programs(0) // P // (V // BV)
        i_seg = (i_p * n_hv + i_nh) * (V // BV) + i_v
        i_seg_state = (i_p * n_hv + i_nh).to(gl.int64) * K * V
    return (i_p, i_v, i_n, i_nh, i_hv, row_base, T, NT, NT_all, col_qk, col_v, col_tp, c_first, c_own, c_ck, n_hv,
            i_seg, i_seg_state)


@gluon.jit
def _column_norms(b_S, b_sig):
    """Each column's 2-norm [BV] of the state sigma S^T [BV, K] (its scales b_sig [BV])."""
    b_x = b_S * (1.0 / b_sig)[:, None]
    return gl.sqrt(gl.sum(b_x * b_x, 1))


@gluon.jit
def _checkpoint(seg_bound, b_S, b_sig, live, cu_seqlens, seq_order, T, P, L, W, L0, H: gl.constexpr, HV: gl.constexpr,
                K: gl.constexpr, V: gl.constexpr, BT: gl.constexpr, BV: gl.constexpr, IS_VARLEN: gl.constexpr,
                LONGEST_FIRST: gl.constexpr, scol_l: gl.constexpr):
    """SPLIT 3 and 4's checkpoint: where live, the state's column norms into the program's seg_bound
    [P, N x HV, 3, V] row 0 (its place read again: nothing of it kept through the walk)."""
    (i_p, i_v, i_n, i_nh, i_hv, row_base, T, NT, NT_all, col_qk, col_v, col_tp, c_first, c_own, c_ck, n_hv,
     i_seg, i_seg_state) = _segment_rows(fresh_program_id(), cu_seqlens, seq_order, T, P, L, W, L0, H, HV, K, V,
                                         BT, BV, IS_VARLEN, LONGEST_FIRST, 3)
    o_vs = i_v * BV + gl.arange(0, BV, layout=scol_l)
    gl.store(seg_bound + (i_p * n_hv + i_nh).to(gl.int64) * (3 * V) + o_vs, _column_norms(b_S, b_sig),
             mask=(o_vs >= 0) & live)


@gluon.jit
def _chunks(c_lo, c_hi, NT, T, row_base, b_S, b_sig, b_G_next, b_G_last_next, b_G0_next, b_Gsum, p_count, Gc, i_hv, o_t,
            b_zero, scale, d_q, d_k, d_v, d_t, d_p, d_o, col_qk, col_v, col_tp, k_s, q_s, t_s, v_s, p_s, o_s,
            k_bars, qt_bars, v_bars, p_bars, H: gl.constexpr, HV: gl.constexpr, BT: gl.constexpr,
            STAGES: gl.constexpr, KS: gl.constexpr, WAIT: gl.constexpr, GROUP: gl.constexpr,
            MASK_ROWS: gl.constexpr, OUT: gl.constexpr, acc_t: gl.constexpr, a_t: gl.constexpr,
            a_s: gl.constexpr, col_l: gl.constexpr, scol_l: gl.constexpr, CHECKPOINT: gl.constexpr = False,
            c_ck=0, ck_live=None, seg_bound=None, cu_seqlens=None, seq_order=None, T_in=0, P=1, L=0, W=0, L0=0,
            K: gl.constexpr = 1, V: gl.constexpr = 1, BV: gl.constexpr = 1, IS_VARLEN: gl.constexpr = False,
            LONGEST_FIRST: gl.constexpr = False, g_rows=0, G_BY_HEAD: gl.constexpr = False, t_low=None, beta=None,
            low_s=None):
    """The walk over chunks c_lo .. c_hi - 1 of the program's NT (the module docstring's chain), from
    sigma S^T [BV, K] (b_S, its scales b_sig [BV]) and chunk c_lo's decays (b_G_next, b_G_last_next,
    b_G0_next: _chunk_decays'), b_Gsum a running sum of the chunks' log-decays. Rings as
    walk_t_kernel's: every kind's tiles of chunks c_lo .. c_lo + STAGES - 1 issued before (k's of
    c_lo + STAGES by next_k at c_lo's start); each chunk issues its kinds' tiles STAGES chunks on, up
    to NT. OUT: q S and o formed (o^T through o_s, by TMA at row_base + c BT). Returns the state, its
    scales, chunk c_hi's decays and b_Gsum plus these chunks' log-decays. CHECKPOINT (SPLIT 3 and 4):
    before chunk c_ck, where ck_live, the state's column norms (_checkpoint; the rest of the
    arguments are its). The chunk's decays G come one token a thread (_chunk_decays' TOKENS, carried
    so): e^{G - G_0} and e^{G_C - G} are formed there, one exponential a token, and moved to the
    columns' layout through shared memory (each thread's 16 columns' loads and 32 exponentials took
    ~10% more of this walk's time on an H200: NOTES.md v36). t_low: the WY pass's flags of the chunks
    whose T diag(beta) tile carries its low parts (walk_gluon.low_parts, formed in low_s from the tile
    and beta)."""
    # The chunks' flags come a chunk ahead, with the decays (a flagged chunk forms its low parts' tile
    # first thing, where few registers are live; a global load's latency there would sit on the chain).
    b_low_next = gl.load(decay_ptrs(t_low, (row_base + c_lo * BT).to(gl.int64), 0, i_hv, HV, g_rows, G_BY_HEAD),
                         mask=c_lo < c_hi, other=0)
    for c in range(c_lo, c_hi):
        if CHECKPOINT:
            if c == c_ck:
                _checkpoint(seg_bound, b_S, b_sig, ck_live, cu_seqlens, seq_order, T_in, P, L, W, L0, H, HV, K, V,
                            BT, BV, IS_VARLEN, LONGEST_FIRST, scol_l)
        next_k(c, p_count, NT, row_base, d_k, col_qk, k_s, k_bars, H, HV, BT, STAGES, KS, WAIT, GROUP)
        st = ring_slot(c, STAGES, T)
        sk = c % KS
        m_t = (c * BT + o_t) < T
        b_G, b_G_last, b_G0, b_low = b_G_next, b_G_last_next, b_G0_next, b_low_next
        b_Gsum += b_G_last
        b_G_next, b_G_last_next, b_G0_next, b_low_next = _chunk_decays(Gc, row_base, (c + 1) * BT, T, i_hv, HV, BT, o_t,
                                                                       True, g_rows, G_BY_HEAD, t_low)
        if b_low != 0:
            _wait(qt_bars, c, STAGES)              # (T diag(beta)'s tile: the wait below then returns at once)
            low_parts(t_s.index(st), low_s, beta, (row_base + c * BT).to(gl.int64), i_hv, T - c * BT, HV, True,
                      BT, gl.num_warps())

        b_s16 = gl.convert_layout(b_S.to(gl.float16), a_t)
        # Each column's largest state entry, before the products (b_S's registers read while a product
        # with register operands runs make ptxas wait for it), from the fp16 copy the products take:
        # three-input packed maxima, half of fp32's instructions (NOTES.md v43). Its rounding moves the
        # maximum by at most 2^-11 of it, which the scales' headroom (walk_f16.bound_of) absorbs.
        b_mS = gl.convert_layout(gl.convert_layout(_row_max(b_s16), b_sig.type.layout).to(gl.float32) * (1.0 / b_sig),
                                 col_l)
        _wait(k_bars, c, KS)
        b_kS = warpgroup_mma(b_s16, k_s.index(sk).permute((1, 0)), b_zero, use_acc=False, is_async=True)
        _wait(qt_bars, c, STAGES)
        if OUT:
            b_qS = warpgroup_mma(b_s16, q_s.index(st).permute((1, 0)), b_zero, use_acc=False, is_async=True)
        # Beside the products: each column's tau from its max |v| and its state's largest entry.
        _wait(v_bars, c, STAGES)
        b_v = v_s.index(st).permute((1, 0)).load(acc_t).to(gl.float32)
        if MASK_ROWS:
            # Rows of the next sequence: zeros here (so that their Z and U stay finite: an infinity
            # there would meet the causal zeros of T diag(beta) and P as NaN), and out of the
            # state's update below. Then they reach no output row of this sequence.
            if c * BT + BT > T:                     # only a last chunk has such rows
                b_v = gl.where(m_t[None, :], b_v, 0.0)
        b_tau = tau_of(_row_max(b_v), b_mS, exp_ftz(b_G0))
        b_lsig = gl.convert_layout(log2_pow2(b_sig), col_l)
        b_ld = log2_pow2(b_tau) - b_lsig
        # e^G tau / sigma = e^{G - G_0} (tokens) x e^{G_0} tau / sigma (columns), neither overflowing.
        # (Kept as its two vectors, not as a [BV, BT] tile: live until o's product, that tile's 32
        # registers a thread made ptxas spill.)
        b_aG = gl.exp2(b_G0 * _LOG2E + b_ld)
        b_eT = gl.convert_layout(exp_ftz(b_G - b_G0), o_t.type.layout)    # (one exponential a token)
        b_kS = warpgroup_mma_wait(num_outstanding=1 if OUT else 0, deps=(b_kS,))      # (q S runs on)
        b_Z = b_v * b_tau[:, None] - b_kS * b_aG[:, None] * b_eT[None, :]
        _issue(c + STAGES, NT, v_bars, STAGES, row_base, BT, d_v, col_v, v_s)      # v is in registers
        b_z16 = gl.convert_layout(b_Z.to(gl.float16), a_t)
        b_U = warpgroup_mma(b_z16, t_s.index(st).permute((1, 0)), b_zero, use_acc=False, is_async=True)
        if b_low != 0:
            b_U = warpgroup_mma(b_z16, low_s, b_U, is_async=True)
        b_dc = exp_ftz(b_G_last - b_G)     # (while U's product runs)
        if MASK_ROWS:
            b_dc = gl.where((c * BT + gl.arange(0, BT, layout=b_G.type.layout)) < T, b_dc, 0.0)
        b_dc = gl.convert_layout(b_dc, o_t.type.layout)
        if OUT:
            b_U, b_qS = warpgroup_mma_wait(num_outstanding=0, deps=(b_U, b_qS))
        else:
            b_U = warpgroup_mma_wait(num_outstanding=0, deps=(b_U,))
        _issue(c + STAGES, NT, qt_bars, STAGES, row_base, BT, d_q, col_qk, q_s, d_t, col_tp, t_s)
        b_Uc = b_U * b_dc[None, :]
        # The next sigma, column by column.
        b_sig_next = pow2_below_inverse(bound_of(exp_ftz(b_G_last), b_mS, _row_max(b_Uc), b_tau))
        _wait(p_bars, c, STAGES)           # (a warm-up too: each fill of the ring waited for once)
        if OUT:
            b_o = warpgroup_mma(gl.convert_layout(b_U.to(gl.float16), a_t), p_s.index(st).permute((1, 0)),
                                b_qS * (scale * b_aG)[:, None] * b_eT[None, :], is_async=True)
        # S'^ = S^ e^{G_C} sigma' / sigma + (Uc sigma' / tau)^T k: both factors at most ~2.
        b_lsn = log2_pow2(b_sig_next)
        b_fU = pow2_of(b_lsn - log2_pow2(b_tau))
        b_fS = gl.convert_layout(gl.exp2(b_G_last * _LOG2E + b_lsn - b_lsig), scol_l)
        b_uc16 = gl.convert_layout((b_Uc * b_fU[:, None]).to(gl.float16), a_s)
        b_Sn = warpgroup_mma(b_uc16, k_s.index(sk), b_S * b_fS[:, None], is_async=True)
        if OUT:
            b_o = warpgroup_mma_wait(num_outstanding=1, deps=(b_o,))          # the state's update still runs
            _issue(c + STAGES, NT, p_bars, STAGES, row_base, BT, d_p, col_tp, p_s)
            # o^T / tau into the [BT, BV] tile (transposed), then to o by TMA (rows past the tensor's end
            # are not written); with MASK_ROWS a last chunk that ends inside the tile waits for the loop's
            # end (masked stores there, out of the loop's registers).
            tma.store_wait(0)                          # the tile's last chunk has left it
            o_s.permute((1, 0)).store((b_o * (1.0 / b_tau)[:, None]).to(d_o.dtype))
            fence_async_shared()
            gl.thread_barrier()
            if MASK_ROWS:
                whole = c * BT + BT <= T
            else:
                whole = c >= 0
            if whole:
                tma.async_copy_shared_to_global(d_o, [row_base + c * BT, col_v], o_s)
        else:
            _issue(c + STAGES, NT, p_bars, STAGES, row_base, BT, d_p, col_tp, p_s)
        b_S = warpgroup_mma_wait(num_outstanding=0, deps=(b_Sn,))
        b_sig = gl.convert_layout(b_sig_next, scol_l)
    return b_S, b_sig, b_G_next, b_G_last_next, b_G0_next, b_Gsum


@gluon.jit
def walk_t_kernel(d_q, d_k, d_v, d_t, d_p, d_o, Gc, t_low, beta, o, h0, ht, cu_seqlens, seq_order, done,
                  seg_bound, seg_warm, seg_pub, seg_flags, seg_ok, seg_heads, scale, T_in, P, L, W, L0, rows,
                  H: gl.constexpr, HV: gl.constexpr, K: gl.constexpr, V: gl.constexpr,
                  BT: gl.constexpr, BV: gl.constexpr, STAGES: gl.constexpr,
                  HAS_H0: gl.constexpr, STORE_FINAL: gl.constexpr, IS_VARLEN: gl.constexpr,
                  LONGEST_FIRST: gl.constexpr, MASK_ROWS: gl.constexpr, WAIT: gl.constexpr,
                  GROUP: gl.constexpr, SPLIT: gl.constexpr, CHOSEN: gl.constexpr, DESCS_IN_KERNEL: gl.constexpr,
                  num_warps: gl.constexpr, G_BY_HEAD: gl.constexpr = False):
    """One program walks all chunks of one (sequence, value head, BV state columns) on S^T: _walk_t's
    phase SPLIT (arguments as its), or with SPLIT = 5 the posterior check's two phases in one launch,
    3 then 4. A program's phase 4 waits only for the program before it in the grid (segment p - 1's,
    placed earlier), as the second launch's did, so one launch cannot deadlock where two did not;
    it saves the second launch's host time (~160 us a call on the GPU machine's host, NOTES.md v37)
    and the wait for every segment's walk between them. Phase 4 reads the program id and the scalar
    arguments afresh (fresh_program_id, fresh_int): merged with phase 3's, what it derives from them
    stayed live through phase 3's walk and spilled its loop (9 local loads and stores a chunk, that
    walk ~9% slower than the two launches' on an H200, v37; now 3, off the products' chain)."""
    gl.static_assert(not DESCS_IN_KERNEL or SPLIT == 0, "the split's walk takes the host's descriptors")
    FIRST: gl.constexpr = 3 if SPLIT == 5 else SPLIT
    _walk_t(gl.program_id(0), d_q, d_k, d_v, d_t, d_p, d_o, Gc, t_low, beta, o, h0, ht, cu_seqlens, seq_order, done,
            seg_bound, seg_warm, seg_pub, seg_flags, seg_ok, seg_heads, scale, T_in, P, L, W, L0, rows, H, HV, K, V, BT,
            BV, STAGES, HAS_H0, STORE_FINAL, IS_VARLEN, LONGEST_FIRST, MASK_ROWS, WAIT, GROUP, FIRST, CHOSEN,
            DESCS_IN_KERNEL, num_warps, G_BY_HEAD)
    if SPLIT == 5:
        # (Phase 4 reads what this program's threads stored in phase 3: its start's records, its state.)
        gl.thread_barrier()
        _walk_t(fresh_program_id(), d_q, d_k, d_v, d_t, d_p, d_o, Gc, t_low, beta, o, h0, ht, cu_seqlens, seq_order,
                done, seg_bound, seg_warm, seg_pub, seg_flags, seg_ok, seg_heads, scale, fresh_int(T_in), fresh_int(P),
                fresh_int(L), fresh_int(W), fresh_int(L0), rows, H, HV, K, V, BT,
                BV, STAGES, HAS_H0, STORE_FINAL, IS_VARLEN, LONGEST_FIRST, MASK_ROWS, WAIT, GROUP, 4, CHOSEN,
                DESCS_IN_KERNEL, num_warps, G_BY_HEAD)


@gluon.jit
def _walk_t(pid, d_q, d_k, d_v, d_t, d_p, d_o, Gc, t_low, beta, o, h0, ht, cu_seqlens, seq_order, done,
            seg_bound, seg_warm, seg_pub, seg_flags, seg_ok, seg_heads, scale, T_in, P, L, W, L0, rows,
            H: gl.constexpr, HV: gl.constexpr, K: gl.constexpr, V: gl.constexpr,
            BT: gl.constexpr, BV: gl.constexpr, STAGES: gl.constexpr,
            HAS_H0: gl.constexpr, STORE_FINAL: gl.constexpr, IS_VARLEN: gl.constexpr,
            LONGEST_FIRST: gl.constexpr, MASK_ROWS: gl.constexpr, WAIT: gl.constexpr,
            GROUP: gl.constexpr, SPLIT: gl.constexpr, CHOSEN: gl.constexpr, DESCS_IN_KERNEL: gl.constexpr,
            WARPS: gl.constexpr, G_BY_HEAD: gl.constexpr = False):
    """One program walks all chunks of one (sequence, value head, BV state columns) on S^T (the module
    docstring). Tensors as walk_gluon_kernel's, and d_o: a descriptor of o as [tokens, HV x V] in
    [BT, BV] tiles (chunks whose rows all belong to the sequence are stored through it; a last chunk
    with MASK_ROWS by masked stores; with DESCS_IN_KERNEL o itself, its descriptor made here).
    Grid: (V / BV x N x HV,).

    SPLIT (dense, no MASK_ROWS; gdn.ops.triton.split_walk): P segments a sequence, grid
    (P x V / BV x N x HV,), segment-major. SPLIT = 1 and 2 (two launches), the bounds' check (L
    chunks a segment). SPLIT = 1, the warm-up: segment p's
    program (p >= 1) walks the W chunks before its segment (fewer where the sequence starts there:
    then from h0, exactly) from a zero state, without outputs, and stores that state at seg_warm
    [P, N x HV, K, V] fp32 and its certificate's outcome at seg_ok [P, N x HV, V / BV] int32: 2 exact
    (from the sequence's start), 1 certified (seg_bound [P, N x HV], a bound on how far the true state
    can be from it, column by column, is at most 2^-30 of every column's largest entry), 0 not.
    SPLIT = 2, the segments: each walks its L chunks with outputs, from h0 (p = 0), its warmed-up
    state (seg_ok > 0), or else segment p - 1's final state, waited for (seg_pub, same shape as
    seg_warm, published with a release on seg_flags, like seg_ok's); the last segment stores ht. The
    warm-up forms neither q S nor o. With WAIT (beside the WY pass, its FEED order) each launch waits
    on the counts from its first chunk's group: every c_first on a group's boundary.
    SPLIT = 3 and 4, the posterior check (after the WY pass; segment 0 the first L0 chunks, segment
    p >= 1 the L from L0 + (p - 1) L). SPLIT = 3, the walk: segment p >= 1's program walks its
    warm-up from a zero state, then its segment with outputs; segment 0 its chunks from h0.
    seg_bound [P, N x HV, 3, V] fp32 gets each program's start (row 1: each column's largest entry
    after the warm-up; row 2: 4 e^(G_win), G_win the warm-up's summed log-decay) and its state's
    column 2-norms at the checkpoint, where segment p + 1's warm-up starts (row 0); seg_pub every
    segment's final state. SPLIT = 4, the check: program p >= 1 waits for segment p - 1's flag and
    checks its warm-up against p - 1's checkpoint (the SPLIT 4 block below); where that fails, or
    seg_heads leaves the head 0 (a beta outside [0, 2] in a warm-up), it walks its segment again
    from p - 1's final state (and stores its checkpoint and final state again). Then it stores its
    outcome at seg_ok (2 exact, 1 certified, 0 walked again) and its flag (its checkpoint and final
    state are then exact); the last segment stores ht. A program waits only for the one before
    (earlier in the grid).
    CHOSEN (with SPLIT; the automatic split, split_walk.forgetting_heads): only the heads whose
    seg_heads [N x HV] int32 is nonzero are walked here, the others' programs return at once
    (walk_gluon's SKIP walks them in order)."""
    KS: gl.constexpr = STAGES + 1
    OUT: gl.constexpr = SPLIT != 1                   # the warm-up forms neither q S nor o
    (i_p, i_v, i_n, i_nh, i_hv, row_base, T, NT, NT_all, col_qk, col_v, col_tp, c_first, c_own, c_ck, n_hv, i_seg,
     i_seg_state) = _segment_rows(pid, cu_seqlens, seq_order, T_in, P, L, W, L0, H, HV, K, V, BT, BV,
                                  IS_VARLEN, LONGEST_FIRST, SPLIT)
    if CHOSEN:
        if gl.load(seg_heads + i_nh) == 0:
            return
    if SPLIT == 1:
        if i_p == 0:
            return                     # segment 0 starts from h0 without a warm-up

    # [BV, K] tiles (S^T) and [BV, BT] tiles ((k S)^T, (q S)^T, Z^T, U^T, o^T) in the accumulator's
    # layouts; the left operands of products over BT (a_t) and over K (a_s) in the same registers.
    acc_s: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1],
                                                     instr_shape=[16, K, 16])
    acc_t: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1],
                                                     instr_shape=[16, BT, 16])
    a_t: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_t, k_width=2)
    a_s: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_s, k_width=2)
    col_l: gl.constexpr = gl.SliceLayout(1, acc_t)      # [BV]: one entry a value column (a row here)
    tok_l: gl.constexpr = gl.SliceLayout(0, acc_t)      # [BT]: one entry a token of the chunk
    scol_l: gl.constexpr = gl.SliceLayout(1, acc_s)
    key_l: gl.constexpr = gl.SliceLayout(0, acc_s)      # [K]
    out_l: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [WARPS, 1], [1, 0])   # 16-byte row pieces

    d_q, d_k, d_v, d_t, d_p = walk_descriptors(d_q, d_k, d_v, d_t, d_p, rows, H, HV, K, V, BT, BV, DESCS_IN_KERNEL)
    if DESCS_IN_KERNEL:
        d_o = _tile_descriptor(d_o, rows, HV * V, BT, BV)
    k_s, q_s, t_s, v_s, p_s, k_bars, qt_bars, v_bars, p_bars = _rings(d_q, d_k, d_v, d_t, d_p, STAGES, KS, BT, K, BV)
    o_s = gl.allocate_shared_memory(d_o.dtype, [BT, BV], d_o.layout)
    low_s = gl.allocate_shared_memory(d_t.dtype, [BT, BT], d_t.layout)      # (walk_gluon.low_parts' tile)

    # The state at the start: S^T of h0's [K, V] block (its columns o_v as rows), each row scaled.
    o_k = gl.arange(0, K, layout=key_l)
    o_vs = i_v * BV + gl.arange(0, BV, layout=scol_l)
    i_state = i_nh.to(gl.int64) * K * V
    redo = c_first < 0                 # (SPLIT 4: whether the segment is walked again)
    if SPLIT == 4:
        # The posterior check of segment p >= 1's warm-up, once segment p - 1 is final (its flag): what
        # the true state before the warm-up adds at the segment's start is, column j, at most
        # e^(G_win) |S*_j| (S* that state, whose column norms segment p - 1 stored at its checkpoint),
        # which must be at most 2^-30 of the column's largest entry there (with a margin of 4 for
        # those norms' rounding and the fp16 keys' norms: split_walk's module docstring), with every
        # beta of the warm-ups in [0, 2] (seg_heads). Else the segment is walked again from segment
        # p - 1's final state; its warm-up is not, and nothing is where the check holds.
        if c_first > 0:
            wait_group(seg_flags, 0, i_seg - n_hv * (V // BV), 0, 1, 1, 1)
            p_stats = seg_bound + (i_p * n_hv + i_nh).to(gl.int64) * (3 * V)
            p_prev = p_stats - n_hv.to(gl.int64) * (3 * V)        # segment p - 1's, one segment's records back
            b_e = gl.load(p_stats + 2 * V + o_vs) * gl.load(p_prev + o_vs)
            fails = gl.sum((~(b_e <= gl.load(p_stats + V + o_vs) * 9.313225746154785e-10)).to(gl.int32), 0)
            redo = (fails > 0) | (gl.load(seg_heads + i_nh) == 0)
        row_base = row_base + c_own * BT
        T = T - c_own * BT
        NT = gl.where(redo, NT - c_own, 0)
        c_ck = gl.where(redo, c_ck - c_own, 0)
        c_own = 0
        b_S, b_sig = _state_t(seg_pub + (i_seg_state - n_hv.to(gl.int64) * K * V), o_k, o_vs, V, redo, True)
    elif HAS_H0 and SPLIT != 2:
        # (SPLIT 1 and 3: a warm-up from the sequence's start starts from h0, the others from zeros.)
        b_S, b_sig = _state_t(h0 + i_state, o_k, o_vs, V, c_first == 0, SPLIT % 2 == 1)
    else:
        b_S = gl.zeros([BV, K], gl.float32, acc_s)
        b_sig = gl.full([BV], 1.0, gl.float32, scol_l)
    o_t = gl.arange(0, BT, layout=tok_l)
    b_zero = gl.zeros([BV, BT], gl.float32, acc_t)

    p_count = first_fills(done, i_n, i_hv, NT, c_first // GROUP, gl.cdiv(NT_all, GROUP), row_base, d_q, d_k, d_v,
                          d_t, d_p, col_qk, col_v, col_tp, k_s, q_s, t_s, v_s, p_s, k_bars, qt_bars, v_bars, p_bars, H,
                          HV, BT, STAGES, KS, WAIT, GROUP)
    if SPLIT == 2:
        # (After the rings' first fills, which need no state.) Segment 0 from h0, the others from their
        # warm-up's state if certified (or exact), else from the segment before's final state once it
        # is published.
        if HAS_H0:
            p_start = h0 + i_state
            live = i_p >= 0
        else:
            p_start = seg_warm                 # (not read: segment 0 starts from zeros)
            live = i_p > 0
        if i_p > 0:
            if gl.load(seg_ok + i_seg) > 0:
                p_start = seg_warm + i_seg_state
            else:                              # segment i_p - 1's, one segment's entries back
                wait_group(seg_flags, 0, i_seg - n_hv * (V // BV), 0, 1, 1, 1)
                p_start = seg_pub + (i_seg_state - n_hv.to(gl.int64) * K * V)
        b_S, b_sig = _state_t(p_start, o_k, o_vs, V, live, True)
    b_G_next, b_G_last_next, b_G0_next, _ = _chunk_decays(Gc, row_base, 0, T, i_hv, HV, BT, o_t, True, rows, G_BY_HEAD,
                                                          t_low)
    b_Gsum0 = gl.zeros([], gl.float32)                # _chunks' running sum of log-decays starts at 0
    if SPLIT >= 3:
        if SPLIT == 3:
            # The warm-up (no outputs), then the segment's start for the check (each column's largest
            # entry, and 4 e^(G_win)), stored: nothing of it held through the walk.
            b_S, b_sig, b_G_next, b_G_last_next, b_G0_next, b_Gwin = _chunks(
                0, c_own, NT, T, row_base, b_S, b_sig, b_G_next, b_G_last_next, b_G0_next, b_Gsum0,
                p_count, Gc, i_hv, o_t, b_zero, scale, d_q, d_k, d_v, d_t, d_p, d_o, col_qk, col_v, col_tp, k_s, q_s,
                t_s, v_s, p_s, o_s, k_bars, qt_bars, v_bars, p_bars, H, HV, BT, STAGES, KS, WAIT, GROUP, MASK_ROWS,
                False, acc_t, a_t, a_s, col_l, scol_l, g_rows=rows, G_BY_HEAD=G_BY_HEAD, t_low=t_low, beta=beta,
                low_s=low_s)
            p_stats = seg_bound + (i_p * n_hv + i_nh).to(gl.int64) * (3 * V)
            gl.store(p_stats + V + o_vs, _row_max(b_S) * (1.0 / b_sig))
            gl.store(p_stats + 2 * V + o_vs, gl.full([BV], 4.0, gl.float32, scol_l) * gl.exp2(b_Gwin * _LOG2E))
        # The segment, with its column norms at the checkpoint (for the next segment's check; the last
        # segment's are never read).
        b_S, b_sig, b_G_next, b_G_last_next, b_G0_next, b_Gsum = _chunks(
            c_own, NT, NT, T, row_base, b_S, b_sig, b_G_next, b_G_last_next, b_G0_next, b_Gsum0,
            p_count, Gc, i_hv, o_t, b_zero, scale, d_q, d_k, d_v, d_t, d_p, d_o, col_qk, col_v, col_tp, k_s, q_s,
            t_s, v_s, p_s, o_s, k_bars, qt_bars, v_bars, p_bars, H, HV, BT, STAGES, KS, WAIT, GROUP, MASK_ROWS,
            True, acc_t, a_t, a_s, col_l, scol_l, True, c_ck, redo | (SPLIT == 3), seg_bound, cu_seqlens, seq_order,
            T_in, P, L, W, L0, K, V, BV, IS_VARLEN, LONGEST_FIRST, rows, G_BY_HEAD, t_low, beta, low_s)
    else:
        b_S, b_sig, b_G_next, b_G_last_next, b_G0_next, b_Gsum = _chunks(
            0, NT, NT, T, row_base, b_S, b_sig, b_G_next, b_G_last_next, b_G0_next, b_Gsum0,
            p_count, Gc, i_hv, o_t, b_zero, scale, d_q, d_k, d_v, d_t, d_p, d_o, col_qk, col_v, col_tp, k_s, q_s,
            t_s, v_s, p_s, o_s, k_bars, qt_bars, v_bars, p_bars, H, HV, BT, STAGES, KS, WAIT, GROUP, MASK_ROWS,
            OUT, acc_t, a_t, a_s, col_l, scol_l, g_rows=rows, G_BY_HEAD=G_BY_HEAD, t_low=t_low, beta=beta, low_s=low_s)

    tma.store_wait(0)
    if MASK_ROWS:
        if T % BT != 0:                            # the last chunk's tile, still in o_s
            b_out = o_s.load(out_l)
            r_o = (NT - 1) * BT + gl.arange(0, BT, layout=gl.SliceLayout(1, out_l))
            c_o = gl.arange(0, BV, layout=gl.SliceLayout(0, out_l))
            p_o = o + (row_base + r_o).to(gl.int64)[:, None] * (HV * V) + (col_v + c_o)[None, :]
            gl.store(p_o, b_out, mask=(r_o < T)[:, None])
    _invalidate(k_bars, qt_bars, v_bars, p_bars, STAGES, KS)
    b_S = b_S * (1.0 / b_sig)[:, None]
    if SPLIT >= 3:
        # The program's place read again (nothing of it kept through the walk). SPLIT 4 walked chunks
        # only where it walks the segment again (every segment has some).
        redo = NT > 0
        (i_p, i_v, i_n, i_nh, i_hv, row_base, T, NT, NT_all, col_qk, col_v, col_tp, c_first, c_own, c_ck, n_hv,
         i_seg, i_seg_state) = _segment_rows(fresh_program_id(), cu_seqlens, seq_order, T_in, P, L, W, L0, H, HV,
                                             K, V, BT, BV, IS_VARLEN, LONGEST_FIRST, SPLIT)
        o_vs = i_v * BV + gl.arange(0, BV, layout=scol_l)
        i_state = i_nh.to(gl.int64) * K * V
    o_state = o_k[None, :] * V + o_vs[:, None]
    if SPLIT == 3:
        gl.store(seg_pub + i_seg_state + o_state, b_S)        # every segment's, for the check (SPLIT 4)
        return
    if SPLIT == 1:
        # The certificate: a column's largest entry is at most its 2-norm, so this is stricter than
        # 2^-30 of the norm; a NaN or infinite bound fails it.
        b_err = gl.load(seg_bound + i_p * n_hv + i_nh)
        certified = b_err <= gl.min(_row_max(b_S), 0) * 9.313225746154785e-10           # 2^-30
        gl.store(seg_warm + i_seg_state + o_state, b_S)
        gl.store(seg_ok + i_seg, gl.where(c_first == 0, 2, certified.to(gl.int32)))
    elif SPLIT >= 2:
        if SPLIT == 4:
            if redo:
                gl.store(seg_pub + i_seg_state + o_state, b_S)
            gl.store(seg_ok + i_seg, gl.where(c_first == 0, 2, gl.where(redo, 0, 1)))
        if i_p < P - 1:
            # The segment's final state for the next one (SPLIT 4: and its checkpoint, if walked
            # again), then its flag: every thread's stores, then a release at GPU scope (bar.sync
            # first: wy_kernel's SIGNAL pattern).
            if SPLIT == 2:
                gl.store(seg_pub + i_seg_state + o_state, b_S)
            gl.thread_barrier()
            gl.atomic_add(seg_flags + i_seg, 1, sem="release")
        elif STORE_FINAL:
            if SPLIT == 4:
                if redo == 0:
                    b_S = gl.load(seg_pub + i_seg_state + o_state)
            gl.store(ht + i_state + o_state, b_S)
    elif STORE_FINAL:
        gl.store(ht + i_state + o_state, b_S)

def walk_gluon_t(qn, kn, v, tb, attn, Gc, t_low, beta, o, h0, ht, scale, H, HV, BT, BV, stages, cu_seqlens=None,
                 seq_order=None, done=None, group=1, split=None, split_heads=None, descs=None, one_launch=False,
                 descs_in_kernel=False, decays_by_head=False):
    """Launch walk_t_kernel; tensors and arguments as walk_gluon.walk_gluon's (one warpgroup a program,
    no register cap: two programs an SM at one stage). split: None, or a split_walk.Split for the
    certified split, on dense sequences whose chunks read no other sequence's rows: the bounds' check
    (Split.L0 = 0: its warm-up, then its segments, SPLIT 1 and 2) after the WY pass, or beside it with
    done (the WY pass's FEED order); the posterior check (L0 > 0: the walk, then the check, SPLIT 3
    and 4: two launches, or with one_launch one, walk_t_kernel's SPLIT 5) after it.
    split_heads [N x HV] int32 or None: only the heads it marks nonzero (walk_t_kernel's CHOSEN; with
    the posterior check they stand for Split.trusted too); descs: walk_gluon's
    shared_descriptors of these tensors, or None (made here); descs_in_kernel: the kernel makes its
    descriptors, o's too (walk_gluon.walk_launch), without a split only; decays_by_head: Gc is
    [HV, B x T] (walk_gluon.walk_gluon's). The launcher
    (gdn.ops.triton.forward) checks the shapes first; the checks here guard direct calls."""
    B, T, _, K = qn.shape
    V = v.shape[-1]
    if BT != 64 or BV != 64 or K not in (64, 128) or V % BV:
        raise ValueError(f"walk='gluon_t' needs chunk_size 64, block_v 64, K of 64 or 128 and V a multiple of 64, "
                         f"got {BT}, {BV}, {K}, {V}")
    # The split's walk keeps the host's descriptors: made in the kernel, their six addresses take
    # registers through the walk, at 255 with the split's state (compiled: 8-11 local loads and stores
    # a chunk, against none or 3); the unsplit walk compiles without a spill either way.
    descs_in_kernel = descs_in_kernel and split is None
    N, args, flags = walk_launch(qn, kn, v, tb, attn, Gc, t_low, beta, o, h0, ht, cu_seqlens, seq_order, BT, BV, done,
                                 "gluon_t",
                                 descs, descs_in_kernel)
    if split is not None and (flags["MASK_ROWS"] or flags["IS_VARLEN"]):
        raise ValueError("the certified split (split_walk) takes dense sequences whose chunks read no other "
                         "sequence's rows (B = 1 or T a multiple of the chunk)")
    if split_heads is not None and split is None:
        raise ValueError("split_heads (the heads the split walks) needs split")
    posterior = split is not None and split.L0 > 0
    if posterior and (done is not None or split.trusted is None):
        raise ValueError("the posterior check (Split.L0 > 0) runs after the WY pass (no done) and needs "
                         "Split.trusted")
    if split is None:
        P, L, W, L0, segs, phases = 1, 0, 0, 0, (o,) * 5, (0,)
    else:
        P, L, W, L0 = split.P, split.L, split.W, split.L0
        segs = split.buffers
        phases = ((5,) if one_launch else (3, 4)) if posterior else (1, 2)
    heads = split_heads if split_heads is not None else split.trusted if posterior else o
    d_o = o if descs_in_kernel else _rows(o, [BT, BV])
    for phase in phases:
        launch(walk_t_kernel, (P * (V // BV) * N * HV,),
            *args[:5], d_o, *args[5:], o if done is None else done, *segs, heads,
            scale, T, P, L, W, L0, B * T, H=H, HV=HV, K=K, V=V, BT=BT, BV=BV, STAGES=stages, WAIT=done is not None,
            GROUP=group, SPLIT=phase, CHOSEN=split_heads is not None, G_BY_HEAD=decays_by_head,
            **flags, num_warps=4)

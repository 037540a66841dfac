"""The fp16 state walk (gdn.ops.triton.walk_f16's chunk) in Gluon, with asynchronous matrix products.

The default at B = 1 from 256 chunks on, beside the WY pass (``walk=None`` in
gdn.ops.triton.forward; ``walk="gluon"`` asks for it; benchmarks/NOTES.md v17-v20: 3-4% faster there
than the Triton walk on an H200 from 16k tokens on, waiting on the WY pass's counts: WAIT; after it,
in one piece, 8% slower). It was the default at the wide shapes too (22-23% faster than the Triton
walk there, 17% on packed sequences) until walk_gluon_t, the same walk on the transposed state, took
them (v22: 11-14% faster again).
Triton waits for every ``tl.dot`` of the walk's loop right after issuing it, five waits a chunk in
series. Gluon issues warpgroup MMAs asynchronously and waits for a given number of them, so here
only three products sit on the chain that carries the state, and the outputs' two ride beside it:

    k S  ||  q S            (both read the state's fp16 copy; wait for k S only)
    Z = v tau - e^G k S;  U = T diag(beta) Z                      (wait: U, and q S with it)
    o = e^G q S + P U  ||  S <- e^{G_C} S + k^T (e^{G_C - G} U)   (wait: o, store it; then S)

The numbers are walk_f16's: the same products on the same fp16 operands, scaled by the same powers
of two (its module docstring), so the outputs and the state should equal the Triton walk's up to the
order of the matrix units' sums. The tiles come by TMA through descriptors over [tokens, heads x
dim] (made on the host, or in the kernel: walk_descriptors="kernel"), each kind in its own ring,
refilled as soon as a chunk is done with that kind (so at one stage too every tile comes about a
chunk ahead: v18). A sequence's last chunk may read rows of
the next (packed sequences, or dense ones whose T is not a multiple of the chunk): those rows are
made harmless in registers (walk_gluon_kernel's MASK_ROWS). One segment; the WY pass runs first, or
beside it with the walk waiting on its counts (dense batches whose chunks read no other sequence's
rows).
"""
from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from .addressing import decay_ptrs
from .chunk_fwd import wait_group
from .decay import exp_ftz
from .launch import ensure_allocator, launch
from .split_dot import tile_max
from .walk_f16 import log2_pow2, pow2_below_inverse, pow2_of, state_bound, z_scale
from .wy import counting_head

_LOG2E = gl.constexpr(1.4426950408889634)        # e^x = 2^(x log2 e)


@gluon.jit
def _issue(c, NT, bars, DEPTH: gl.constexpr, row_base, BT: gl.constexpr, d_a, col_a, a_s, d_b=None, col_b=0,
           b_s=None):
    """TMA loads of chunk c's tile of d_a at column col_a (and of d_b at col_b: a tile used beside it)
    into slot c % DEPTH of their rings a_s (b_s), counted on that slot's barrier; nothing past the
    last chunk. The slot's last reader, chunk c - DEPTH, is done with it in every thread (the barrier:
    products waited for, register loads used)."""
    gl.thread_barrier()
    if c < NT:
        slot = c % DEPTH
        bar = bars.index(slot)
        row = row_base + c * BT
        if d_b is None:
            mbarrier.expect(bar, d_a.block_type.nbytes)
        else:
            mbarrier.expect(bar, d_a.block_type.nbytes + d_b.block_type.nbytes)
            tma.async_copy_global_to_shared(d_b, [row, col_b], bar, b_s.index(slot))
        tma.async_copy_global_to_shared(d_a, [row, col_a], bar, a_s.index(slot))


@gluon.jit
def _barriers(DEPTH: gl.constexpr):
    """One initialised mbarrier for each of a ring's DEPTH slots."""
    bars = gl.allocate_shared_memory(gl.int64, [DEPTH, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(DEPTH):
        mbarrier.init(bars.index(i), count=1)
    return bars


@gluon.jit
def _rings(d_q, d_k, d_v, d_t, d_p, STAGES: gl.constexpr, KS: gl.constexpr, BT: gl.constexpr, K: gl.constexpr,
           BV: gl.constexpr):
    """The tiles' rings in shared memory (each in its descriptor's layout) and their barriers: KS slots
    of k, STAGES of q, T (beside q, on qt_bars), v and P. Returns k_s, q_s, t_s, v_s, p_s, k_bars,
    qt_bars, v_bars, p_bars."""
    k_s = gl.allocate_shared_memory(d_k.dtype, [KS, BT, K], d_k.layout)
    q_s = gl.allocate_shared_memory(d_q.dtype, [STAGES, BT, K], d_q.layout)
    t_s = gl.allocate_shared_memory(d_t.dtype, [STAGES, BT, BT], d_t.layout)
    v_s = gl.allocate_shared_memory(d_v.dtype, [STAGES, BT, BV], d_v.layout)
    p_s = gl.allocate_shared_memory(d_p.dtype, [STAGES, BT, BT], d_p.layout)
    return k_s, q_s, t_s, v_s, p_s, _barriers(KS), _barriers(STAGES), _barriers(STAGES), _barriers(STAGES)


@gluon.jit
def _tile_descriptor(x, rows, WIDTH: gl.constexpr, BR: gl.constexpr, BC: gl.constexpr):
    """A TMA descriptor made in the kernel: x as [rows, WIDTH] (rows of a [B, T, heads, dim] tensor
    in its token rows) in [BR, BC] tiles, as _rows makes it on the host."""
    layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BR, BC], x.dtype.element_ty)
    return tma.make_tensor_descriptor(x, [rows, WIDTH], [WIDTH, 1], [BR, BC], layout)


@gluon.jit
def walk_descriptors(d_q, d_k, d_v, d_t, d_p, rows, H: gl.constexpr, HV: gl.constexpr, K: gl.constexpr,
                     V: gl.constexpr, BT: gl.constexpr, BV: gl.constexpr, IN_KERNEL: gl.constexpr):
    """The walk's descriptors of q, k ([BT, K] tiles), v ([BT, BV]), T and P ([BT, BT]): as given
    (host descriptors), or with IN_KERNEL made here from the tensors given in their place (rows: the
    tensors' token rows). Made in the kernel, a launch passes the launcher pointers only: no host
    descriptor, and no descriptor encoded on the host at each launch."""
    if IN_KERNEL:
        return (_tile_descriptor(d_q, rows, H * K, BT, K), _tile_descriptor(d_k, rows, H * K, BT, K),
                _tile_descriptor(d_v, rows, HV * V, BT, BV), _tile_descriptor(d_t, rows, HV * BT, BT, BT),
                _tile_descriptor(d_p, rows, HV * BT, BT, BT))
    else:
        return d_q, d_k, d_v, d_t, d_p


@gluon.jit
def initial_state(h0, i_v, i_nh, K: gl.constexpr, V: gl.constexpr, BT: gl.constexpr, BV: gl.constexpr,
                  HAS_H0: gl.constexpr, rows_l: gl.constexpr, cols_l: gl.constexpr):
    """The program's offsets (o_k [K] and o_t [BT] along rows_l, its columns o_v [BV] along cols_l, its
    state's i_state in h0 and ht) and the walk's state at the start, sigma S_0 [K, BV] fp32 with sigma
    (walk_f16: the walk holds sigma S): from h0, or zeros and 1. Returns o_k, o_v, o_t, i_state,
    b_S, b_sig."""
    o_k = gl.arange(0, K, layout=rows_l)
    o_v = i_v * BV + gl.arange(0, BV, layout=cols_l)
    o_t = gl.arange(0, BT, layout=rows_l)
    i_state = i_nh.to(gl.int64) * K * V
    if HAS_H0:
        b_S = gl.load(h0 + i_state + o_k[:, None] * V + o_v[None, :])
        b_sig = pow2_below_inverse(tile_max(b_S))
        b_S = b_S * b_sig
    else:
        b_S = (o_k[:, None] + o_v[None, :]).to(gl.float32) * 0.0
        b_sig = gl.full([], 1.0, gl.float32)
    return o_k, o_v, o_t, i_state, b_S, b_sig


@gluon.jit
def _invalidate(k_bars, qt_bars, v_bars, p_bars, STAGES: gl.constexpr, KS: gl.constexpr):
    """The rings' barriers invalidated at the walk's end: KS slots of k, STAGES of the others."""
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(qt_bars.index(i))
        mbarrier.invalidate(v_bars.index(i))
        mbarrier.invalidate(p_bars.index(i))
    for i in gl.static_range(KS):
        mbarrier.invalidate(k_bars.index(i))


@gluon.jit
def ring_slot(c, DEPTH: gl.constexpr, T):
    """Chunk c's slot in a ring of DEPTH slots, c % DEPTH, in a walk over T >= 0 tokens. With one slot
    that is 0, formed anyway from c each chunk (c & (T >> 31): zero for T >= 0, which the compiler
    cannot know): a constant slot lets LLVM hoist the ring's shared-memory descriptors out of the
    chunks' loop, and in walk_t_kernel's split ptxas then kept them in vector registers and moved
    them back to uniform ones before every product (~60 instructions a chunk, and a spill at 255
    registers: benchmarks/NOTES.md v42)."""
    if DEPTH == 1:
        return c & (T >> 31)
    return c % DEPTH


@gluon.jit
def _wait(bars, c, DEPTH: gl.constexpr):
    """Wait for chunk c's tiles in slot c % DEPTH of a ring (its (c // DEPTH)-th fill)."""
    mbarrier.wait(bars.index(c % DEPTH), (c // DEPTH) & 1)


@gluon.jit
def low_parts(x_s, low_s, beta, row0, i_hv, n_rows, HV: gl.constexpr, TRANSPOSED: gl.constexpr, BT: gl.constexpr,
              WARPS: gl.constexpr):
    """Where the WY pass flagged a chunk (its t_low: T diag(beta)'s low parts ride in the tile's strictly
    upper triangle, chunk_io.store_t_f16): walk_f16.low_part_fix's C [BT, BT] from the tile in x_s and
    the chunk's beta (token rows row0 .. row0 + n_rows - 1 of beta [tokens, HV] fp32), into low_s (the
    tile's layout, or x_s itself once the tile's own product is done, as in walk_gluon; C^T with
    TRANSPOSED, the right operand of walk_gluon_t's U^T = Z^T (X^T + C^T)), ready for the matrix
    units. The walks then add C Z to the product with the tile (rare: beta past 1 on near-parallel
    keys), before the tile's slot is refilled."""
    blk: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [WARPS, 1], [1, 0])
    b_x = x_s.load(blk)
    b_xt = x_s.permute((1, 0)).load(blk)
    o_r = gl.arange(0, BT, layout=gl.SliceLayout(1, blk))
    r = o_r[:, None]
    c = gl.arange(0, BT, layout=gl.SliceLayout(0, blk))[None, :]
    b_beta = gl.load(beta + (row0 + o_r) * HV + i_hv, mask=o_r < n_rows, other=0.0)
    b_d = b_beta - gl.sum(gl.where(r == c, b_x.to(gl.float32), 0.0), axis=1)
    if TRANSPOSED:
        b_c = gl.where(r < c, b_x, -b_xt)
    else:
        b_c = gl.where(r > c, b_xt, -b_x)
    gl.thread_barrier()             # (low_s may be x_s itself: every thread's reads before any write)
    low_s.store(gl.where(r == c, b_d[:, None].to(x_s.dtype), b_c))
    fence_async_shared()
    gl.thread_barrier()


@gluon.jit
def first_fills(done, i_n, i_hv, NT, g_first, n_groups, row_base, d_q, d_k, d_v, d_t, d_p, col_qk, col_v, col_tp,
                k_s, q_s, t_s, v_s, p_s, k_bars, qt_bars, v_bars, p_bars, H: gl.constexpr, HV: gl.constexpr,
                BT: gl.constexpr, STAGES: gl.constexpr, KS: gl.constexpr, WAIT: gl.constexpr, GROUP: gl.constexpr):
    """The rings' first fills (chunks 0 .. STAGES - 1 of every kind), with WAIT once the WY pass has
    counted their groups done (done [N, n_groups, HV], at value head i_hv's q/k head's first value
    head: wy_kernel's SIGNAL). The walk's chunks start at the sequence's group g_first (a split
    segment's; else 0), on a group's boundary, and its last group is the sequence's last or a whole
    one. Returns p_count, this walk's first count, for next_k (one pointer kept through the loop)."""
    i_count = counting_head(i_hv, H, HV, True)
    p_count = done + (i_n * n_groups + g_first) * HV + i_count
    if WAIT:
        for j in gl.static_range(0, STAGES, GROUP):
            if j < NT:
                wait_group(p_count, 0, 0, j, NT, HV, GROUP, HV // H)
    for c in gl.static_range(STAGES):
        _issue(c, NT, k_bars, KS, row_base, BT, d_k, col_qk, k_s)
        _issue(c, NT, qt_bars, STAGES, row_base, BT, d_q, col_qk, q_s, d_t, col_tp, t_s)
        _issue(c, NT, v_bars, STAGES, row_base, BT, d_v, col_v, v_s)
        _issue(c, NT, p_bars, STAGES, row_base, BT, d_p, col_tp, p_s)
    return p_count


@gluon.jit
def next_k(c, p_count, NT, row_base, d_k, col_qk, k_s, k_bars, H: gl.constexpr, HV: gl.constexpr, BT: gl.constexpr,
           STAGES: gl.constexpr, KS: gl.constexpr, WAIT: gl.constexpr, GROUP: gl.constexpr):
    """At chunk c's start: k of chunk c + STAGES into the slot chunk c - 1 used (its state update was
    waited for), after its group's count with WAIT (p_count: first_fills'; its other tiles follow in
    the chunk, its decays a chunk later)."""
    if WAIT:
        if ((c + STAGES) % GROUP == 0) & (c + STAGES < NT):
            wait_group(p_count, 0, 0, c + STAGES, NT, HV, GROUP, HV // H)
    _issue(c + STAGES, NT, k_bars, KS, row_base, BT, d_k, col_qk, k_s)


@gluon.jit
def _chunk_decays(Gc, row_base, t0, T, i_hv, HV: gl.constexpr, BT: gl.constexpr, o_t, TOKENS: gl.constexpr = False,
                  g_rows=0, BY_HEAD: gl.constexpr = False, t_low=None):
    """The cumulative log-decays G [BT] of the chunk from token t0 (rows past T take G_last), its last
    token's G_last and its first's G_0; zeros for a chunk past the end (the loads ahead of the last).
    G comes in o_t's layout, where each thread holds the tokens of its accumulator columns (16 of them
    in walk_gluon_t: 16 loads, each with its 64-bit address). TOKENS: G in a layout of one token a
    thread instead (one load each; with four warps over BT = 64 tokens, warps 2-3 hold warps 0-1's
    tokens again), for walk_gluon_t, which forms the decays there and moves them to the columns
    (NOTES.md v33, v36). BY_HEAD: Gc is [HV, g_rows] (addressing.decay_ptrs), so the chunk's values
    are BT x 4 contiguous bytes rather than one cache line a token. Fourth, the chunk's flag from
    t_low (int32, G's layout, the same offset; 0 past the end): the WY pass's, whether its T diag(beta)
    tile carries its low parts."""
    row0 = (row_base + t0).to(gl.int64)
    live = t0 < T
    # Token row0 + j of head i_hv at base + (first + j) * STRIDE + head.
    if BY_HEAD:
        off, first, head = decay_ptrs(0, row0, 0, i_hv, HV, g_rows, True), 0, 0
        STRIDE: gl.constexpr = 1
    else:
        off, first, head = 0, row0, i_hv
        STRIDE: gl.constexpr = HV
    base = Gc + off
    b_G_last = gl.load(base + (first + gl.maximum(gl.minimum(BT, T - t0), 1) - 1) * STRIDE + head, mask=live,
                       other=0.0)
    if TOKENS:
        o_tok = gl.arange(0, BT, layout=gl.BlockedLayout([1], [32], [gl.num_warps()], [0]))
        m_tok = (t0 + o_tok) < T
        b_G = gl.where(m_tok, gl.load(base + (first + o_tok) * STRIDE + head, mask=m_tok, other=0.0), b_G_last)
    else:
        m_t = (t0 + o_t) < T
        b_G = gl.where(m_t, gl.load(base + (first + o_t) * STRIDE + head, mask=m_t, other=0.0), b_G_last)
    b_G0 = gl.load(base + first * STRIDE + head, mask=live, other=0.0)
    b_low = gl.load(t_low + off + first * STRIDE + head, mask=live, other=0)
    return b_G, b_G_last, b_G0, b_low


@gluon.jit
def values_and_scales(v_s, v_bars, c, STAGES: gl.constexpr, acc_l: gl.constexpr, MASK_ROWS: gl.constexpr, m_t,
                      b_mS, b_G, b_G0, b_sig):
    """Chunk c's values from their ring (v_s, v_bars; rows past the end zeroed with MASK_ROWS) in fp32
    [BT, BV] of layout acc_l, and the chunk's scales (walk_f16): tau, log2(tau / sigma) and
    e^G tau / sigma [BT], from the state's largest entry b_mS and the decays b_G, b_G0."""
    _wait(v_bars, c, STAGES)
    b_v = v_s.index(c % STAGES).load(acc_l).to(gl.float32)
    if MASK_ROWS:
        b_v = gl.where(m_t[:, None], b_v, 0.0)
    b_tau = z_scale(b_v, b_mS, b_G0)
    b_ld = log2_pow2(b_tau) - log2_pow2(b_sig)
    return b_v, b_tau, b_ld, gl.exp2(b_G * _LOG2E + b_ld)


@gluon.jit
def program_rows(pid, cu_seqlens, seq_order, T, HV: gl.constexpr, H: gl.constexpr, K: gl.constexpr,
                 V: gl.constexpr, BT: gl.constexpr, BV: gl.constexpr, IS_VARLEN: gl.constexpr,
                 LONGEST_FIRST: gl.constexpr):
    """This program's (sequence, value head, BV columns) from its id pid (grid V / BV x N x HV): i_v, i_n,
    i_nh = i_n HV + i_hv, i_hv, the sequence's first token row, its length T and chunks NT, and the
    tiles' columns in the descriptors' [tokens, heads x dim]: col_qk (q, k: its q/k head's), col_v
    (v), col_tp (T and P)."""
    NV: gl.constexpr = V // BV
    i_v = pid % NV
    i_nh = pid // NV
    i_n = i_nh // HV
    i_hv = i_nh % HV
    i_h = i_hv // (HV // H)
    if IS_VARLEN:
        if LONGEST_FIRST:
            # Longest sequences first: programs start in launch order, and a long walk started in the
            # last wave would end the kernel alone.
            i_n = gl.load(seq_order + i_n)
            i_nh = i_n * HV + i_hv
        row_base = gl.load(cu_seqlens + i_n).to(gl.int32)     # TMA's coordinates are 32-bit
        T = gl.load(cu_seqlens + i_n + 1).to(gl.int32) - row_base      # this sequence's length from here on
    else:
        row_base = i_n * T
    return i_v, i_n, i_nh, i_hv, row_base, T, gl.cdiv(T, BT), i_h * K, i_hv * V + i_v * BV, i_hv * BT


@gluon.jit
def walk_gluon_kernel(d_q, d_k, d_v, d_t, d_p, Gc, t_low, beta, o, h0, ht, cu_seqlens, seq_order, done, skip,
                      scale, T, rows,
                      H: gl.constexpr, HV: gl.constexpr, K: gl.constexpr, V: gl.constexpr,
                      BT: gl.constexpr, BV: gl.constexpr, STAGES: gl.constexpr,
                      HAS_H0: gl.constexpr, STORE_FINAL: gl.constexpr, IS_VARLEN: gl.constexpr,
                      LONGEST_FIRST: gl.constexpr, MASK_ROWS: gl.constexpr, WAIT: gl.constexpr,
                      GROUP: gl.constexpr, SKIP: gl.constexpr, DESCS_IN_KERNEL: gl.constexpr,
                      num_warps: gl.constexpr, G_BY_HEAD: gl.constexpr = False):
    """One program walks all chunks of one (sequence, value head, BV state columns).
    d_q, d_k: descriptors of the WY pass's fp16 q, k [tokens, H x K] (l2-normalised with l2norm), blocks [BT, K]; d_v: v
    [tokens, HV x V], blocks [BT, BV]; d_t, d_p: T diag(beta) and P, fp16 [tokens, HV x BT], blocks [BT,
    BT] (wy_kernel's F16 stores). Gc [tokens, HV] fp32 (the cumulative log-decays; G_BY_HEAD: [HV,
    rows], addressing.decay_ptrs); t_low int32 in Gc's layout, at each chunk's first row: 1 where its
    T diag(beta) tile carries its low parts (low_parts, which reads beta [tokens, HV] fp32 there); o
    [tokens, HV, V] in v's dtype; h0, ht [N x HV, K, V] fp32 (HAS_H0, STORE_FINAL). Tokens: B x T,
    sequence n from token n T; IS_VARLEN: packed, sequence n from cu_seqlens[n] to cu_seqlens[n + 1],
    and with LONGEST_FIRST program row n walks sequence seq_order[n]. Grid: (V / BV x N x HV,).
    DESCS_IN_KERNEL: d_q .. d_p are those tensors themselves, their descriptors made here (rows: B x
    T token rows; walk_descriptors).

    MASK_ROWS (varlen, or dense with T not a multiple of BT): a sequence's last chunk may read the
    next sequence's rows. Those rows of v and U are zeroed, and then nothing of them reaches this
    sequence: T diag(beta) and P are causal (each row's entries past it are zero), the state's update
    takes U's rows, and the outputs' rows past the end are not stored. (Rows past the tensor's end read
    as zeros.) k's rows there still enter k S and the state's update (times zeros), so they must be
    finite: written by the WY pass before this walk starts (the launcher takes no WAIT with MASK_ROWS).

    WAIT (dense, beside the WY pass: the launcher's overlap="flags"): before the first load of a
    group of GROUP chunks, spin until the WY pass has counted them all done (done [B, groups, HV],
    counted at each q/k head's first value head: wy_kernel's SIGNAL), as chunk_fwd's walk does.

    SKIP (dense; the automatic split, gdn.ops.triton.split_walk.forgetting_heads): a program whose
    head has skip [N x HV] int32 nonzero returns (the split walks that head): SKIP = 1 at once (the
    heads were marked before this launch), SKIP = 2 (with WAIT) once the WY pass has counted the
    head's first group of chunks, whose chunk-0 program marks the head before its count (wy_kernel's
    FORGET); read then at L2 (an atomic), after an acquire, as the WY pass's tiles are.

    Each kind of tile has its own ring of STAGES slots (k: STAGES + 1) and barriers, and chunk
    c + STAGES's tile is loaded as soon as chunk c is done with that kind, not at the next chunk's
    start: v once it is in registers, q and T after U and q S, P after o, k a chunk earlier (its own
    extra slot). So even at one stage every tile is loaded about a chunk ahead of its use."""
    KS: gl.constexpr = STAGES + 1
    i_v, i_n, i_nh, i_hv, row_base, T, NT, col_qk, col_v, col_tp = program_rows(
        gl.program_id(0), cu_seqlens, seq_order, T, HV, H, K, V, BT, BV, IS_VARLEN, LONGEST_FIRST)
    if SKIP == 2:
        gl.static_assert(WAIT, "SKIP = 2 waits on the WY pass's counts")
        wait_group(done, i_n, counting_head(i_hv, H, HV, True), 0, NT, HV, GROUP, HV // H)
        gl.thread_barrier()                # (every thread's read after the acquire)
        if gl.atomic_add(skip + i_nh, 0, sem="acquire") != 0:
            return
    elif SKIP:
        if gl.load(skip + i_nh) != 0:
            return

    d_q, d_k, d_v, d_t, d_p = walk_descriptors(d_q, d_k, d_v, d_t, d_p, rows, H, HV, K, V, BT, BV, DESCS_IN_KERNEL)

    # Every tile in the matrix units' accumulator layout: [BT, BV] for k S, q S, Z, U and o, [K, BV] for S.
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                     instr_shape=[16, BV, 16])
    rows_l: gl.constexpr = gl.SliceLayout(1, acc_l)
    cols_l: gl.constexpr = gl.SliceLayout(0, acc_l)
    k_s, q_s, t_s, v_s, p_s, k_bars, qt_bars, v_bars, p_bars = _rings(d_q, d_k, d_v, d_t, d_p, STAGES, KS, BT, K, BV)
    # The B operands formed here: the state's fp16 copy [K, BV], Z (then U in the same buffer: U = T Z
    # is waited for before U is stored) and e^{G_C - G} U [BT, BV].
    s_s = gl.allocate_shared_memory(gl.float16, [K, BV], gl.NVMMASharedLayout.get_default_for([K, BV], gl.float16))
    b_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BT, BV], gl.float16)
    zu_s = gl.allocate_shared_memory(gl.float16, [BT, BV], b_l)
    uc_s = gl.allocate_shared_memory(gl.float16, [BT, BV], b_l)

    o_k, o_v, o_t, i_state, b_S, b_sig = initial_state(h0, i_v, i_nh, K, V, BT, BV, HAS_H0, rows_l, cols_l)
    b_zero = gl.zeros([BT, BV], gl.float32, acc_l)

    p_count = first_fills(done, i_n, i_hv, NT, 0, gl.cdiv(NT, GROUP), row_base, d_q, d_k, d_v, d_t, d_p, col_qk,
                          col_v, col_tp, k_s, q_s, t_s, v_s, p_s, k_bars, qt_bars, v_bars, p_bars, H, HV, BT, STAGES,
                          KS, WAIT, GROUP)
    # The decays come a chunk ahead, in registers: a global load's latency at each chunk's start would
    # sit on the chain (the tiles come by TMA, a chunk or more ahead).
    b_G_next, b_G_last_next, b_G0_next, b_low_next = _chunk_decays(Gc, row_base, 0, T, i_hv, HV, BT, o_t, False, rows,
                                                                   G_BY_HEAD, t_low)
    for c in range(0, NT):
        next_k(c, p_count, NT, row_base, d_k, col_qk, k_s, k_bars, H, HV, BT, STAGES, KS, WAIT, GROUP)
        st = c % STAGES
        sk = c % KS
        row0 = (row_base + c * BT).to(gl.int64)
        m_t = (c * BT + o_t) < T
        b_G, b_G_last, b_G0, b_low = b_G_next, b_G_last_next, b_G0_next, b_low_next
        b_G_next, b_G_last_next, b_G0_next, b_low_next = _chunk_decays(Gc, row_base, (c + 1) * BT, T, i_hv, HV, BT, o_t,
                                                                       False, rows, G_BY_HEAD, t_low)

        s_s.store(b_S.to(gl.float16))
        fence_async_shared()
        _wait(k_bars, c, KS)
        b_kS = warpgroup_mma(k_s.index(sk), s_s, b_zero, use_acc=False, is_async=True)
        _wait(qt_bars, c, STAGES)
        b_qS = warpgroup_mma(q_s.index(st), s_s, b_zero, use_acc=False, is_async=True)
        # Beside the products: tau (Z's scale) from max |v| and the state's largest entry.
        b_mS = tile_max(b_S) * (1.0 / b_sig)
        b_v, b_tau, b_ld, b_eG = values_and_scales(v_s, v_bars, c, STAGES, acc_l, MASK_ROWS, m_t, b_mS, b_G, b_G0,
                                                   b_sig)
        b_kS = warpgroup_mma_wait(num_outstanding=1, deps=(b_kS,))          # q S may still run
        b_Z = b_v * b_tau - b_kS * b_eG[:, None]
        zu_s.store(b_Z.to(gl.float16))
        fence_async_shared()
        _issue(c + STAGES, NT, v_bars, STAGES, row_base, BT, d_v, col_v, v_s)      # v is in registers
        b_U = warpgroup_mma(t_s.index(st), zu_s, b_zero, use_acc=False, is_async=True)
        # (Waiting for U alone, with q S outstanding, crashes ptxas 12.8 here: both at once.)
        b_U, b_qS = warpgroup_mma_wait(num_outstanding=0, deps=(b_U, b_qS))
        if b_low != 0:
            # C in the tile's own slot (U's product is done; the slot's refill comes after): a tile of its
            # own, 8 KB more, left no room for a WY program beside this one on its SM (the WY pass then
            # ran on the few SMs the walk left free, 10x slower with long-memory gates: NOTES.md v68).
            low_parts(t_s.index(st), t_s.index(st), beta, row0, i_hv, T - c * BT, HV, False, BT, num_warps)
            b_U = warpgroup_mma(t_s.index(st), zu_s, b_U)
        _issue(c + STAGES, NT, qt_bars, STAGES, row_base, BT, d_q, col_qk, q_s, d_t, col_tp, t_s)
        if MASK_ROWS:
            b_U = gl.where(m_t[:, None], b_U, 0.0)
        b_Uc = b_U * exp_ftz(b_G_last - b_G)[:, None]
        b_sig_next = pow2_below_inverse(state_bound(b_G_last, b_mS, b_Uc, b_tau))
        zu_s.store(b_U.to(gl.float16))
        uc_s.store(b_Uc.to(gl.float16))
        fence_async_shared()
        p_o = o + (row0 * HV + i_hv) * V + (o_t[:, None] * (HV * V) + o_v[None, :])
        b_acc_o = b_qS * (scale * b_eG)[:, None]
        b_acc_S = b_S * gl.exp2(b_G_last * _LOG2E + b_ld)
        _wait(p_bars, c, STAGES)
        b_o = warpgroup_mma(p_s.index(st), zu_s, b_acc_o, is_async=True)
        b_Sn = warpgroup_mma(k_s.index(sk).permute((1, 0)), uc_s, b_acc_S, is_async=True)
        b_o = warpgroup_mma_wait(num_outstanding=1, deps=(b_o,))          # the state's update still runs
        _issue(c + STAGES, NT, p_bars, STAGES, row_base, BT, d_p, col_tp, p_s)
        gl.store(p_o, (b_o * (1.0 / b_tau)).to(o.dtype.element_ty), mask=m_t[:, None])
        b_S = warpgroup_mma_wait(num_outstanding=0, deps=(b_Sn,))
        b_S = b_S * pow2_of(log2_pow2(b_sig_next) - log2_pow2(b_tau))
        b_sig = b_sig_next

    _invalidate(k_bars, qt_bars, v_bars, p_bars, STAGES, KS)
    if STORE_FINAL:
        gl.store(ht + i_state + o_k[:, None] * V + o_v[None, :], b_S * (1.0 / b_sig))


@functools.lru_cache(maxsize=None)
def _tile_layout(block: tuple[int, int], dtype: torch.dtype) -> gl.NVMMASharedLayout:
    """The shared-memory layout of a [block] tile of dtype, made once: ~6 us of the host's time a
    call each (five a launch), which at B1 x T8k is host time the GPU waits for (NOTES.md v19)."""
    return gl.NVMMASharedLayout.get_default_for(list(block), {torch.float16: gl.float16,
                                                               torch.bfloat16: gl.bfloat16}[dtype])


def _rows(x: torch.Tensor, block: list[int]) -> TensorDescriptor:
    """A descriptor of a contiguous [B, T, heads, dim] tensor as [B x T, heads x dim] in [block] tiles.
    Its fields are set directly: TensorDescriptor's constructor checks what the plan has checked
    (16-byte rows and base, the block's shape) and a reshaped view costs as much again, ~2.5 us a
    descriptor of the ~11 a B = 1 call makes (NOTES.md v37). Triton reads the base only for its
    address and dtype, so the 4-D tensor stands for its 2-D view."""
    rows, width = x.shape[0] * x.shape[1], x.shape[2] * x.shape[3]
    desc = object.__new__(TensorDescriptor)
    desc.base, desc.shape, desc.strides, desc.block_shape = x, [rows, width], [width, 1], block
    desc.layout, desc.padding = _tile_layout(tuple(block), x.dtype), "zero"
    return desc


def shared_descriptors(qn, kn, tb, attn, BT):
    """The descriptors of qn, kn ([BT, K] tiles), tb and attn ([BT, BT] tiles) that both Gluon walks
    read alike: made once where one call launches both (the automatic split), ~10-20 us each."""
    K = qn.shape[-1]
    return _rows(qn, [BT, K]), _rows(kn, [BT, K]), _rows(tb, [BT, BT]), _rows(attn, [BT, BT])


def walk_launch(qn, kn, v, tb, attn, Gc, t_low, beta, o, h0, ht, cu_seqlens, seq_order, BT, BV, done, walk,
                descs=None, descs_in_kernel=False):
    """What every Gluon walk kernel takes from the launcher (tensors as walk_gluon's): N (sequences), its
    leading arguments (the descriptors of q, k, v in [BT, BV] tiles, T and P; then Gc, t_low, beta, o,
    h0, ht, cu_seqlens and seq_order, o standing in for those that are None) and its flags (HAS_H0,
    STORE_FINAL, IS_VARLEN, LONGEST_FIRST, MASK_ROWS: a sequence's last chunk may read the next one's
    rows, in packed sequences or dense ones whose T is not a multiple of BT; DESCS_IN_KERNEL).
    Refuses the WY pass's counts (done) with MASK_ROWS: the next sequence's rows are read before its
    WY programs are waited for (walk names the walk in the error). descs: shared_descriptors' (None:
    made here); descs_in_kernel: the tensors themselves in the descriptors' places, for the kernel to
    make its descriptors from (walk_descriptors; Triton's allocator for their scratch set here)."""
    B, T = qn.shape[:2]
    N = B if cu_seqlens is None else len(cu_seqlens) - 1
    mask_rows = cu_seqlens is not None or (B > 1 and T % BT != 0)
    if done is not None and mask_rows:
        raise ValueError(f"walk={walk!r} waits on the WY pass's counts (done) only where no chunk reads another "
                         "sequence's rows: dense batches with B = 1 or T a multiple of the chunk")
    if descs_in_kernel:
        d_q, d_k, d_v, d_t, d_p = qn, kn, v, tb, attn
        if qn.is_cuda:
            ensure_allocator()
    else:
        d_q, d_k, d_t, d_p = shared_descriptors(qn, kn, tb, attn, BT) if descs is None else descs
        d_v = _rows(v, [BT, BV])
    args = (d_q, d_k, d_v, d_t, d_p, Gc, t_low, beta, o, o if h0 is None else h0, o if ht is None else ht,
            o if cu_seqlens is None else cu_seqlens, o if seq_order is None else seq_order)
    flags = dict(HAS_H0=h0 is not None, STORE_FINAL=ht is not None, IS_VARLEN=cu_seqlens is not None,
                 LONGEST_FIRST=seq_order is not None, MASK_ROWS=mask_rows, DESCS_IN_KERNEL=descs_in_kernel)
    return N, args, flags


def walk_gluon(qn, kn, v, tb, attn, Gc, t_low, beta, o, h0, ht, scale, H, HV, BT, BV, stages, num_warps=4,
               maxnreg=None, cu_seqlens=None, seq_order=None, done=None, group=1, skip=None, descs=None,
               skip_late=False, descs_in_kernel=False, decays_by_head=False):
    """Launch walk_gluon_kernel: qn, kn [B, T, H, K] fp16; v, o [B, T, HV, V]; tb, attn [B, T, HV, BT]
    fp16; Gc [B, T, HV] fp32 (decays_by_head: [HV, B x T]), t_low int32 in Gc's shape (the WY pass's
    flags of the chunks whose tile carries T diag(beta)'s low parts), beta [B, T, HV] fp32 (read on
    those chunks); h0, ht [N, HV, K, V] fp32 or None; cu_seqlens [N + 1] (B = 1: packed sequences)
    and seq_order [N] int32 (the order in which to walk them) or None; done [B, groups, HV] int32,
    the WY pass's counts of each group of ``group`` chunks to wait for (dense only), or None.
    skip [N x HV] int32 or None: heads whose programs return (nonzero; walk_gluon_kernel's SKIP: at
    once, or with skip_late, where the WY pass marks them, once its first counts are in, SKIP = 2); descs_in_kernel:
    the kernel makes its TMA descriptors (walk_launch);
    descs: shared_descriptors' of these tensors, or None.
    The tiles are 64 rows (one warpgroup of 4 warps); maxnreg caps the registers a thread (None: no cap).
    The launcher (gdn.ops.triton.forward) checks all of this first; the checks here guard direct calls."""
    B, T, _, K = qn.shape
    V = v.shape[-1]
    if BT != 64 or num_warps != 4:
        raise ValueError(f"walk='gluon' needs chunk_size 64 and 4 warps, got {BT} and {num_warps}")
    if V % BV:
        raise ValueError(f"walk='gluon' needs V a multiple of block_v ({BV}), got V={V}")
    if skip_late and (skip is None or done is None):
        raise ValueError("skip_late (the WY pass marks the heads to skip) needs skip and done (its counts)")
    N, args, flags = walk_launch(qn, kn, v, tb, attn, Gc, t_low, beta, o, h0, ht, cu_seqlens, seq_order, BT, BV, done,
                                 "gluon", descs, descs_in_kernel)
    launch(walk_gluon_kernel, (V // BV * N * HV,),
        *args, o if done is None else done, o if skip is None else skip, scale, T, B * T, H=H, HV=HV, K=K, V=V, BT=BT,
        BV=BV, STAGES=stages, WAIT=done is not None, GROUP=group,
        SKIP=0 if skip is None else 2 if skip_late else 1, G_BY_HEAD=decays_by_head, **flags, num_warps=num_warps,
        **(dict(maxnreg=maxnreg) if maxnreg else {}))

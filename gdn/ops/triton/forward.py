"""The launcher of the Triton forward of Gated DeltaNet: a parallel WY pass, then a state walk
that writes the outputs. What runs is decided first, from the call's shapes and knobs, by
gdn.ops.triton.plan (plan_forward: every default and every refusal); this module makes the buffers
and launches the kernels.

1. ``wy_kernel`` (gdn.ops.triton.wy): every chunk of every sequence and head at once, what does not
   depend on the state: on the bf16 path by default T diag(beta) = (I + A)^-1 diag(beta) [tokens, HV,
   BT] (the walk forms the writes U = T diag(beta) (v - diag(r e^G) k S) from it), each chunk's
   output attention P = (q k^T . D), scaled, and the cumulative decays G; otherwise the WY factors
   w [tokens, HV, K] and u [tokens, HV, V] (U = u - w S).
2. ``_segment_maps_kernel`` (gdn.ops.triton.chunk_fwd): only when sequences x heads cannot fill the
   GPU, the affine maps that join the segments of a sequence exactly, on bf16 parts from w and u;
   or (``maps="f16"``) ``_segment_maps_f16_kernel``, the same maps by the fp16 walk's step.
3. ``_chunk_fwd_kernel`` (gdn.ops.triton.chunk_fwd): the state walk and the outputs. By default (bf16
   and fp16 inputs) its products take one fp16 operand each, the state and values scaled by
   powers of two (gdn.ops.triton.walk_f16), from the fp16 copies of T diag(beta), P, q and k (the
   last two normalised with l2norm) that the WY pass stores; elsewhere two bf16 parts per computed
   operand. On an sm_90 GPU
   the Gluon walks (gdn.ops.triton.walk_gluon, walk_gluon_t) and the certified split of one
   sequence into segments (gdn.ops.triton.split_walk) take its place where they apply.

When the walk takes at most one program per SM (one sequence, or a few), it is latency-bound and
leaves room on every SM: the launcher then runs the WY pass beside it. By default (``overlap="flags"``)
the WY pass is one launch over all chunks in order on the caller's stream, counting each group of
chunks done, and the walk one launch on a side stream that waits for each group's count (two
launches, whatever the length). Otherwise (``overlap="pieces"``, and under CUDA graph capture with
the Triton walk) the chunks are cut into pieces, the WY pass of piece i + 1 beside the walk of piece
i, events between them and the state carried between the walk's launches in the final-state buffer.
A graph being captured where the Gluon walk would wait on the counts runs it after the WY pass
instead (no kernel of a graph waits on another it is not ordered after), and the automatic split's
two walks beside each other.
How the work is cut (segments, pieces) and placed on streams: gdn.ops.triton.schedule.
"""
from __future__ import annotations

import numbers

import torch

from . import plan as planning          # (the device probes: replaced there by tests and compile_report)
from . import split_walk as splits      # (plan_forward's split_walk argument shadows the module's name)
from .chunk_fwd import _chunk_fwd_kernel, _segment_maps_f16_kernel, _segment_maps_kernel
from .launch import direct_launches, ensure_allocator, launch
from .plan import planned
from .schedule import cdiv, next_pow2, on_stream, on_tensor_device, side_streams
from .wy import wy_kernel


def _maxnreg(cap) -> dict:
    """A kernel launch's register cap: maxnreg=cap, none for None or 0."""
    return dict(maxnreg=cap) if cap else {}


@on_tensor_device
def triton_forward(q, k, v, g, beta, *, direct_launch=True, **kwargs):
    """Launch the forward. Arguments and results as :func:`gdn.gated_delta_rule` (checked there), and
    ``out``, an output buffer ``[B, T, HV, V]`` in v's dtype to write into. The other keywords
    (benchmarks and tests; named sets in gdn.ops.triton.configs) are gdn.ops.triton.plan.plan_forward's
    knobs, which it documents: the defaults are the configuration measured correct and fastest on an
    H200 and an H100. ``direct_launch=True`` (default) launches each kernel directly once a launch
    with its key was seen (gdn.ops.triton.launch: the same compiled kernels, bit for bit the same
    results, ~0.35 ms less host time a B1 x T32k call on the GPU machine's host, NOTES.md v39);
    False goes through Triton's ``kernel[grid]`` at every launch.

    ``window_tokens``: walk one dense sequence (B = 1, no cu_seqlens) in windows, each window a call
    of its own from the previous one's final state, o written in place, so that the intermediates
    (the fp16 copies of q and k, T diag(beta), P and the decays: ~16 GiB at T = 2^20 with 32 value
    heads of 128) scale with the window, not the sequence. "auto" (the default): past
    AUTO_WINDOW_TOKENS x AUTO_WINDOW_HEADS / HV tokens (2^18 at 32 value heads), the fewest windows of
    at most that many, of equal length (rounded up to chunk_size; other calls: one); an int: windows
    of that many tokens (a multiple of chunk_size), the last one shorter; None: one call. On an H100
    (benchmarks/NOTES.md v62) B1 x T = 2^20 with 32 value heads took 24.14 ms in one call and 24.11
    in four windows, its peak memory 24.1 -> 12.0 GiB. The results move in their last bits against
    the call without windows (other segment boundaries)."""
    with direct_launches(direct_launch):
        window = kwargs.pop("window_tokens", "auto")
        if isinstance(window, str) and window == "auto":
            window = auto_window(q.shape[0], q.shape[1], v.shape[2], kwargs.get("cu_seqlens"),
                                 kwargs.get("chunk_size", 64))
        if window is not None:
            return _windows(q, k, v, g, beta, window, **kwargs)
        return _forward(q, k, v, g, beta, **kwargs)


# window_tokens="auto": windows of at most 2^18 tokens at 32 value heads (a quarter of the 2^20 that
# the issue asks for), where the intermediates (~4 GiB at heads of 128) match FlashQLA's at 2^20 and
# the time did not move (v62). Each window costs a call's host time (~0.6 ms), hidden behind ~6 ms of
# GPU. The intermediates grow with tokens x value heads, so the limit is on that product: fewer heads
# take longer windows (2 heads: one call up to 2^22 tokens). That also keeps a window's plan the whole
# sequence's where it depends on the chunk count (schedule.walks_one_segment: one segment rather than
# maps from heads^2 x chunks > MAPS_BUDGET, which any window of at least half the limit exceeds).
AUTO_WINDOW_TOKENS = 2 ** 18
AUTO_WINDOW_HEADS = 32


def auto_window(B: int, T: int, HV: int, cu_seqlens, chunk_size: int) -> int | None:
    """window_tokens="auto"'s window for a call of B sequences of T tokens and HV value heads: None
    (one call) unless one dense sequence is longer than AUTO_WINDOW_TOKENS x AUTO_WINDOW_HEADS / HV
    tokens, else the fewest equal windows of at most that many tokens, rounded up to a multiple of
    chunk_size (checked first as plan_forward checks it: numpy's ints too, a bad one named)."""
    limit = AUTO_WINDOW_TOKENS * AUTO_WINDOW_HEADS // max(HV, 1)
    if B != 1 or cu_seqlens is not None or T <= limit:
        return None
    planning.check_chunk_size(chunk_size)
    windows = cdiv(T, limit)
    return cdiv(cdiv(T, windows), chunk_size) * chunk_size


def _windows(q, k, v, g, beta, window, *, initial_state=None, output_final_state=False, cu_seqlens=None,
             chunk_size=64, out=None, **kwargs):
    """triton_forward's call in windows of ``window`` tokens (its docstring); a sequence no longer than
    one window is one call. The split's diagnostics (split_walk.last_heads, last_outcome) are then the
    last window's."""
    planning.check_chunk_size(chunk_size)
    if isinstance(window, bool) or not isinstance(window, numbers.Integral) or window <= 0 or window % chunk_size:
        raise ValueError(f"window_tokens must be 'auto', None or a positive multiple of chunk_size ({chunk_size}), "
                         f"got {window!r}")
    if cu_seqlens is not None or q.shape[0] != 1:
        raise ValueError(f"window_tokens cuts one dense sequence (B = 1, no cu_seqlens), got B = {q.shape[0]}"
                         f"{' and cu_seqlens' if cu_seqlens is not None else ''}")
    T, window = q.shape[1], int(window)
    if T <= window:
        return _forward(q, k, v, g, beta, initial_state=initial_state, output_final_state=output_final_state,
                        chunk_size=chunk_size, out=out, **kwargs)
    o = torch.empty(*v.shape, dtype=v.dtype, device=v.device) if out is None else out
    state = initial_state
    for t0 in range(0, T, window):
        t1 = min(t0 + window, T)
        part = slice(t0, t1)
        _, state = _forward(q[:, part], k[:, part], v[:, part], g[:, part], beta[:, part], initial_state=state,
                            output_final_state=output_final_state or t1 < T, chunk_size=chunk_size,
                            out=o[:, part], **kwargs)
    return o, state


def _forward(q, k, v, g, beta, *, scale: float, initial_state=None, output_final_state=False, cu_seqlens=None,
             use_qk_l2norm=False, chunk_size=64, out=None, **knobs):
    """triton_forward's body, under its device and launch mode."""
    # q and k in the wider of their dtypes (the torch backends compute in the widest input's): a bf16 q
    # must not round an fp32 k. No fp64 matrix units: fp64 computes from fp32.
    qk_dtype = torch.promote_types(q.dtype, k.dtype)
    qk_dtype = torch.float32 if qk_dtype == torch.float64 else qk_dtype
    q, k, v = q.to(qk_dtype).contiguous(), k.to(qk_dtype).contiguous(), v.contiguous()
    g, beta = g.float().contiguous(), beta.float().contiguous()
    h0 = None if initial_state is None else initial_state.float().contiguous()
    # The kernels read cu_seqlens[i] at cu_seqlens + i, and the host's lengths below read it through
    # its strides: a strided view (values checked as they are) must be one tensor to both.
    cu_seqlens = None if cu_seqlens is None else cu_seqlens.contiguous()
    p = planned(q, v, cu_seqlens, scale=scale, use_qk_l2norm=use_qk_l2norm, chunk_size=chunk_size, **knobs)
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    N = B if cu_seqlens is None else cu_seqlens.numel() - 1
    o = torch.empty(B, T, HV, V, dtype=v.dtype, device=v.device) if out is None else out
    ht = torch.empty(N, HV, K, V, dtype=torch.float32, device=v.device) if output_final_state else None
    if p is None:                          # T = 0
        if ht is not None:
            ht.copy_(h0) if h0 is not None else ht.zero_()
        return o, ht
    BT, BK, BV, NV, NT, P, L = p.BT, p.BK, p.BV, p.NV, p.NT, p.P, p.L
    dummy = o
    flag_group = p.flag_group              # (the forced split beside the WY pass takes its own)

    # 1. The state-free pass over every chunk, in parallel. The split state walk reads from it T diag(beta)
    #    (or w) as bf16 parts and the l2-norm factors of q and k.
    w = w2 = w3 = u = rq = rk = tb = tb2 = qn = kn = dummy
    # fp16 inputs without l2norm are the fp16 walk's q and k themselves (plan's qk_copies), where TMA
    # can read them (16-byte aligned starts; the copies are fresh allocations). Elsewhere the WY
    # pass's STORE_QK keeps its default.
    qk_copies = not p.f16 or p.qk_copies or not (q.data_ptr() % 16 == 0 and k.data_ptr() % 16 == 0)
    if p.state_split > 0:
        if p.t_in and p.f16:
            tb = tb2 = torch.empty(B, T, HV, BT, dtype=torch.float16, device=q.device)
            if qk_copies:
                qn, kn = torch.empty(2, B, T, H, K, dtype=torch.float16, device=q.device)
            else:
                qn, kn = q, k
        elif p.t_in:
            tb_parts = torch.empty(2, B, T, HV, BT, dtype=torch.bfloat16, device=q.device)
            tb, tb2 = tb_parts[0], tb_parts[1]
        else:
            w_parts = torch.empty(p.state_split, B, T, HV, K, dtype=torch.bfloat16, device=q.device)
            w, w2, w3 = w_parts[0], w_parts[1], w_parts[p.state_split - 1]
        if use_qk_l2norm and not p.f16:          # (the fp16 walk reads the WY pass's fp16 copies qn, kn instead)
            rq = torch.empty(B, T, HV, dtype=torch.float32, device=q.device)
            rk = torch.empty(B, T, HV, dtype=torch.float32, device=q.device)
    else:
        w = torch.empty(B, T, HV, K, dtype=p.wy_dtype, device=q.device)
    if not p.t_in:
        u = torch.empty(B, T, HV, V, dtype=torch.float32 if p.state_split > 0 else p.wy_dtype, device=q.device)
    Gc = attn = attn2 = t_low = dummy
    if p.attn_in:
        # [tokens, HV], or one head's tokens contiguous (decays_layout="heads": addressing.decay_ptrs).
        Gc = torch.empty(*((HV, B * T) if p.decays_by_head else (B, T, HV)), dtype=torch.float32, device=q.device)
        if p.f16:
            attn = attn2 = torch.empty(B, T, HV, BT, dtype=torch.float16, device=q.device)
            # Each chunk's flag (at its first row, in G's layout): its T diag(beta) tile carries its low
            # parts (chunk_io.store_t_f16), which the walks then add.
            t_low = torch.empty(Gc.shape, dtype=torch.int32, device=q.device)
        else:
            attn_parts = torch.empty(2, B, T, HV, BT, dtype=torch.bfloat16, device=q.device)
            attn, attn2 = attn_parts[0], attn_parts[1]
    if cu_seqlens is None:
        chunk_offsets, slot_seqs, seq_order = dummy, dummy, dummy
    else:
        lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).to(torch.int32)
        seq_order = dummy
        if p.longest_first:          # the walk takes the longest sequences first (on the device: no host sync)
            seq_order = torch.argsort(lengths, descending=True, stable=True).to(torch.int32)
        chunk_offsets = torch.zeros(N + 1, dtype=torch.int32, device=q.device)
        torch.cumsum((lengths + BT - 1) // BT, 0, out=chunk_offsets[1:])
        # Each WY slot's sequence: the first whose chunks end after the slot (empty ones end where they
        # start, so they own no slot); slots past the last chunk go to the last sequence.
        slot_ids = torch.arange(NT + N, dtype=torch.int32, device=q.device)
        slot_seqs = torch.searchsorted(chunk_offsets[1:], slot_ids, right=True, out_int32=True).clamp_(max=N - 1)

    def wy_pass(c_first, n_chunks, done=None, feed=None, forget=None):
        """WY factors of chunks c_first .. c_first + n_chunks - 1 of every sequence, in parallel (with
        done: all chunks, in order, each counted in done when finished; with feed = (P, L, W) in the
        order of the certified split's segments; with forget = (heads, P, L, W, L0) also the automatic
        split's heads, as split_walk.forgetting_heads(g, beta, BT, P, L, W, L0))."""
        slots = N * n_chunks if cu_seqlens is None else NT + N     # varlen: an upper bound, no host sync
        forget_ln, forget_block = splits.forgets_constants(forget[3], BT) if forget else (0.0, 64)
        launch(wy_kernel, (slots * (HV // p.wy_heads),),
            q, k, v, g, beta, w, w2, w3, u, rq, rk, Gc, attn, attn2, tb, tb2, t_low, qn, kn, scale, chunk_offsets,
            slot_seqs, dummy if cu_seqlens is None else cu_seqlens, dummy if done is None else done, T, n_chunks,
            slots, c_first, *(feed or (0, 0, 0)), *(forget or (dummy, 0, 0, 0, 0)), forget_ln, B * T,
            SIGNAL=done is not None,
            FEED=feed is not None,
            GROUP=flag_group if done is not None else 1,
            BV=max(16, next_pow2(V)), BLOCK=p.BLOCK, LOG_BLOCKS=(BT // p.BLOCK).bit_length() - 1,
            IS_VARLEN=cu_seqlens is not None, INVERSE=p.inverse, WY_SPLIT=p.wy_split,
            BC=min(64, BK, next_pow2(V)), W_PARTS=p.state_split, STORE_NORMS=p.state_split > 0 and not p.f16,
            STORE_ATTN=p.attn_in, STORE_T=p.t_in, F16=p.f16, F16_DOT=p.f16_dot, HEADS=p.wy_heads,
            FALLBACK_AFTER=p.wy_fallback == "after", FORGET=forget is not None,
            FORGET_BLOCK=forget_block, G_BY_HEAD=p.decays_by_head, STORE_QK=qk_copies, **p.common,
            **_maxnreg(p.wy_maxnreg))

    walk_launch = dict(p.common, num_stages=p.walk_stages, num_warps=p.walk_warps or p.num_warps)
    fused_walk = p.fused and p.t_in and BV <= 32 and not p.f16     # each product of parts as one
    maps_A = maps_A2 = maps_A3 = maps_B = dummy
    walk_q, walk_k = (qn, kn) if p.f16 else (q, k)      # the fp16 walk reads the WY pass's fp16 copies
    tma = ((fused_walk or (p.f16 and BV <= 32)) if p.walk_tma is None else p.walk_tma and p.t_in) and \
        planning._tma_ready(walk_q, walk_k, v, o)
    if tma and q.is_cuda and not planning.triton_interpreting():
        ensure_allocator()

    split = None                   # walk_gluon_t's certified split (split_walk: formed beside the WY pass)
    skip_heads = None              # the automatic split's heads, which walk_gluon then skips
    skip_late = False              # ... marked by the WY pass (split_heads_in="wy"): read after its first counts
    walk_descs = None              # descriptors both Gluon walks read (the automatic split launches both)
    descs_in_kernel = p.walk_descriptors == "kernel"      # ... or none: the Gluon walks make their own

    def state_walk(c_first, c_end, h_in, h_out, done=None):
        """The walk over chunks c_first .. c_end - 1 from state h_in (None: zeros), writing o and, when
        h_out is given, the state after the last chunk."""
        if p.walk == "gluon":            # all chunks from h0 in one launch (pieces only with flags: done)
            from .walk_gluon import walk_gluon
            walk_gluon(qn, kn, v, tb, attn, Gc, t_low, beta, o, h_in, h_out, scale, H, HV, BT, BV, p.walk_stages,
                       p.walk_warps or p.num_warps, p.walk_maxnreg, cu_seqlens,
                       seq_order if cu_seqlens is not None and p.longest_first else None, done,
                       flag_group if done is not None else 1, skip_heads, walk_descs, skip_late,
                       descs_in_kernel=descs_in_kernel, decays_by_head=p.decays_by_head)
            return
        if p.walk == "gluon_t":          # as "gluon", on the transposed state
            from .walk_gluon_t import walk_gluon_t
            walk_gluon_t(qn, kn, v, tb, attn, Gc, t_low, beta, o, h_in, h_out, scale, H, HV, BT, BV, p.walk_stages,
                         cu_seqlens, seq_order if cu_seqlens is not None and p.longest_first else None, done,
                         flag_group if done is not None else 1, split, one_launch=p.split_launches == 1,
                         descs_in_kernel=descs_in_kernel, decays_by_head=p.decays_by_head)
            return
        launch(_chunk_fwd_kernel, (NV * N * HV, P),
            walk_q, walk_k, g, beta, w, w2, w3, u, rq, rk, Gc, attn, attn2, v, tb, tb2, t_low, o,
            dummy if h_in is None else h_in,
            dummy if h_out is None else h_out,
            maps_A, maps_A2, maps_A3, maps_B, dummy if cu_seqlens is None else cu_seqlens, seq_order,
            dummy if done is None else done, scale, T, L, P, c_first, c_end, BV=BV,
            IS_VARLEN=cu_seqlens is not None, WAIT=done is not None, GROUP=flag_group if done is not None else 1,
            AHEAD=p.walk_stages, HAS_H0=h_in is not None, STORE_FINAL=h_out is not None, FAST_DOTS=p.fast_dots,
            SPLIT=p.state_split,
            HAS_MAPS=P > 1, ATTN_IN=p.attn_in, T_IN=p.t_in,
            LONGEST_FIRST=p.longest_first and cu_seqlens is not None,
            FUSED=fused_walk, Q_REGS=fused_walk and p.walk_stages >= 3, ALL_LOADS=p.walk_loads == "all", TMA=tma,
            Q_LATE=p.q_late, F16=p.f16, F16_DOT=p.f16_dot,
            **walk_launch, **_maxnreg(p.walk_maxnreg))

    def automatic_segments():
        """The automatic split's segments (P_s, L_s, W_s, L0_s: count, length, warm-up and the first's
        length, in chunks), or None where it does not apply (packed sequences among them: the
        segments are a dense sequence's) or takes fewer than two."""
        splits.last_heads = splits.last_outcome = None        # (this call's, if it splits)
        long_enough = p.split_walk == "auto" or NT >= splits.AUTO_MIN_CHUNKS
        if not (p.auto_split and long_enough and cu_seqlens is None and p.walk == "gluon" and V % 64 == 0
                and K in (64, 128)):
            return None
        # Placed as split_walk=True's after the WY pass: 64 columns a program, two programs an SM.
        P_s, L_s, W_s = splits.plan(True, p.split_warmup, NT, N * HV * (V // 64), planning.num_sms(q.device),
                                    flag_group, False)[:3]
        L0_s = L_s                           # (the bounds' check: every segment L chunks)
        if p.split_check == "posterior" and P_s > 1:
            P_s, L0_s, L_s = splits.posterior_segments(NT, P_s, W_s)
        return None if P_s < 2 else (P_s, L_s, W_s, L0_s)

    def segments_walk(cert, heads, descs):
        """The automatic split's chosen heads (heads [N x HV] int32, nonzero) in certified segments
        (cert: split_walk.posterior's or certified's), walk_gluon_t at 64 columns and one stage."""
        from .walk_gluon_t import walk_gluon_t
        walk_gluon_t(qn, kn, v, tb, attn, Gc, t_low, beta, o, h0, ht, scale, H, HV, BT, 64, 1, split=cert,
                     split_heads=heads,
                     descs=descs, one_launch=p.split_launches == 1, descs_in_kernel=descs_in_kernel,
                     decays_by_head=p.decays_by_head)

    if p.graph_safe:
        # A CUDA graph being captured where the flags would apply (plan_forward's graph_safe): the WY
        # pass first, then the walks. With the automatic split, the ordered walk of the heads that keep
        # their memory (on a side stream, forked from the caller's and joined back) and the chosen
        # heads' segments (on the caller's stream) run beside each other: neither waits for the other,
        # so a graph may start them in either order. Everything they read is made before the fork.
        auto = automatic_segments()
        wy_pass(0, NT)
        if auto is None:
            state_walk(0, 1 << 30, h0, ht)
            return o, ht
        from .walk_gluon import shared_descriptors
        P_s, L_s, W_s, L0_s = auto
        skip_heads = splits.forgetting_heads(g, beta, BT, P_s, L_s, W_s, L0_s, k=None if use_qk_l2norm else k)
        if p.split_check == "posterior":
            cert = splits.posterior(P_s, L0_s, L_s, W_s, g, beta, K, V, BT, 64, trusted=skip_heads)
        else:
            cert = splits.certified(P_s, L_s, W_s, v, g, beta, h0, K, BT, 64, skip_heads)
        walk_descs = shared_descriptors(qn, kn, tb, attn, BT)
        splits.last_heads = skip_heads
        with side_streams(q.device, 1, priorities=(p.walk_priority,)) as (main, side):
            with on_stream(side):
                state_walk(0, 1 << 30, h0, ht)
            segments_walk(cert, skip_heads, walk_descs)
        return o, ht

    if p.flags and p.pieces > 1:
        # One WY launch over all chunks, in order, and the walk beside it on a side stream, waiting
        # for each group of chunks to be counted done. It cannot deadlock: the WY pass waits for
        # nothing, it is launched first (so a GPU, tool or CUDA_LAUNCH_BLOCKING that runs kernels one
        # at a time finishes it before the walk starts), and the walk leaves at least one SM free
        # for it, and beside each walk program room for a WY program (135 + 33 KB of shared memory,
        # 2 x 32 K registers: ``beside``), so walks of other calls cannot crowd it out either. Fewer
        # walk programs than SMs also means all of them are placed at once: while a kernel of the
        # higher-priority stream has programs waiting to be placed, the GPU places none of the WY
        # pass's (a walk of 512 programs beside it hung at B8 x T4k on an H200: NOTES.md v29). A graph
        # being captured takes graph_safe above (or, walk="triton", the pieces below): a graph may
        # run two kernels of different streams in either order.
        auto = automatic_segments()
        if auto is not None:
            P_s, L_s, W_s, L0_s = auto
        # The heads from the WY pass's chunk-0 programs (split_heads_in="wy", the posterior check: the
        # bounds beside the WY pass need them before it), zeroed with the counts (wy_kernel's FORGET).
        # One sequence only: the WY pass takes the sequences in turn, and a later sequence's split
        # heads' walk programs (an SM each) would wait for its first counts, beside half the pass.
        skip_late = auto is not None and N == 1 and p.split_check == "posterior" and p.split_heads_in == "wy"
        if skip_late:
            n_counts = N * cdiv(NT, flag_group) * HV
            counts = torch.zeros(n_counts + N * HV, dtype=torch.int32, device=q.device)
            done, skip_heads = counts[:n_counts].view(N, cdiv(NT, flag_group), HV), counts[n_counts:]
        else:
            done = torch.zeros(N, cdiv(NT, flag_group), HV, dtype=torch.int32, device=q.device)
        if auto is None:
            with side_streams(q.device, 1, priorities=(p.walk_priority,)) as (main, side):
                wy_pass(0, NT, done)
                with on_stream(side):
                    state_walk(0, 1 << 30, h0, ht, done=done)
            return o, ht
        # The automatic split: on the first side stream the heads whose warm-ups forget (from g and
        # beta, a few microseconds; or, split_heads_in="wy", marked by the WY pass's chunk-0 programs,
        # which the ordered walk waits for anyway), then the ordered walk of the others beside the WY
        # pass; with split_check="bounds", on the second the certificates' bounds, launched after that walk
        # (their many small programs would otherwise take the SMs the walk's programs wait for: 0.3
        # ms later at B1 x T128k on an H200, NOTES.md v26); after the WY pass, on the caller's
        # stream, the chosen heads' segments (walk_gluon_t, two programs an SM: the SM count's
        # segments, as split_walk=True) and, posterior, their check. Either walk returns (at once, or
        # with the heads from the WY pass after its first group's count) for
        # the other's heads, and neither waits for the other (the segments start after the WY pass,
        # which the ordered walk alone waits on): the flags' argument holds as without the split.
        from .walk_gluon import shared_descriptors
        posterior = p.split_check == "posterior"              # (no second side stream: no bounds beside)
        priorities = (p.walk_priority,) if posterior else (p.walk_priority, p.bounds_priority)
        with side_streams(q.device, len(priorities), priorities=priorities) as (main, side, *side2):
            wy_pass(0, NT, done, forget=(skip_heads, P_s, L_s, W_s, L0_s) if skip_late else None)
            walk_descs = shared_descriptors(qn, kn, tb, attn, BT)     # (the split's walk takes the host's)
            with on_stream(side):
                if not skip_late:
                    skip_heads = splits.forgetting_heads(g, beta, BT, P_s, L_s, W_s, L0_s,
                                                         k=None if use_qk_l2norm else k)
                    heads_ready = None if side is None else side.record_event()
                state_walk(0, 1 << 30, h0, ht, done=done)
            if posterior:
                # Nothing beside the WY pass: the segments check their warm-ups against each other's
                # states (buffers made on the caller's stream), so only the heads are waited for
                # (made on the caller's stream by the WY pass, or on the side stream).
                cert = splits.posterior(P_s, L0_s, L_s, W_s, g, beta, K, V, BT, 64, trusted=skip_heads)
                made = [] if skip_late else [skip_heads]
                if main is not None and not skip_late:
                    main.wait_event(heads_ready)
            else:
                side2 = side2[0]
                with on_stream(side2):
                    # Only the chosen heads' bounds: with long memory the bounds then read nothing.
                    if side2 is not None:
                        side2.wait_event(heads_ready)
                    cert = splits.certified(P_s, L_s, W_s, v, g, beta, h0, K, BT, 64, skip_heads)
                made = [skip_heads, *cert.buffers]
                if main is not None:
                    main.wait_stream(side2)          # (which waited for the heads)
            if main is not None:                     # (meta tensors: compile_report's recorded launches)
                for t in made:
                    t.record_stream(main)
            splits.last_heads = skip_heads
            segments_walk(cert, skip_heads, walk_descs)
        return o, ht

    if p.pieces > 1:
        # The WY pass of piece i + 1 runs beside the walk of piece i: the walk fills each SM with one
        # latency-bound program and leaves room for a WY program. The state is carried between pieces.
        bounds = [NT * i // p.pieces for i in range(p.pieces + 1)]
        carry = ht if ht is not None else torch.empty(N, HV, K, V, dtype=torch.float32, device=q.device)
        with side_streams(q.device, 1) as (main, side):
            for i in range(p.pieces):
                wy_pass(bounds[i], bounds[i + 1] - bounds[i])
                if main is not None:                           # the walk waits for this piece's WY pass
                    side.wait_event(main.record_event())
                with on_stream(side):
                    state_walk(bounds[i], bounds[i + 1], h0 if i == 0 else carry, carry)
        return o, ht

    if p.forced_split:
        splits.last_outcome = None
        programs = N * HV * NV
        beside_ok = p.split_beside and p.overlap == "flags" and p.t_in and p.beside and not p.capturing
        P_s, L_s, W_s, group, beside_split = splits.plan(p.split_walk, p.split_warmup, NT, programs,
                                                         planning.num_sms(q.device), flag_group, beside_ok)
        if P_s > 1 and beside_split:
            # The WY pass first, over all chunks in the order the segments need them, counting each group
            # done; on the side stream the certificates' bounds beside it, then the segments' walk, which
            # waits for the counts (the flags' argument above: fewer walk programs than SMs).
            flag_group = group
            done = torch.zeros(N, cdiv(NT, flag_group), HV, dtype=torch.int32, device=q.device)
            with side_streams(q.device, 1) as (main, side):
                wy_pass(0, NT, done, feed=(P_s, L_s, W_s))
                with on_stream(side):
                    split = splits.certified(P_s, L_s, W_s, v, g, beta, h0, K, BT, BV)
                    state_walk(0, 1 << 30, h0, ht, done=done)
            return o, ht
        # After the WY pass: its launch first, then the bounds on a side stream beside it (their
        # tensors, made there, marked as used on the caller's stream, which the walk runs on); in
        # order on the caller's stream while a graph is captured (no allocations across streams there).
        # The posterior check needs no bounds: its heads' test (the betas) on the caller's stream.
        if p.split_check == "posterior" and P_s > 1:
            P_s, L0_s, L_s = splits.posterior_segments(NT, P_s, W_s)
            wy_pass(0, NT)
            if P_s > 1:
                split = splits.posterior(P_s, L0_s, L_s, W_s, g, beta, K, V, BT, BV)
            state_walk(0, 1 << 30, h0, ht)
            return o, ht
        with side_streams(q.device, 0 if p.capturing else 1) as (main, *side):
            wy_pass(0, NT)
            if P_s > 1:
                with on_stream(side[0] if side else None):
                    split = splits.certified(P_s, L_s, W_s, v, g, beta, h0, K, BT, BV)
                if side and main is not None:
                    for t in split.buffers:
                        t.record_stream(main)
    else:
        wy_pass(0, NT)
    if P > 1:
        # A in bf16 parts where the walk folds on them (the split paths, the fp16 maps among them), B fp32.
        if p.state_split > 0:
            A_parts = torch.empty(p.state_split, N * HV * (P - 1), K, K, dtype=torch.bfloat16, device=q.device)
            maps_A, maps_A2, maps_A3 = A_parts[0], A_parts[1], A_parts[p.state_split - 1]
        else:
            maps_A = torch.empty(N * HV * (P - 1), K, K, dtype=torch.float32, device=q.device)
        maps_B = torch.empty(N * HV * (P - 1), K, V, dtype=torch.float32, device=q.device)
        NMK = cdiv(K, BV)
        if p.f16:        # the maps by the fp16 walk's step, from what that walk reads
            launch(_segment_maps_f16_kernel, ((NMK + NV) * N * HV, P - 1),
                kn, g, beta, Gc, v, tb, t_low, maps_A, maps_A2, maps_B, T, L, P, H=H, HV=HV, K=K, V=V, BT=BT, BK=BK,
                BM=BV, NMK=NMK, DOT_DTYPE=p.dot_dtype, F16_DOT=p.f16_dot, TMA=tma, num_stages=p.maps_stages,
                num_warps=p.walk_warps or p.num_warps)
        else:
            launch(_segment_maps_kernel, (NMK + NV, N * HV, P - 1),
                q, k, g, beta, w, w2, w3, u, rk, maps_A, maps_A2, maps_A3, maps_B, T, L, P, BM=BV, NMK=NMK,
                FAST_DOTS=p.fast_dots, SPLIT=p.state_split, **walk_launch)
    state_walk(0, 1 << 30, h0, ht)
    return o, ht

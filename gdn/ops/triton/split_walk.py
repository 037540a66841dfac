"""The certified split of one sequence's state walk into segments (walk_gluon_t's SPLIT): the host
side, the certificates' bounds (two kernels, split_check="bounds") and the split's choice of heads
(one kernel).

Few sequences x heads leave most SMs idle (B = 1: 64 programs of 64 columns). Cut each sequence into
P segments; segment p's program walks the W chunks before its segment from a zero state (its
warm-up, no outputs) and then its own chunks with outputs. With l2-normalised keys and beta in
[0, 2], each token's map S -> e^g (I - beta k k^T) S has spectral norm at most e^g, so what the
true state before the warm-up contributes to the state at the segment's start is, column by column,
at most e^{G_win} |S*_j| in 2-norm: G_win the warm-up's summed log-decay, S* the true state before
it. A segment whose bound is at most 2^-30 of each of its columns' largest entry (so of the
column's norm) keeps its warmed-up start, which then equals the sequential walk's to below fp32's
rounding (and the difference shrinks further along the segment); any other is walked from segment
p - 1's final state, so the result is exact either way, and long memory degrades to a sequential
walk. Two ways to know |S*_j|:

- **posterior** (split_check="posterior", the default; posterior, posterior_segments): measured.
  Segment p - 1 walks through the chunk where p's warm-up starts (its checkpoint) and stores its
  state's column norms there; every segment walks at once (walk_t_kernel's SPLIT 3), then a
  second launch (SPLIT 4; or the same one, split_launches=1: SPLIT 5) checks segment p once p - 1 is
  final (exact, by induction from segment 0) and walks p again from p - 1's final state where the
  check fails. Nothing is read of v, and
  nothing runs beside the WY pass. The margin of 4 covers the norms' own rounding (the fp16 walk's
  ~1e-3) and the fp16 keys: their norms are 1 to ~2^-10, so over a warm-up of W x 64 tokens with
  beta near 2 the window's map may exceed e^{G_win} by up to (1 + 2^-9)^(W 64), ~20 at W = 24 in
  the worst case of every rounding in one direction; the certificate's 2^-30 then still leaves the
  truncation below fp32's rounding, and far below the walk's own. Segment 0, which has no warm-up,
  is POSTERIOR_LEAD warm-ups longer: the check of every segment waits for the one before to end.
- **bounds** (split_check="bounds": segment_errors, certified): a bound from the recurrence of the
  state's own growth, formed beside the WY pass by two kernels over v, g and beta,

      B_t = e^{g_t} B_{t-1} + |beta_t| max_j |v_tj|,      B before the first token: h0's largest column norm,

  (each token adds beta_t v_t k_t^T, whose column j has norm |beta_t v_tj|), checked by the warm-up
  launch (SPLIT 1) before the segments' (SPLIT 2), where a segment that does not certify waits
  for p - 1's final state. Its pass over v shared the GPU with the WY pass: on an H200 (NOTES.md
  v30) the posterior check took B1 x T128k from 3.50 to 3.29 ms with decaying gates.

Automatic (triton_forward's default split_walk=None, from AUTO_MIN_CHUNKS chunks on, where the
default walks one or a few sequences beside the WY pass): forgetting_heads marks, from g and beta,
the heads whose every warm-up forgets by 2^FORGET_LOG2 with its betas in [0, 2]; those take the
split after the WY pass, every other head keeps the ordered walk beside it (walk_gluon's SKIP,
walk_t_kernel's CHOSEN). Without l2norm the keys are not unit vectors, and a token's map shrinks
only where beta |k|^2 <= 2: forgetting_heads then also reads the warm-ups' keys (_keys_grow_kernel)
and leaves out every head with a token past that; the posterior check's argument then holds as
above (the walk's fp16 keys are the bf16 inputs exactly), and the bounds (which take unit keys) are
not used. On an H200 (benchmarks/NOTES.md v26) B1 x T128k went 4.75 -> 3.68 ms with
decaying gates and stayed at 4.76-4.78 with long memory.

Forced (``split_walk=True`` or P, every head): after the WY pass by default (split_segments: two
programs an SM), or, with the bounds, beside it (``split_beside``; beside_segments: fewer programs
than SMs), where the WY pass forms the chunks in the order the segments walk them (feed_chunk,
feed_order its reference) and the walk waits on its counts. On an H200 the second was no faster
(NOTES.md v25).

benchmarks/split_certificate.py checked the bound in float64 (T = 16384, segment starts every 4096
tokens): with decaying gates 16 warm-up chunks certify every start, the bound ~1000x above the true
difference; with long-memory gates none.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from .decay import floored
from .launch import launch
from .schedule import cdiv, next_pow2

# W: with the bench's decaying gates (logsigmoid(x + 4), mean g ~ -0.025) a summed log-decay of ~ -38
# (2^-55): the certificate's 2^-30 then holds while the bound is below ~2^25 of a column's largest
# entry (~2^6-2^7 there). 16 chunks (-26, 2^-37) would leave it at the edge, and a segment that does
# not certify waits for the one before.
WARMUP_CHUNKS = 24
# The automatic split (triton_forward's split_walk=None, "auto"): a head takes it where every later
# segment's warm-up decays the state by at least 2^FORGET_LOG2. The certificate then holds while its
# bound on the state stays below 2^14 of a column's largest entry (~2^6-2^7 with the bench's
# decaying gates, whose warm-ups forget by ~2^-55), so a chosen head almost never waits; a head that
# is not chosen walks in order beside the WY pass (the default's walk), as fast as without the split.
FORGET_LOG2 = -44.0
# From 256 chunks on (16k tokens at chunk size 64; 512 from v27 to v61): on an H100 (NOTES.md v62) at
# 256 chunks the call was 26-30% faster with decaying gates, eager and replayed, and 2-4.5% slower with
# long memory; at 512, 32% faster and 0-2% slower. (v27, an H200: 256 chunks 8% slower, decaying.)
AUTO_MIN_CHUNKS = 256
# The posterior check's segment 0 is longer by this many warm-ups: a warm-up chunk (no outputs) took
# ~2.3 us against ~3.05 us for a chunk with outputs (walk_t_kernel at two programs an SM, NOTES.md v29),
# so segment 0's extra chunks take about the time of the others' warm-ups.
POSTERIOR_LEAD = 0.75
# The posterior check's margin of 4 covers the fp16 keys' norms over warm-ups up to this many chunks
# (the module docstring: the window's map may exceed e^{G_win} by (1 + 2^-9)^(64 W) in the worst
# case, ~20 at W = 24, ~150 at 40, where 2^-30 x 150 / 4 ~ 2^-24.8 is still below fp32's 2^-24).
POSTERIOR_MAX_WARMUP = 40
# The posterior check's walk and check in one launch (walk_t_kernel's SPLIT 5) below this many chunks a
# sequence: one Gluon launch less (~0.15 ms of host time a call on the GPU machine) for a walk ~10%
# longer (the merged kernel spilled). On an H200 (NOTES.md v37, B1, decaying gates) one launch took
# T32k (512 chunks, where the host sets the pace) from 1.242 to 1.084 ms and two stayed faster from
# 1024 chunks on (T64k 1.514 against 1.605 ms, T128k 2.984 against 3.150). Since v38 the merged
# kernel's walk spills 3 values a chunk instead of 9, and on an H100 (v39) its walk was still 10%
# longer than the two launches' at T128k (1.758 against 1.598 ms): the bound stays.
ONE_LAUNCH_BELOW = 1024
last_outcome = None         # the latest split launch's certificates (seg_ok; forward._certified_split)
last_heads = None           # the latest automatic split's choice of heads (forgetting_heads)


def segments_of(NT: int, P: int) -> tuple[int, int]:
    """(P, L): NT chunks in at most P segments of L chunks, none empty ((1, NT) for one)."""
    L = cdiv(NT, max(1, min(P, NT)))
    P = cdiv(NT, L)
    return (P, L) if P > 1 else (1, NT)


def split_segments(NT: int, programs: int, slots: int, warmup: int = WARMUP_CHUNKS) -> tuple[int, int]:
    """(P, L): the segments of NT chunks for a walk of ``programs`` programs a segment, at most
    ``slots`` programs resident at once (all of them must be: a segment may wait for the one before),
    each segment at least twice as long as its warm-up. (1, NT) where no split fits."""
    return segments_of(NT, min(slots // max(programs, 1), NT // (2 * max(warmup, 1))))


@triton.jit
def _chunk_growth_kernel(v, g, beta, heads, growth, decay, T, n_chunks, HV: tl.constexpr, V: tl.constexpr,
                         BT: tl.constexpr, BVP: tl.constexpr, HAS_HEADS: tl.constexpr):
    """growth [N x HV, n_chunks] fp32: chunk c's own addition to the bound, sum over its tokens t of
    e^{G_last - G_t} |beta_t| max_j |v_tj| (infinite where a beta lies outside [0, 2]), G the in-chunk
    cumulative log-decay; decay [N x HV, n_chunks] fp32 its summed log-decay G_last. Grid
    (n_chunks, N x HV); v [N, T, HV, V], g and beta [N, T, HV] fp32, all contiguous. From g itself,
    not from the WY pass's G (the same cumulative sums, to fp32's rounding, which the bound's margin
    covers), so that the bounds run beside that pass. HAS_HEADS: only the heads that heads [N x HV]
    int32 marks nonzero (forgetting_heads); the others' growths are infinite (never certified) and
    their values are not read, so that their ordered walk has the GPU's bandwidth and SMs."""
    i_c, i_nh = tl.program_id(0), tl.program_id(1)
    if HAS_HEADS:
        if tl.load(heads + i_nh) == 0:
            tl.store(growth + i_nh.to(tl.int64) * n_chunks + i_c, float("inf"))
            tl.store(decay + i_nh.to(tl.int64) * n_chunks + i_c, 0.0)
            return
    i_n, i_hv = i_nh // HV, i_nh % HV
    o_t = tl.arange(0, BT)
    o_v = tl.arange(0, BVP)
    rows = i_n.to(tl.int64) * T + i_c * BT + o_t                   # the chunk's token rows (all whole)
    b_v = tl.load(v + (rows * HV + i_hv)[:, None] * V + o_v[None, :], mask=(o_v < V)[None, :], other=0.0)
    b_beta = tl.load(beta + rows * HV + i_hv)
    b_G = tl.cumsum(floored(tl.load(g + rows * HV + i_hv)), 0)
    b_G_last = tl.sum(tl.where(o_t == BT - 1, b_G, 0.0), 0)
    m = tl.abs(b_beta) * tl.max(tl.abs(b_v.to(tl.float32)), 1)
    b = tl.sum(tl.exp(b_G_last - b_G) * m, 0)
    growing = tl.sum(((b_beta < 0) | (b_beta > 2)).to(tl.int32), 0) > 0
    tl.store(growth + i_nh.to(tl.int64) * n_chunks + i_c, tl.where(growing, float("inf"), b))
    tl.store(decay + i_nh.to(tl.int64) * n_chunks + i_c, b_G_last)


@triton.jit
def _affine(a1, b1, a2, b2):
    """x -> a1 x + b1, then x -> a2 x + b2."""
    return a1 * a2, a2 * b1 + b2


@triton.jit
def _segment_bounds_kernel(growth, decay, h0, err, n_chunks, P, L, W, K: tl.constexpr, V: tl.constexpr,
                           HAS_H0: tl.constexpr, CB: tl.constexpr, PB: tl.constexpr, BK: tl.constexpr,
                           BVP: tl.constexpr):
    """err [P, N x HV] fp32 (segment_errors): one program a (sequence, value head), grid (N x HV,).
    The bound's recurrence over whole chunks, B_{c+1} = e^{g_c} B_c + growth_c (g_c chunk c's
    summed log-decay), CB chunks at a time by an affine scan, in float64 (the warm-up's decay is a
    difference of long sums); each segment p keeps the bound before its warm-up's first chunk and the
    log-decays before that chunk and before its own first one."""
    i_nh = tl.program_id(0)
    x = tl.zeros([], tl.float64)                   # the bound before the block's first chunk
    if HAS_H0:
        # h0's largest column 2-norm.
        o_k = tl.arange(0, BK)
        o_v = tl.arange(0, BVP)
        sq = tl.zeros([BVP], tl.float32)
        for k0 in range(0, K, BK):
            m_h = ((k0 + o_k) < K)[:, None] & (o_v < V)[None, :]
            b_h = tl.load(h0 + i_nh.to(tl.int64) * K * V + (k0 + o_k)[:, None] * V + o_v[None, :], mask=m_h,
                          other=0.0)
            sq += tl.sum(b_h * b_h, 0)
        x = tl.sqrt(tl.max(sq, 0).to(tl.float64))
    s = tl.zeros([], tl.float64)                   # the summed log-decay of the chunks before the block
    o_p = tl.arange(0, PB)
    first = tl.maximum(o_p * L - W, 0)             # each segment's warm-up's first chunk
    kept = tl.zeros([PB], tl.float64)              # the bound before it
    s_first = tl.zeros([PB], tl.float64)           # the log-decay before it
    s_own = tl.zeros([PB], tl.float64)             # the log-decay before the segment's first chunk
    o_c = tl.arange(0, CB)
    for c0 in range(0, n_chunks, CB):
        c = c0 + o_c
        m_c = c < n_chunks                         # past the end: the identity map (g 0, growth 0)
        g = tl.load(decay + i_nh.to(tl.int64) * n_chunks + c, mask=m_c, other=0.0).to(tl.float64)
        b = tl.load(growth + i_nh.to(tl.int64) * n_chunks + c, mask=m_c, other=0.0).to(tl.float64)
        a, b = tl.associative_scan((tl.exp(g), b), 0, _affine)
        after = a * x + b                          # the bound after chunk c
        s_after = s + tl.cumsum(g, 0)              # the log-decay of chunks up to c
        at_first = c[None, :] == (first - 1)[:, None]
        kept += tl.sum(tl.where(at_first, after[None, :], 0.0), 1)
        s_first += tl.sum(tl.where(at_first, s_after[None, :], 0.0), 1)
        s_own += tl.sum(tl.where(c[None, :] == (o_p * L - 1)[:, None], s_after[None, :], 0.0), 1)
        x = tl.sum(tl.where(o_c == CB - 1, after, 0.0), 0)
        s = tl.sum(tl.where(o_c == CB - 1, s_after, 0.0), 0)
    # (1 + 2^-10): the fp32 growths and decays, far below the certificate's 2^-30 margin. A warm-up
    # from the sequence's start (first 0, and segment 0) starts from h0: exact.
    e = tl.exp(s_own - s_first) * kept * (1.0 + 2.0 ** -10)
    e = tl.where((o_p > 0) & (first > 0), e, 0.0)
    tl.store(err + o_p * (tl.num_programs(0)) + i_nh, e.to(tl.float32), mask=o_p < P)


def segment_errors(v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, h0: torch.Tensor | None,
                   BT: int, P: int, L: int, W: int = WARMUP_CHUNKS, heads: torch.Tensor | None = None) -> torch.Tensor:
    """The certificates' bounds: e^{G_win} B for each segment p's start (p * L chunks), column by
    column at most what the true state before its warm-up (chunks max(p L - W, 0) .. p L - 1) adds to
    the state at its start. 0 for p = 0 and for segments whose warm-up starts at the sequence's start
    (they start from h0: exact); infinite (never certified) where a beta outside [0, 2] makes a
    token's map grow the state, and for the heads that heads [B x HV] int32 (or None: all) leaves 0.

    v [B, T, HV, V] (any float dtype); g [B, T, HV], the log-decays; beta [B, T, HV]; h0 [B, HV, K, V]
    fp32 or None. Returns [P, B x HV] fp32, on v's device, in two kernels and without a host sync;
    nothing of the WY pass is read, so they may run beside it. Only the chunks before the last
    segment's start are read; they are all whole.

    The keys' norms are 1 to fp16's rounding (the walk's normalised copies: |k|^2 within ~2^-10 of
    1), so with beta near 2 a token's map may grow a column by up to ~2^-9 if every rounding falls
    the same way: over a warm-up of 24 chunks at most ~20x, inside the bound's own slack (the float64
    study above: the bound ~1000x above the true gap)."""
    B, T, HV, V = v.shape
    n_chunks = (P - 1) * L                             # every chunk before the last segment's start
    err = torch.empty(P, B * HV, dtype=torch.float32, device=v.device)
    if P < 2 or n_chunks == 0:
        return err.zero_()
    v, g, beta = v.contiguous(), g.float().contiguous(), beta.float().contiguous()
    growth, decay = torch.empty(2, B * HV, n_chunks, dtype=torch.float32, device=v.device)
    BVP = next_pow2(V)
    launch(_chunk_growth_kernel, (n_chunks, B * HV), v, g, beta, err if heads is None else heads, growth, decay, T,
           n_chunks, HV=HV, V=V, BT=BT, BVP=BVP, HAS_HEADS=heads is not None)
    K = 1 if h0 is None else h0.shape[2]
    PB = next_pow2(P)
    launch(_segment_bounds_kernel, (B * HV,),
        growth, decay, v if h0 is None else h0.float().contiguous(), err, n_chunks, P, L, W, K=K, V=V,
        HAS_H0=h0 is not None, CB=max(16, min(128, 4096 // PB)), PB=PB, BK=min(16, next_pow2(K)),
        BVP=BVP)
    return err


@triton.jit
def warmup_tokens(p, L, W, L0, BT: tl.constexpr):
    """Segment p's warm-up as tokens [first, end) of its sequence: chunks max(s_p - W, 0) .. s_p - 1,
    s_p = L0 + (p - 1) L (forgets', _keys_grow_kernel's)."""
    return tl.maximum(L0 + (p - 1) * L - W, 0) * BT, (L0 + (p - 1) * L) * BT


@triton.jit
def forgets(g, beta, base, o_h, m_h, T, P, L, W, L0, forget_ln, HV: tl.constexpr, BT: tl.constexpr,
            BLOCK: tl.constexpr, keys_grow=None, i_n=0, NHV=0, KEYS: tl.constexpr = False):
    """Whether value heads o_h (a vector, where m_h) of one sequence forget in every warm-up:
    int32 1 or 0 each (forgetting_heads' test; g and beta from token row ``base`` x HV on). Segment
    p's warm-up, chunks max(s_p - W, 0) .. s_p - 1 (s_p = L0 + (p - 1) L), forgets if its summed
    log-decay is at most forget_ln and its betas lie in [0, 2], or if it starts at the sequence's
    start (then it is exact). Reads [BLOCK tokens, heads] tiles: a warm-up of up to BLOCK tokens is
    one round of loads. KEYS (keys not l2-normalised): also where keys_grow [P - 1, NHV] (of
    sequence i_n) says no token of the warm-up has beta |k|^2 above 2 (_keys_grow_kernel)."""
    o_t = tl.arange(0, BLOCK)
    chosen = (o_h >= 0).to(tl.int32)
    for p in range(1, P):
        first, end = warmup_tokens(p, L, W, L0, BT)
        acc = tl.zeros(o_h.shape, tl.float32)
        growing = tl.zeros(o_h.shape, tl.int32)
        for t0 in range(first, end, BLOCK):
            t = t0 + o_t
            m = (t < end)[:, None] & m_h[None, :]
            offs = base + t.to(tl.int64)[:, None] * HV + o_h[None, :]
            acc += tl.sum(floored(tl.load(g + offs, mask=m, other=0.0)), 0)
            b_beta = tl.load(beta + offs, mask=m, other=0.0)
            growing |= tl.max(((b_beta < 0) | (b_beta > 2)).to(tl.int32), 0)
        if KEYS:
            growing |= tl.load(keys_grow + (p - 1) * NHV + i_n * HV + o_h, mask=m_h, other=1)
        chosen = chosen & (((acc <= forget_ln) & (growing == 0)) | (first == 0)).to(tl.int32)
    return chosen


@triton.jit
def _keys_grow_kernel(k, beta, keys_grow, T, L, W, L0, NHV, H: tl.constexpr, HV: tl.constexpr,
                      K: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr, TB: tl.constexpr, GP: tl.constexpr):
    """keys_grow [P - 1, N x HV] int32, zeros on entry: set to 1 where a token of segment p's warm-up
    (p = 1 .. P - 1, as forgets') has beta |k|^2 above 2, so that its map e^g (I - beta k k^T) may
    grow the state (keys not l2-normalised). One program a sequence, q/k head, segment and block of
    TB tokens, grid (N x H, P - 1, blocks): the warm-ups' keys in one round of loads, since the
    ordered walk starts after this kernel (one program a warm-up read its blocks in turn). Each key's
    squared norm once, against the betas of the value heads that read it ([TB, GP] tiles, GP the
    group's HV / H padded to a power of two); a block with no such token writes nothing."""
    i_nh, i_p, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_n, i_h = i_nh // H, i_nh % H
    G: tl.constexpr = HV // H
    first, end = warmup_tokens(i_p + 1, L, W, L0, BT)
    o_t, o_k, o_g = first + i_b * TB + tl.arange(0, TB), tl.arange(0, BK), tl.arange(0, GP)
    m_t, m_g = o_t < end, o_g < G
    rows = i_n.to(tl.int64) * T + o_t
    b_k = tl.load(k + (rows[:, None] * H + i_h) * K + o_k[None, :], mask=m_t[:, None] & (o_k < K)[None, :],
                  other=0.0).to(tl.float32)
    b_n = tl.sum(b_k * b_k, axis=1)
    b_beta = tl.load(beta + rows[:, None] * HV + i_h * G + o_g[None, :], mask=m_t[:, None] & m_g[None, :],
                     other=0.0)
    grow = tl.max((b_beta * b_n[:, None] > 2.0).to(tl.int32), axis=0)
    tl.atomic_or(keys_grow + i_p * NHV + i_n * HV + i_h * G + o_g, grow, mask=m_g & (grow != 0))


@triton.jit
def _forgetting_kernel(g, beta, heads, keys_grow, T, P, L, W, L0, forget_ln, NHV, HV: tl.constexpr,
                       BT: tl.constexpr, HB: tl.constexpr, BLOCK: tl.constexpr, KEYS: tl.constexpr):
    """heads [N x HV] int32 (forgetting_heads): one program a sequence and HB value heads, grid
    (N, cdiv(HV, HB)), reading [BLOCK tokens, HB heads] tiles (HB adjacent fp32 a token: whole
    sectors); the test: forgets' (KEYS: with _keys_grow_kernel's keys_grow)."""
    i_n, i_b = tl.program_id(0), tl.program_id(1)
    o_h = i_b * HB + tl.arange(0, HB)
    m_h = o_h < HV
    chosen = forgets(g, beta, i_n.to(tl.int64) * T * HV, o_h, m_h, T, P, L, W, L0, forget_ln, HV, BT, BLOCK,
                     keys_grow, i_n, NHV, KEYS)
    tl.store(heads + i_n * HV + o_h, chosen, mask=m_h)


def forgetting_heads(g: torch.Tensor, beta: torch.Tensor, BT: int, P: int, L: int, W: int = WARMUP_CHUNKS,
                     L0: int | None = None, forget_log2: float = FORGET_LOG2,
                     k: torch.Tensor | None = None, keys_block: int = 128) -> torch.Tensor:
    """Which heads the automatic split walks in segments: [B x HV] int32, 1 where every segment
    p >= 1's warm-up (the W chunks before s_p = L0 + (p - 1) L, fewer at the sequence's start; L0
    None: L) forgets, its summed log-decay at most forget_log2 ln 2, with its betas in [0, 2], else
    0 (those heads walk in order). g, beta [B, T, HV] fp32 contiguous, the log-decays and the betas,
    whole chunks up to the last segment's start. One small kernel over the warm-ups' tokens (~13 us
    at B1 x T32k on an H200, against 40-50 us one program a head: the ordered walk beside the WY
    pass starts after it, NOTES.md v31). A guess of the certificate's outcome, never a substitute
    for it: a chosen head whose warm-up does not certify still waits for the segment before
    (exact). With forget_log2 = inf: only the betas' test (the heads the posterior check may
    certify: Split.trusted). k [B, T, H, K] (bf16 or fp16, contiguous): the keys as the walk reads
    them, for calls without l2norm, whose maps shrink only where beta |k|^2 <= 2: a head with a
    warm-up token past that is not chosen (one more small kernel, _keys_grow_kernel, over the
    warm-ups' keys, keys_block tokens a program: a warm-up of 24 chunks in 12 programs)."""
    B, T, HV = g.shape
    L0 = L if L0 is None else L0
    heads = torch.empty(B * HV, dtype=torch.int32, device=g.device)
    HB = min(8, next_pow2(HV))
    forget_ln, block = forgets_constants(W, BT, forget_log2)
    keys_grow = heads
    if k is not None and P > 1:
        H, K = k.shape[2], k.shape[3]
        TB = next_pow2(min(keys_block, W * BT))
        keys_grow = torch.zeros(P - 1, B * HV, dtype=torch.int32, device=g.device)
        launch(_keys_grow_kernel, (B * H, P - 1, cdiv(W * BT, TB)), k, beta, keys_grow, T, L, W, L0, B * HV, H=H,
               HV=HV, K=K, BK=next_pow2(K), BT=BT, TB=TB, GP=next_pow2(HV // H), num_warps=8)
    launch(_forgetting_kernel, (B, cdiv(HV, HB)), g, beta, heads, keys_grow, T, P, L, W, L0, forget_ln, B * HV,
           HV=HV, BT=BT, HB=HB, BLOCK=block, KEYS=k is not None, num_warps=8)
    return heads


def forgets_constants(W: int, BT: int, forget_log2: float = FORGET_LOG2) -> tuple[float, int]:
    """forgets' threshold forget_ln (forget_log2 in natural log) and BLOCK (tokens a round of loads)
    for warm-ups of W chunks of BT tokens: what its callers' launches pass it."""
    return forget_log2 * 0.6931471805599453, max(64, min(2048, next_pow2(W * BT)))


def aligned_group(group: int, *lengths: int) -> int:
    """The flag group halved until it divides every length (chunks): beside the WY pass each segment's
    walk starts on a group's boundary (walk_gluon.first_fills), so no warm-up waits for a group that
    holds chunks the feed order forms late."""
    while group > 1 and any(n % group for n in lengths):
        group //= 2
    return group


def beside_segments(NT: int, programs: int, sms: int, group: int,
                    warmup: int = WARMUP_CHUNKS) -> tuple[int, int, int]:
    """(P, L, group) for the split beside the WY pass (its walk waits on the WY pass's counts):
    fewer walk programs than SMs, so that one SM always has room for a WY program, which waits for
    nothing (the flags' argument, gdn.ops.triton.forward), each segment at least twice its warm-up;
    the flag group aligned to the warm-up and L rounded up to a multiple of it. (1, NT, group) where
    no split fits."""
    group = aligned_group(group, warmup)
    P = min((sms - 1) // max(programs, 1), NT // (2 * max(warmup, 1)))
    if P < 2:
        return 1, NT, group
    L = cdiv(cdiv(NT, P), group) * group
    P = cdiv(NT, L)
    return (P, L, group) if P > 1 else (1, NT, group)


def feed_order(NT: int, P: int, L: int, W: int) -> list[int]:
    """The chunks in the order the WY pass forms them beside the split walk (feed_chunk's reference):
    by the time t at which a segment's program needs them (segment p >= 1 walks chunk p L - W + t at
    step t, its warm-up then its own chunks; segment 0 counted as if it had a warm-up too), then by
    segment; a chunk in a warm-up's window only once, at its earliest time. Identity for P < 2 or
    W > L."""
    if P < 2 or W > L:
        return list(range(NT))
    need = {}
    for c in range(NT):
        p = min(P - 1, (c + W) // L)                   # the last segment whose walk reaches c
        need[c] = (c - (p * L - W), p)
    return sorted(range(NT), key=lambda c: need[c])


@triton.jit
def feed_chunk(j, NT, P, L, W):
    """The j-th chunk that the WY pass forms beside the split walk (feed_order, in closed form: no
    table to load before a program's first load). Four runs of steps t: the warm-ups' (t < W,
    segments 1 .. P - 1), then every segment's (P a step) until the last segment's end, then
    either segments 0 .. P - 2 alone (a short last segment) or the last alone (a long one)."""
    if (P < 2) | (W > L):
        return j
    L_last = NT - (P - 1) * L
    n1 = (P - 1) * W
    m = tl.minimum(L, L_last + W)
    n2 = P * (m - W)
    r2 = j - n1
    r3 = j - n1 - n2
    short_last = L_last + W < L
    t = tl.where(j < n1, j // (P - 1), tl.where(r2 < n2, W + r2 // P, tl.where(short_last, m + r3 // (P - 1), L + r3)))
    p = tl.where(j < n1, 1 + j % (P - 1), tl.where(r2 < n2, r2 % P, tl.where(short_last, r3 % (P - 1), P - 1)))
    return p * L - W + t


class Split(NamedTuple):
    """walk_gluon_t's split argument: P segments of L chunks, each warmed up over the W chunks before
    it, and the tensors walk_t_kernel reads and writes (split_buffers'). L0 = 0: the bounds' check
    (certified: segment p's first chunk p L; SPLIT 1 then 2, two launches); L0 > 0: the posterior
    check (posterior: segment 0 the first L0 chunks, segment p >= 1 L chunks from L0 + (p - 1) L;
    SPLIT 3 then 4, two launches, or one: SPLIT 5), bound then each segment's start and checkpoint (walk_t_kernel's
    seg_bound) and trusted [N x HV] int32 the heads whose warm-ups' betas lie in [0, 2]
    (forgetting_heads)."""
    P: int
    L: int
    W: int
    bound: torch.Tensor      # [P, N x HV] fp32 (the bounds' check), [P, N x HV, 3, V] fp32 (posterior)
    warm: torch.Tensor       # [P, N x HV, K, V] fp32: the warmed-up states (the bounds' check)
    pub: torch.Tensor        # [P, N x HV, K, V] fp32: the segments' published final states
    flags: torch.Tensor      # [P, N x HV, V / BV] int32: their publication flags
    ok: torch.Tensor         # [P, N x HV, V / BV] int32: 2 exact, 1 certified, 0 not (waited or walked again)
    L0: int = 0
    trusted: torch.Tensor | None = None

    @property
    def buffers(self) -> tuple[torch.Tensor, ...]:
        """(bound, warm, pub, flags, ok): the tensors walk_t_kernel reads and writes, in its order."""
        return self.bound, self.warm, self.pub, self.flags, self.ok


def posterior_segments(NT: int, P: int, warmup: int = WARMUP_CHUNKS) -> tuple[int, int, int]:
    """(P, L0, L) for the posterior check with at most P segments: segment 0 longer by about
    POSTERIOR_LEAD warm-ups (it has none, and every segment's check waits for the one before to end),
    the others L chunks, at least one warm-up long (a checkpoint lies in the segment before the
    warm-up it serves). Fewer segments where P do not fit; (1, NT, NT) where none does."""
    if warmup < 1:
        raise ValueError(f"posterior_segments needs a warm-up of at least one chunk, got {warmup}")
    lead = round(POSTERIOR_LEAD * warmup)
    while P > 1:
        L = cdiv(max(NT - lead, 0), P)
        L0 = NT - (P - 1) * L
        if L >= warmup and L0 >= warmup and L0 > 0:
            return P, L0, L
        P -= 1
    return 1, NT, NT


def posterior(P: int, L0: int, L: int, W: int, g: torch.Tensor, beta: torch.Tensor, K: int, V: int, BT: int,
              BV: int, trusted: torch.Tensor | None = None) -> Split:
    """walk_gluon_t's split argument for the posterior check (posterior_segments' P, L0, L; warm-ups of
    W chunks): its buffers, and trusted (None: made here from the warm-ups' betas, forgetting_heads
    with forget_log2 = inf; g, beta [B, T, HV] fp32 contiguous). Nothing is read of the WY pass or of
    v: no kernel beside it. The outcomes stay in last_outcome."""
    global last_outcome
    B, T, HV = g.shape
    if not (1 <= W <= POSTERIOR_MAX_WARMUP and P >= 2 and L >= W and L0 >= W and L0 + (P - 1) * L == cdiv(T, BT)):
        raise ValueError(f"the posterior check needs 1 <= W <= {POSTERIOR_MAX_WARMUP} warm-up chunks, at least two "
                         "segments, each at least W chunks long, covering the sequence's chunks "
                         f"(posterior_segments'), got P={P}, L0={L0}, L={L}, W={W} for {cdiv(T, BT)} chunks")
    if trusted is None:
        trusted = forgetting_heads(g, beta, BT, P, L, W, L0, float("inf"))
    stats = torch.empty(P, B * HV, 3, V, dtype=torch.float32, device=g.device)
    _, pub, flags, ok = split_buffers(P, B, HV, K, V, BV, g.device, warm=False)
    last_outcome = ok
    return Split(P, L, W, stats, pub, pub, flags, ok, L0, trusted)


def split_buffers(P: int, N: int, HV: int, K: int, V: int, BV: int, device,
                  warm: bool = True) -> tuple[torch.Tensor, ...]:
    """The segments' states and flags (walk_t_kernel's SPLIT): the warmed-up states and the published
    final states [P, N x HV, K, V] fp32 (one tensor for both without warm: the posterior check keeps
    no warmed-up states), the publication flags and the certificates' outcomes [P, N x HV, V / BV]
    int32 (0 until set)."""
    states = torch.empty(2 if warm else 1, P, N * HV, K, V, dtype=torch.float32, device=device)
    flags = torch.zeros(2, P, N * HV, V // BV, dtype=torch.int32, device=device)
    return states[0], states[-1], flags[0], flags[1]


def plan(split_walk, warmup: int | None, NT: int, programs: int, sms: int, group: int,
         beside_ok: bool) -> tuple[int, int, int, int, bool]:
    """(P, L, W, group, beside) of the split of NT chunks for triton_forward's ``split_walk`` (True:
    segments from the SM count; an int: that many), ``programs`` walk programs a segment and
    ``warmup`` chunks of warm-up (None: WARMUP_CHUNKS): beside the WY pass where ``beside_ok`` (the
    launcher's flags conditions and split_beside) and the segments' programs leave an SM free
    (beside_segments, which may halve the flag group ``group``), else after it, two programs an SM
    (split_segments). P < 2: no split."""
    W = WARMUP_CHUNKS if warmup is None else warmup
    if split_walk is True:
        if beside_ok:
            P, L, g = beside_segments(NT, programs, sms, group, W)
            if P > 1:
                return P, L, W, g, True
        P, L = split_segments(NT, programs, 2 * sms, W)
        return P, L, W, group, False
    P, L = segments_of(NT, int(split_walk))
    return P, L, W, aligned_group(group, L, W), beside_ok and P * programs < sms


def certified(P: int, L: int, W: int, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
              h0: torch.Tensor | None, K: int, BT: int, BV: int, heads: torch.Tensor | None = None) -> Split:
    """walk_gluon_t's split argument (Split, the bounds' check) for P segments of L chunks warmed up
    over W (tensors as segment_errors' and split_buffers'; heads: only those heads' bounds,
    segment_errors'). The
    certificates' outcomes stay in last_outcome (diagnostics: tests, benchmarks). Its launches read
    only the inputs, so they may run beside the WY pass."""
    global last_outcome
    B, T, HV, V = v.shape
    if P < 1 or L < 1 or (P - 1) * L >= cdiv(T, BT):
        # (walk_t_kernel's SPLIT 1 and 2 take each segment's start inside the sequence: its ring slots,
        # walk_gluon.ring_slot, and its warm-up's chunks count from there.)
        raise ValueError(f"the bounds' check needs P >= 1 segments of L >= 1 chunks, each starting inside the "
                         f"sequence's {cdiv(T, BT)} chunks, got P={P}, L={L}")
    err = segment_errors(v, g, beta, h0, BT, P, L, W, heads)
    warm, pub, flags, ok = split_buffers(P, B, HV, K, V, BV, v.device)
    last_outcome = ok
    return Split(P, L, W, err, warm, pub, flags, ok)

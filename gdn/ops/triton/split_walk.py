"""The certified split of one sequence's state walk into segments (walk_gluon_t's SPLIT; a v24
candidate, ``triton_forward(..., split_walk=P)``): the host side, the certificates' bounds.

Few sequences x heads leave most SMs idle (B = 1: 64 programs of 64 columns). Cut each sequence into
P segments of L chunks; segment p's program walks the W chunks before its segment from a zero state
(its warm-up, no outputs) and then its own L chunks with outputs. With l2-normalised keys and beta in
[0, 2], each token's map S -> e^g (I - beta k k^T) S has spectral norm at most e^g, so what the
true state before the warm-up contributes to the state at the segment's start is, column by column,
at most e^{G_win} B in 2-norm: G_win the warm-up's summed log-decay, B a bound on the true state's
column norms before it. That bound follows the recurrence of the state's own growth,

    B_t = e^{g_t} B_{t-1} + |beta_t| max_j |v_tj|,      B before the first token: h0's largest column norm,

(each token adds beta_t v_t k_t^T, whose column j has norm |beta_t v_tj|). A program whose bound is
at most 2^-30 of each of its columns' largest entry (so of the column's norm) starts from its
warmed-up state, which then equals the sequential walk's to below fp32's rounding (and the
difference shrinks further along the segment); a program whose bound is larger (long memory, or a
state far smaller than the values before it) waits for segment p - 1's final state instead, so the
result is exact either way, and long memory degrades to a sequential walk.

benchmarks/split_certificate.py checked the bound in float64 (T = 16384, segment starts every 4096
tokens): with decaying gates 16 warm-up chunks certify every start, the bound ~1000x above the true
difference; with long-memory gates none.
"""
from __future__ import annotations

import torch

# W: with the bench's decaying gates (logsigmoid(x + 4), mean g ~ -0.025) a summed log-decay of ~ -38
# (2^-55): the certificate's 2^-30 then holds while the bound is below ~2^25 of a column's largest
# entry (~2^6-2^7 there). 16 chunks (-26, 2^-37) would leave it at the edge, and a segment that does
# not certify waits for the one before.
WARMUP_CHUNKS = 24
last_outcome = None         # the latest split launch's certificates (seg_ok; forward._certified_split)


def segments_of(NT: int, P: int) -> tuple[int, int]:
    """(P, L): NT chunks in at most P segments of L chunks, none empty ((1, NT) for one)."""
    L = -(-NT // max(1, min(P, NT)))
    P = -(-NT // L)
    return (P, L) if P > 1 else (1, NT)


def split_segments(NT: int, programs: int, slots: int, warmup: int = WARMUP_CHUNKS) -> tuple[int, int]:
    """(P, L): the segments of NT chunks for a walk of ``programs`` programs a segment, at most
    ``slots`` programs resident at once (all of them must be: a segment may wait for the one before),
    each segment at least twice as long as its warm-up. (1, NT) where no split fits."""
    return segments_of(NT, min(slots // max(programs, 1), NT // (2 * max(warmup, 1))))


def segment_errors(v: torch.Tensor, Gc: torch.Tensor, beta: torch.Tensor, h0: torch.Tensor | None,
                   BT: int, P: int, L: int, W: int = WARMUP_CHUNKS) -> torch.Tensor:
    """The certificates' bounds: e^{G_win} B for each segment p's start (p * L chunks), column by
    column at most what the true state before its warm-up (chunks max(p L - W, 0) .. p L - 1) adds to
    the state at its start. 0 for p = 0 and for segments whose warm-up starts at the sequence's start
    (they start from h0: exact); infinite (never certified) where a beta outside [0, 2] makes a
    token's map grow the state.

    v [B, T, HV, V] (any float dtype); Gc [B, T, HV] fp32, the in-chunk cumulative log-decays of the WY
    pass (each chunk's last entry its summed log-decay); beta [B, T, HV]; h0 [B, HV, K, V] fp32 or None.
    Returns [P, B x HV] fp32, on v's device, without a host sync, in a fixed handful of kernels. Only
    the chunks before the last segment's start are read; they are all whole.

    The keys' norms are 1 to fp16's rounding (the walk's normalised copies), so a token's map may
    grow a column by up to ~2^-11 with beta near 2: over a warm-up of 1024 tokens at most ~1.7x,
    inside the certificate's margin (the float64 study above: the bound ~1000x above the true gap)."""
    B, T, HV, _ = v.shape
    n_chunks = (P - 1) * L                             # every chunk before the last segment's start
    if P < 2 or n_chunks == 0:
        return torch.zeros(P, B * HV, dtype=torch.float32, device=v.device)
    rows = n_chunks * BT
    b_t = beta[:, :rows].float()
    # Each token's growth of the bound, |beta_t| max_j |v_tj| [B, n_chunks, BT, HV] (one reduction
    # over v, no copy of it).
    v_max = torch.linalg.vector_norm(v[:, :rows], ord=float("inf"), dim=-1,
                                     dtype=torch.promote_types(v.dtype, torch.float32))
    m = b_t.abs() * v_max.float()
    G = Gc[:, :rows].view(B, n_chunks, BT, HV)
    G_chunk = G[:, :, -1]                              # [B, n_chunks, HV]: each chunk's summed log-decay
    b = (torch.exp(G_chunk[:, :, None] - G) * m.view(B, n_chunks, BT, HV)).sum(2).double()
    # S[c]: the summed log-decay of chunks 0 .. c - 1 (S[0] = 0), [B, n_chunks + 1, HV], in float64:
    # the bound takes differences of these long sums.
    S = torch.nn.functional.pad(torch.cumsum(G_chunk.double(), 1), (0, 0, 1, 0))
    B0 = torch.zeros(B, HV, dtype=torch.float64, device=v.device) if h0 is None else \
        torch.linalg.vector_norm(h0.double(), dim=2).amax(-1)
    p = torch.arange(1, P, device=v.device)
    start = torch.clamp(p * L - W, min=0)              # each warm-up's first chunk [P - 1]
    c = torch.arange(n_chunks, device=v.device)
    S_start = S[:, start]                              # [B, P - 1, HV]
    # B before chunk `start`: e^{S[start]} B0 + sum over c < start of b_c e^{S[start] - S[c + 1]}
    # (every exponent kept is <= 0), then decayed through the warm-up.
    before = (c[None, :] < start[:, None])[None, :, :, None]                # [1, P - 1, n_chunks, 1]
    decay = torch.where(before, torch.exp(S_start[:, :, None] - S[:, None, 1:]), 0.0)
    bound = torch.exp(S_start) * B0[:, None] + (b[:, None] * decay).sum(2)
    # (1 + 2^-10): the fp32 sums of b and the fp32 decays, far below the certificate's 2^-30 margin.
    err = torch.exp(S[:, p * L] - S_start) * bound * (1.0 + 2.0 ** -10)
    err = torch.where((start > 0)[None, :, None], err, 0.0)              # from the sequence's start: exact
    growing = ((b_t < 0) | (b_t > 2)).flatten(1, 1).any(1)                 # [B, HV]
    err = torch.where(growing[:, None], float("inf"), err)
    return torch.cat([torch.zeros(1, B * HV, dtype=torch.float32, device=v.device),
                      err.transpose(0, 1).reshape(P - 1, B * HV).float()])


def split_buffers(P: int, N: int, HV: int, K: int, V: int, BV: int, device) -> tuple[torch.Tensor, ...]:
    """The segments' states and flags (walk_t_kernel's SPLIT): the warmed-up states and the published
    final states [P, N x HV, K, V] fp32, the publication flags and the certificates' outcomes
    [P, N x HV, V / BV] int32 (0 until set)."""
    states = torch.empty(2, P, N * HV, K, V, dtype=torch.float32, device=device)
    flags = torch.zeros(2, P, N * HV, V // BV, dtype=torch.int32, device=device)
    return states[0], states[1], flags[0], flags[1]

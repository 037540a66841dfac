"""The scan algorithm (seed 000): chunk affine maps, a log-depth prefix scan, recompute.

1. Summarise every chunk as the affine map S -> A_c S + B_c (gdn.ops.wy: A_c = gamma I - k_dec^T w,
   one K x C by C x K product per chunk).
2. Prefix-scan the maps over the chunks: compose((A2, B2), (A1, B1)) = (A2 A1, A2 B1 + B2) is
   associative, so the states at every chunk boundary come out of log2(N) rounds of batched matrix
   products (an odd-even / Blelloch recursion: each round pairs neighbours, recurses on the pairs,
   then fills in the even elements), never a walk over the chunks in sequence.
3. Recompute every chunk's outputs from its start state, all chunks at once.

The same summaries let several thread blocks or several GPUs share one long sequence exactly,
whatever the gates: that is what this module is the reference for.
"""
from __future__ import annotations

import torch

from .common import grouped_initial_state
from .wy import chunk_factors


def compose(later, earlier):
    """The map "apply ``earlier`` then ``later``": (A2 A1, A2 B1 + B2). Batched over leading dims."""
    A2, B2 = later
    A1, B1 = earlier
    return A2 @ A1, A2 @ B1 + B2


def prefix_states(A: torch.Tensor, B: torch.Tensor, S0: torch.Tensor) -> torch.Tensor:
    """States before and after every map of a sequence of affine maps, applied from ``S0``.

    Args:
        A: ``[N, ..., K, K]``, B: ``[N, ..., K, V]``: map n sends S to A[n] S + B[n].
        S0: ``[..., K, V]`` the state before map 0.
    Returns:
        ``[N + 1, ..., K, V]``: [0] is S0, [n + 1] the state after map n.
    """
    states = B.new_empty(B.shape[0] + 1, *B.shape[1:])
    states[0] = S0
    # Fold S0 into map 0, which becomes the constant map (., A0 S0 + B0): every prefix then starts
    # with a constant map, so its B part *is* the state and no A part touching map 0 is ever read.
    _inclusive_scan(A, B, B0=A[0] @ S0 + B[0], out=states[1:])
    return states


def _inclusive_scan(A: torch.Tensor, B: torch.Tensor, B0=None, out=None) -> torch.Tensor:
    """The B parts of the inclusive prefix compositions over dim 0, for a map 0 that is constant
    (its A, and so the A of every pair containing it, is never read); ``B0``, when given, stands for
    B[0]. Returns them (in ``out`` when given). Each level splits the maps into even and odd ones
    once, so that every product below reads contiguous operands."""
    N = B.shape[0]
    first = B[0] if B0 is None else B0
    if out is None:
        out = B.new_empty(B.shape)
    out[0] = first
    if N == 1:
        return out
    half = N // 2
    A_even, B_even = A[0::2].contiguous(), B[0::2].contiguous()        # ceil(N / 2) maps each
    A_odd = A[1::2].contiguous()                                       # N // 2 maps
    # Pair (2i, 2i+1) -> one map; their prefixes are the states after every odd element.
    B_pair = A_odd @ B_even[:half] + B[1::2]
    B_pair[0] = A[1] @ first + B[1]                                    # pair 0 holds map 0
    A_pair = A_odd @ A_even[:half] if half > 1 else A_odd              # the top pair's A is never read
    after_odd = _inclusive_scan(A_pair, B_pair)                        # [N // 2, ...], contiguous
    out[1::2] = after_odd
    # Even element 2i (i >= 1) starts from the state after element 2i - 1.
    if N > 2:
        out[2::2] = A_even[1:] @ after_odd[: (N - 1) // 2] + B_even[1:]
    return out


def scan_forward(q, k, v, g, beta, scale: float, initial_state=None, chunk_size: int = 64,
                 use_qk_l2norm: bool = False):
    """Gated DeltaNet by the affine-map scan, same arguments and results as
    :func:`gdn.ops.chunk.chunk_forward`."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    f = chunk_factors(q, k, v, g, beta, scale, chunk_size, use_qk_l2norm)
    S_init = grouped_initial_state(initial_state, B, H, HV, K, V, like=q)
    A, Bc = f.affine_maps()                                            # [N, B, H, G, K, K|V]
    states = prefix_states(A, Bc, S_init)                              # [N + 1, B, H, G, K, V]
    starts = states[:-1]                                               # the state before each chunk
    o = f.outputs(starts, f.writes(starts))                            # all chunks at once
    return o, states[-1].reshape(B, HV, K, V)

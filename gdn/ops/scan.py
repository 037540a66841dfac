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
    """States after every map of a sequence of affine maps, applied from ``S0``.

    Args:
        A: ``[N, ..., K, K]``, B: ``[N, ..., K, V]``: map n sends S to A[n] S + B[n].
        S0: ``[..., K, V]`` the state before map 0.
    Returns:
        ``[N, ..., K, V]``: the state after map n, for every n.
    """
    # Fold S0 into map 0, which becomes the constant map (0, A0 S0 + B0): every prefix then starts
    # with a constant map, so its B part *is* the state and its A part is never needed.
    B = torch.cat([(A[:1] @ S0) + B[:1], B[1:]])
    A = torch.cat([torch.zeros_like(A[:1]), A[1:]])
    return _inclusive_scan(A, B)


def _inclusive_scan(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """B-part of the inclusive prefix compositions over dim 0; map 0 must be constant (A ignored)."""
    N = B.shape[0]
    if N == 1:
        return B
    even = N - N % 2
    # Pair (2i, 2i+1) -> one map; their prefixes are the states after every odd element.
    A_pair, B_pair = compose((A[1:even:2], B[1:even:2]), (A[0:even:2], B[0:even:2]))
    after_odd = _inclusive_scan(A_pair, B_pair)                        # [N // 2, ...]
    # Even element 2i (i >= 1) starts from the state after element 2i - 1.
    after_even = torch.cat([B[:1], A[2::2] @ after_odd[: (N - 1) // 2] + B[2::2]])   # [ceil(N / 2), ...]
    out = torch.stack([after_even[: N // 2], after_odd], dim=1).flatten(0, 1)        # interleave
    if N % 2:
        out = torch.cat([out, after_even[-1:]])
    return out


def scan_forward(q, k, v, g, beta, scale: float, initial_state=None, chunk_size: int = 64,
                 use_qk_l2norm: bool = False):
    """Scan-based Gated DeltaNet on dense batches; same contract as
    :func:`gdn.ops.recurrent.recurrent_forward`: q, k ``[B, T, H, K]``, v ``[B, T, HV, V]``,
    g, beta ``[B, T, HV]``, initial_state ``[B, HV, K, V]`` or None, all in the compute dtype.
    Returns o ``[B, T, HV, V]`` and the final state ``[B, HV, K, V]``."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    f = chunk_factors(q, k, v, g, beta, scale, chunk_size, use_qk_l2norm)
    S_init = grouped_initial_state(initial_state, B, H, HV, K, V, like=q)
    A, Bc = f.affine_maps()                                            # [N, B, H, G, K, K|V]
    after = prefix_states(A, Bc, S_init)                               # [N, B, H, G, K, V]
    starts = torch.cat([S_init.unsqueeze(0), after[:-1]])
    o = f.outputs(starts, f.writes(starts))                            # all chunks at once
    return o, after[-1].reshape(B, HV, K, V)

"""The scan algorithm (seed 000): chunk affine maps, a log-depth prefix scan, recompute.

1. Summarise every chunk as the affine map S -> A_c S + B_c (gdn.ops.wy: A_c = gamma I - k_dec^T w,
   one K x C by C x K product per chunk).
2. Prefix-scan the maps over the chunks: compose((A2, B2), (A1, B1)) = (A2 A1, A2 B1 + B2) is
   associative, so the states at every chunk boundary come out of log2(N) rounds of batched matrix
   products (an odd-even / Blelloch recursion: each round pairs neighbours, recurses on the pairs,
   then fills in the even elements), never a walk over the chunks in sequence.
3. Recompute every chunk's outputs from its start state: independent per chunk, so done in blocks
   of chunks (intermediates that stay in cache), written straight into the result.

Without autograd every intermediate lives in the thread's reused workspace
(gdn.ops.common.Workspace: no fresh pages per call). The same summaries let several thread blocks or
several GPUs share one long sequence exactly, whatever the gates: that is what this module is the
reference for.
"""
from __future__ import annotations

import torch

from .chunk import BLOCK_TOKENS
from .common import buffer_or_empty, grouped_initial_state, scratch, workspace
from .wy import chunk_factors


def compose(later, earlier):
    """The map "apply ``earlier`` then ``later``": (A2 A1, A2 B1 + B2). Batched over leading dims."""
    A2, B2 = later
    A1, B1 = earlier
    return A2 @ A1, A2 @ B1 + B2


def prefix_states(A: torch.Tensor, B: torch.Tensor, S0: torch.Tensor, buf=None) -> torch.Tensor:
    """States before and after every map of a sequence of affine maps, applied from ``S0``.

    Args:
        A: ``[N, ..., K, K]``, B: ``[N, ..., K, V]``: map n sends S to A[n] S + B[n].
        S0: ``[..., K, V]`` the state before map 0.
        buf: ``buf(name, *shape)`` -> a reused scratch tensor (a workspace getter), or None for
            fresh tensors (autograd).
    Returns:
        ``[N + 1, ..., K, V]``: [0] is S0, [n + 1] the state after map n.
    """
    buf = buf or scratch(None, B)
    shape = (B.shape[0] + 1, *B.shape[1:])
    states = buffer_or_empty(buf("scan.states", *shape), shape, B)
    states[0] = S0
    # Fold S0 into map 0, which becomes the constant map (., A0 S0 + B0): every prefix then starts
    # with a constant map, so its B part *is* the state and no A part touching map 0 is ever read.
    B0 = torch.baddbmm(B[0].flatten(0, -3), A[0].flatten(0, -3), S0.flatten(0, -3),
                       out=buf("scan.B0", *B[0].flatten(0, -3).shape)).view(B[0].shape)
    _inclusive_scan(A, B, buf, B0=B0, out=states[1:])
    return states


def _inclusive_scan(A: torch.Tensor, B: torch.Tensor, buf, B0=None, out=None, level: int = 0) -> torch.Tensor:
    """The B parts of the inclusive prefix compositions over dim 0, for a map 0 that is constant
    (its A, and so the A of every pair containing it, is never read); ``B0``, when given, stands for
    B[0]. Returns them (in ``out`` when given). Each level splits the maps into even and odd ones
    once (into scratch named by ``level``), so that every product below reads contiguous operands."""
    N = B.shape[0]
    first = B[0] if B0 is None else B0
    if out is None:
        out = buffer_or_empty(buf(f"scan.out.{level}", *B.shape), B.shape, B)
    out[0] = first
    if N == 1:
        return out
    half, rest = N // 2, (N - 1) // 2                                  # pairs; even elements after 0
    even = lambda X, name: _copy(X[0::2], buf(f"scan.{name}.{level}", (N + 1) // 2, *X.shape[1:]))
    A_even, B_even = even(A, "A_even"), even(B, "B_even")              # ceil(N / 2) maps each
    A_odd = _copy(A[1::2], buf(f"scan.A_odd.{level}", half, *A.shape[1:]))
    # Pair (2i, 2i+1) -> one map; their prefixes are the states after every odd element.
    B_pair = _matmul_add(A_odd, B_even[:half], B[1::2], buf(f"scan.B_pair.{level}", half, *B.shape[1:]))
    B_pair[0] = A[1] @ first + B[1]                                    # pair 0 holds map 0
    A_pair = _matmul(A_odd, A_even[:half], buf(f"scan.A_pair.{level}", half, *A.shape[1:])) \
        if half > 1 else A_odd                                         # the top pair's A is never read
    after_odd = _inclusive_scan(A_pair, B_pair, buf, level=level + 1)  # [N // 2, ...], contiguous
    out[1::2] = after_odd
    # Even element 2i (i >= 1) starts from the state after element 2i - 1.
    if rest:
        out[2::2] = _matmul_add(A_even[1:], after_odd[:rest], B_even[1:],
                                buf(f"scan.B_even_after.{level}", rest, *B.shape[1:]))
    return out


def _matmul(X: torch.Tensor, Y: torch.Tensor, out=None) -> torch.Tensor:
    """X @ Y batched over all leading dims (into ``out`` when given)."""
    return torch.bmm(X.flatten(0, -3), Y.flatten(0, -3), out=None if out is None else out.flatten(0, -3)) \
        .view(*X.shape[:-1], Y.shape[-1])


def _matmul_add(X: torch.Tensor, Y: torch.Tensor, Z: torch.Tensor, out=None) -> torch.Tensor:
    """X @ Y + Z batched over all leading dims (into ``out`` when given)."""
    return torch.baddbmm(Z.flatten(0, -3), X.flatten(0, -3), Y.flatten(0, -3),
                         out=None if out is None else out.flatten(0, -3)).view(Z.shape)


def _copy(X: torch.Tensor, out=None) -> torch.Tensor:
    """A contiguous copy of ``X`` (into ``out`` when given)."""
    return X.contiguous() if out is None else out.copy_(X)


def scan_forward(q, k, v, g, beta, scale: float, initial_state=None, chunk_size: int = 64,
                 use_qk_l2norm: bool = False):
    """Gated DeltaNet by the affine-map scan, same arguments and results as
    :func:`gdn.ops.chunk.chunk_forward`."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    ws = workspace(q, k, v, g, beta, initial_state)
    buf = scratch(ws, q)
    f = chunk_factors(q, k, v, g, beta, scale, chunk_size, use_qk_l2norm, ws=ws)
    N = f.num_chunks
    S_init = grouped_initial_state(initial_state, B, H, HV, K, V, like=q)
    A, Bc = f.affine_maps(out_A=buf("maps.A", *f.w.shape[:-2], K, K),
                          out_B=buf("maps.B", *f.u.shape[:-2], K, V))       # [N, B, H, G, K, K|V]
    states = prefix_states(A, Bc, S_init, buf=buf)                     # [N + 1, B, H, G, K, V]
    starts = states[:-1]                                               # the state before each chunk
    if ws is None:
        o = f.outputs(starts, f.writes(starts))                        # all chunks at once
    else:
        o = v.new_empty(B, T, HV, V)
        step = max(1, BLOCK_TOKENS // chunk_size)                      # chunks per block
        for n0 in range(0, N, step):
            n = slice(n0, n0 + step)
            U = f.writes(starts[n], n, out=buf("writes", *f.u[n].shape))
            O = f.start_outputs(starts[n], n, out=buf("outputs", *f.u[n].shape))
            f.finish_outputs(O, U, n, out=o[:, n0 * chunk_size:(n0 + step) * chunk_size])
    return o, states[-1].clone().reshape(B, HV, K, V)

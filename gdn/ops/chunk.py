"""The chunk algorithm (seed 002): WY factors for every chunk at once, then only S passes between chunks.

Per chunk of C tokens: one triangular inverse and a handful of matrix products (gdn.ops.wy); between
chunks a sequential walk of the K x V state, C tokens per step instead of one; then every chunk's
outputs from its start state in one batched product.
"""
from __future__ import annotations

import torch

from .wy import chunk_factors


def chunk_forward(q, k, v, g, beta, scale: float, initial_state=None, chunk_size: int = 64):
    """Chunked Gated DeltaNet on dense batches; same contract as
    :func:`gdn.ops.recurrent.recurrent_forward`: q, k ``[B, T, H, K]``, v ``[B, T, HV, V]``,
    g, beta ``[B, T, HV]``, initial_state ``[B, HV, K, V]`` or None, all in the compute dtype.
    Returns o ``[B, T, HV, V]`` and the final state ``[B, HV, K, V]``."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    f = chunk_factors(q, k, v, g, beta, scale, chunk_size)
    N = f.num_chunks
    S = q.new_zeros(B, H, HV // H, K, V) if initial_state is None else initial_state.view(B, H, HV // H, K, V)
    if torch.is_grad_enabled() and any(x.requires_grad for x in (f.u, f.w, S)):
        starts, writes = [], []                  # autograd: no in-place writes into shared buffers
        for n in range(N):                       # only S passes between chunks
            U = f.writes(S, n)
            starts.append(S)
            writes.append(U)
            S = f.end_state(S, U, n)
        starts, writes = torch.stack(starts), torch.stack(writes)
    else:
        starts = q.new_empty(N, B, H, HV // H, K, V)               # state before chunk n
        writes = torch.empty_like(f.u)
        for n in range(N):
            starts[n] = S
            writes[n] = f.writes(S, n)
            S = f.end_state(S, writes[n], n)
    o = f.outputs(starts, writes)                                      # all chunks at once
    return o, S.reshape(B, HV, K, V)

"""The chunk algorithm (seed 002): WY factors for every chunk at once, then only S passes between chunks.

Per chunk of C tokens: one triangular inverse and a handful of matrix products (gdn.ops.wy); between
chunks a sequential walk of the K x V state, C tokens per step instead of one; then every chunk's
outputs from its start state in one batched product. Long sequences go through in blocks of
BLOCK_TOKENS, the state carried from block to block: the intermediates of a block stay small enough
to be reused by the allocator and to stay in cache, instead of fresh pages for every call.
"""
from __future__ import annotations

import torch

from .common import grouped_initial_state
from .wy import chunk_factors


BLOCK_TOKENS = 512           # measured best of 128-2048 on a 2-core CPU at T = 2048 and 8192


def chunk_forward(q, k, v, g, beta, scale: float, initial_state=None, chunk_size: int = 64,
                  use_qk_l2norm: bool = False):
    """Chunked Gated DeltaNet on dense batches: o ``[B, T, HV, V]`` and the final state
    ``[B, HV, K, V]`` from q, k ``[B, T, H, K]``, v ``[B, T, HV, V]``, g, beta ``[B, T, HV]`` and
    initial_state ``[B, HV, K, V]`` or None, all in the compute dtype (as
    :func:`gdn.ops.recurrent.recurrent_forward`)."""
    T = q.shape[1]
    block = max(chunk_size, BLOCK_TOKENS // chunk_size * chunk_size)
    if T <= block:
        return _chunk_block(q, k, v, g, beta, scale, initial_state, chunk_size, use_qk_l2norm)
    outputs, S = [], initial_state
    for s in range(0, T, block):
        o, S = _chunk_block(q[:, s:s + block], k[:, s:s + block], v[:, s:s + block], g[:, s:s + block],
                            beta[:, s:s + block], scale, S, chunk_size, use_qk_l2norm)
        outputs.append(o)
    return torch.cat(outputs, dim=1), S


def _chunk_block(q, k, v, g, beta, scale, initial_state, chunk_size, use_qk_l2norm):
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    f = chunk_factors(q, k, v, g, beta, scale, chunk_size, use_qk_l2norm)
    N = f.num_chunks
    S = grouped_initial_state(initial_state, B, H, HV, K, V, like=q)
    if torch.is_grad_enabled() and any(x.requires_grad for x in (f.u, f.w, S)):
        starts, writes = [], []                  # autograd: no in-place writes into shared buffers
        for n in range(N):                       # only S passes between chunks
            U = f.writes(S, n)
            starts.append(S)
            writes.append(U)
            S = f.end_state(S, U, n)
        starts, writes = torch.stack(starts), torch.stack(writes)
    else:                                        # products written straight into their buffers
        starts = q.new_empty(N + 1, B, H, HV // H, K, V)           # state before chunk n; [N] final
        starts[0] = S
        writes = torch.empty_like(f.u)
        for n in range(N):
            f.writes(starts[n], n, out=writes[n])
            f.end_state(starts[n], writes[n], n, out=starts[n + 1])
        S, starts = starts[N], starts[:N]
    o = f.outputs(starts, writes)                                      # all chunks at once
    return o, S.reshape(B, HV, K, V)

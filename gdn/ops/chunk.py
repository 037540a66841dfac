"""The chunk algorithm (seed 002): WY factors for every chunk at once, then only S passes between chunks.

Per chunk of C tokens: one triangular inverse and a handful of matrix products (gdn.ops.wy); between
chunks a sequential walk of the K x V state, C tokens per step instead of one. Long sequences go
through in blocks of BLOCK_TOKENS, the state carried from block to block, so that a block's
intermediates stay in cache. Without autograd every intermediate lives in the thread's reused
workspace (gdn.ops.common.Workspace: no fresh pages per call) and the outputs are written straight
into the result.
"""
from __future__ import annotations

import torch

from .common import grouped_initial_state, workspace
from .wy import chunk_factors


BLOCK_TOKENS = 512           # 2-core CPU, workspace: 256-2048 within noise at T = 2048 and 8192


def chunk_forward(q, k, v, g, beta, scale: float, initial_state=None, chunk_size: int = 64,
                  use_qk_l2norm: bool = False):
    """Chunked Gated DeltaNet on dense batches: o ``[B, T, HV, V]`` and the final state
    ``[B, HV, K, V]`` from q, k ``[B, T, H, K]``, v ``[B, T, HV, V]``, g, beta ``[B, T, HV]`` and
    initial_state ``[B, HV, K, V]`` or None, all in the compute dtype (as
    :func:`gdn.ops.recurrent.recurrent_forward`)."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    block = max(chunk_size, BLOCK_TOKENS // chunk_size * chunk_size)
    blocks = [slice(s, s + block) for s in range(0, T, block)]
    S = grouped_initial_state(initial_state, B, H, HV, K, V, like=q)     # [B, H, G, K, V]
    ws = workspace(q, k, v, g, beta, initial_state)
    if ws is None:                               # autograd: fresh tensors, no in-place writes
        outputs = []
        for s in blocks:
            o, S = _block_autograd(q[:, s], k[:, s], v[:, s], g[:, s], beta[:, s], scale, S, chunk_size,
                                   use_qk_l2norm)
            outputs.append(o)
        return torch.cat(outputs, dim=1), S.reshape(B, HV, K, V)
    o = v.new_empty(B, T, HV, V)
    S = ws.get("state", S.shape, q).copy_(S)                            # updated in place
    for s in blocks:
        f = chunk_factors(q[:, s], k[:, s], v[:, s], g[:, s], beta[:, s], scale, chunk_size,
                          use_qk_l2norm, ws=ws)
        U = ws.get("writes", f.u.shape, q)
        O = ws.get("outputs", f.u.shape, q)
        for n in range(f.num_chunks):            # only S passes between chunks
            f.writes(S, n, out=U[n])
            f.start_outputs(S, n, out=O[n])      # while S is in cache
            f.end_state(S, U[n], n, out=S)
        f.finish_outputs(O, U, out=o[:, s])      # the in-chunk part, all chunks at once
    return o, S.clone().reshape(B, HV, K, V)


def _block_autograd(q, k, v, g, beta, scale, S, chunk_size, use_qk_l2norm):
    """One block with autograd: (o ``[B, T, HV, V]``, S ``[B, H, G, K, V]`` after the block)."""
    f = chunk_factors(q, k, v, g, beta, scale, chunk_size, use_qk_l2norm)
    starts, writes = [], []
    for n in range(f.num_chunks):
        U = f.writes(S, n)
        starts.append(S)
        writes.append(U)
        S = f.end_state(S, U, n)
    return f.outputs(torch.stack(starts), torch.stack(writes)), S

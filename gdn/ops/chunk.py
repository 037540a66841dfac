"""The chunk algorithm (seed 002): WY factors for every chunk at once, then only S passes between chunks.

Per chunk of C tokens: one triangular inverse and a handful of matrix products (gdn.ops.wy); between
chunks a sequential walk of the K x V state, C tokens per step instead of one. Long sequences go
through in blocks (WALK_BLOCK_TOKENS), the state carried from block to block, so that a block's
intermediates stay in cache. Without autograd every intermediate lives in the thread's reused
workspace (gdn.ops.common.Workspace: no fresh pages per call), a block computes only the factors
that do not depend on the state (gdn.ops.wy.walk_factors), and the walk forms each chunk's writes and
outputs while its operands are in cache, writing the outputs straight into the result. With
autograd the general factors (gdn.ops.wy.chunk_factors) and fresh tensors are used.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .common import grouped_initial_state, workspace
from .wy import WalkFactors, chunk_factors, walk_factors


BLOCK_TOKENS = 512           # autograd path and the scan's output pass (2-core CPU: 256-2048 within noise)
WALK_BLOCK_TOKENS = 1024     # the no-grad walk: 2-3% faster than 512 at T = 2048 and 8192 (2-core CPU)


def chunk_forward(q, k, v, g, beta, scale: float, initial_state=None, chunk_size: int = 64,
                  use_qk_l2norm: bool = False):
    """Chunked Gated DeltaNet on dense batches: o ``[B, T, HV, V]`` and the final state
    ``[B, HV, K, V]`` from q, k ``[B, T, H, K]``, v ``[B, T, HV, V]``, g, beta ``[B, T, HV]`` and
    initial_state ``[B, HV, K, V]`` or None, all in the compute dtype (as
    :func:`gdn.ops.recurrent.recurrent_forward`)."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    S = grouped_initial_state(initial_state, B, H, HV, K, V, like=q)     # [B, H, G, K, V]
    ws = workspace(q, k, v, g, beta, initial_state)
    if ws is None:                               # autograd: fresh tensors, no in-place writes
        outputs = []
        for s in _blocks(T, BLOCK_TOKENS, chunk_size):
            o, S = _block_autograd(q[:, s], k[:, s], v[:, s], g[:, s], beta[:, s], scale, S, chunk_size,
                                   use_qk_l2norm)
            outputs.append(o)
        return torch.cat(outputs, dim=1), S.reshape(B, HV, K, V)
    o = v.new_empty(B, T, HV, V)
    S = ws.get("state", S.shape, q).copy_(S)                            # updated in place
    S_is_zero = initial_state is None
    for s in _blocks(T, WALK_BLOCK_TOKENS, chunk_size):
        f = walk_factors(*_padded(q[:, s], k[:, s], v[:, s], g[:, s], beta[:, s], chunk_size), scale,
                         chunk_size, use_qk_l2norm, ws)
        _walk_block(f, S, o[:, s], S_is_zero, ws)
        S_is_zero = False
    return o, S.clone().reshape(B, HV, K, V)


def _blocks(T: int, tokens: int, chunk_size: int) -> list:
    """Slices of ~``tokens`` tokens (a multiple of ``chunk_size``) covering 0..T."""
    block = max(chunk_size, tokens // chunk_size * chunk_size)
    return [slice(s, s + block) for s in range(0, T, block)]


def _padded(q, k, v, g, beta, C: int):
    """The block padded to a multiple of C tokens with g = beta = 0 and zero q/k/v (identity maps that
    change neither the state nor any real output)."""
    pad = (-q.shape[1]) % C
    if not pad:
        return q, k, v, g, beta
    q, k, v = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v))
    return q, k, v, F.pad(g, (0, 0, 0, pad)), F.pad(beta, (0, 0, 0, pad))


def _walk_block(f: WalkFactors, S: torch.Tensor, o: torch.Tensor, S_is_zero: bool, ws) -> None:
    """Walk the state ``S`` ``[B, H, G, K, V]`` (updated in place) through one block's chunks and write
    their outputs into ``o`` ``[B, T', HV, V]`` (the block's rows of the result, T' <= N C).

    Everything that involves S, and every per-token scaling of a chunk's results, happens here chunk
    by chunk, while the chunk's operands are in cache (see :class:`gdn.ops.wy.WalkFactors`): four
    products and three elementwise passes over C x V rows a chunk. ``S_is_zero``: S is known to be
    zero (no initial state), so the first chunk needs no product with it.
    """
    N, b, C2, K = f.kq.shape
    C, V = C2 // 2, S.shape[-1]
    B, T_out, HV = o.shape[:3]
    S3, S2 = S.view(b, K, V), S.view(b, K * V)
    Y = ws.get("walk.kS_qS", (b, 2 * C, V), S)                  # [k S; q S]
    kS, qS = Y[:, :C], Y.view(B, HV, 2 * C, V)[:, :, C:]
    U = ws.get("walk.U", (b, C, V), S)
    dU = ws.get("walk.dU", (b, C, V), S)
    P = ws.get("walk.P", (b, C, V), S)
    P4 = P.view(B, HV, C, V)
    # Every chunk's operands as views made once (a chunk's products take ~0.1-0.5 ms: per-chunk view
    # and indexing overhead is not negligible).
    kq, Z, T_inv, attn = f.kq.unbind(0), f.beta_v.unbind(0), f.T_inv.unbind(0), f.attn.unbind(0)
    kt = [x[:, :C].transpose(-1, -2) for x in kq]                    # k^T of every chunk, [b, K, C]
    beta_gate, to_end, gamma = f.beta_gate.unbind(0), f.to_end.unbind(0), f.gamma.unbind(0)
    gate = f.gate.view(N, B, HV, C, 1).unbind(0)
    dst = o.transpose(1, 2).split(C, dim=2)                           # chunks of o as [B, HV, <= C, V]
    for n in range(N):
        first = S_is_zero and n == 0
        if not first:
            torch.bmm(kq[n], S3, out=Y)
            Z[n].addcmul_(beta_gate[n], kS, value=-1)                # Z = beta v - beta e^G k S
        torch.bmm(T_inv[n], Z[n], out=U)                              # the writes
        torch.mul(U, to_end[n], out=dU)                               # e^{G_C - G} U
        if first:
            torch.bmm(kt[n], dU, out=S3)
        else:
            S2.mul_(gamma[n])                                         # one scalar a state, over a flat row
            S3.baddbmm_(kt[n], dU)                                    # S = gamma S + k^T (e^{G_C - G} U)
        torch.bmm(attn[n], U, out=P)                                  # the in-chunk part
        if not first:
            P4.addcmul_(gate[n], qS)                                  # O = attn U + e^G q S
        # Formed in the contiguous buffer, then one copy into o's strided rows (padding dropped):
        # an elementwise op writing o's layout directly ran ~6x slower than in place.
        dst[n].copy_(P4[:, :, :dst[n].shape[2]])


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

"""The definition of Gated DeltaNet, token by token (the reference; decode on the CPU).

For every sequence and value head, with a K x V state S (float32, or float64 for float64 inputs):

    S_t = exp(g_t) * S_{t-1}
    S_t = S_t + beta_t * k_t (v_t - S_t^T k_t)^T      # delta correction against the decayed state
    o_t = scale * S_t^T q_t                           # output after the update
"""
from __future__ import annotations

import torch

from .common import from_grouped_output, grouped_initial_state, l2norm, state_from_grouped, to_grouped


def recurrent_forward(q, k, v, g, beta, scale: float, initial_state=None, chunk_size: int = 64,
                      use_qk_l2norm: bool = False):
    """Token-by-token Gated DeltaNet on dense batches.

    Args:
        q, k: ``[B, T, H, K]``; v: ``[B, T, HV, V]``; g, beta: ``[B, T, HV]``: all in the compute
            dtype (float32 or float64).
        scale: multiplies the output.
        initial_state: ``[B, HV, K, V]`` in the compute dtype, or None for zeros.
        chunk_size: unused (same signature as the other algorithms).
        use_qk_l2norm: l2-normalise q and k over K first.
    Returns:
        o ``[B, T, HV, V]`` and the final state ``[B, HV, K, V]``, both in the compute dtype.
    """
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    q, k, v, g, beta = to_grouped(q, k, v, g, beta)
    G = HV // H
    S = grouped_initial_state(initial_state, B, H, HV, K, V, like=q)
    # Without autograd the state is updated in place (a copy of the caller's): one pass over it for
    # the decay and one for the write a token, no temporaries (a decode step is mostly these passes).
    in_place = not (torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v, g, beta, S)))
    S = S.clone(memory_format=torch.contiguous_format) if in_place else S.contiguous()
    outputs = []
    for t in range(T):
        k_t = k[:, :, :, t, None, :]                                   # [B, H, 1, 1, K]
        decay = g[:, :, :, t, None, None].exp()
        S = S.mul_(decay) if in_place else S * decay                   # decay first
        predicted = (k_t @ S).squeeze(-2)                              # [B, H, G, V] = S^T k
        u = beta[:, :, :, t, None] * (v[:, :, :, t] - predicted)       # what the token really writes
        # The rank-1 write S + k u^T as one batched product with a length-1 inner dimension.
        k_col = k_t.transpose(-1, -2).expand(B, H, G, K, 1).reshape(-1, K, 1)
        S3, u_row = S.view(-1, K, V), u.reshape(-1, 1, V)
        S = (S3.baddbmm_(k_col, u_row) if in_place else S3.baddbmm(k_col, u_row)).view(B, H, G, K, V)
        outputs.append(scale * (q[:, :, :, t, None, :] @ S).squeeze(-2))
    o = torch.stack(outputs, dim=3) if T else v.new_empty(v.shape)      # [B, H, G, T, V]
    return from_grouped_output(o), state_from_grouped(S)

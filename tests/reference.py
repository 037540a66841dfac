"""An independent float64 Gated DeltaNet, written plainly (no code shared with gdn), for the tests."""
from __future__ import annotations

import torch


def reference_gdn(q, k, v, g, beta, *, scale=None, initial_state=None, cu_seqlens=None, use_qk_l2norm=False):
    """Token-by-token float64 recurrence, one (sequence, value head) at a time.

    q, k [B, T, H, K]; v [B, T, HV, V]; g, beta [B, T, HV]; initial_state [N, HV, K, V].
    Returns o [B, T, HV, V] and final states [N, HV, K, V], float64.
    """
    q, k, v, g, beta = (x.detach().double().cpu() for x in (q, k, v, g, beta))
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if use_qk_l2norm:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    scale = K ** -0.5 if scale is None else scale
    if cu_seqlens is None:
        seqs = [(b, 0, T) for b in range(B)]
    else:
        cu = [int(x) for x in cu_seqlens]
        seqs = [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]
    o = torch.zeros(B, T, HV, V, dtype=torch.float64)
    finals = torch.zeros(len(seqs), HV, K, V, dtype=torch.float64)
    for n, (b, start, end) in enumerate(seqs):
        for h in range(HV):
            qk_head = h // (HV // H)
            S = torch.zeros(K, V, dtype=torch.float64)
            if initial_state is not None:
                S = initial_state[n, h].detach().double().cpu().clone()
            for t in range(start, end):
                kt = k[b, t, qk_head]
                S = torch.exp(g[b, t, h]) * S
                S = S + beta[b, t, h] * torch.outer(kt, v[b, t, h] - S.T @ kt)
                o[b, t, h] = scale * (S.T @ q[b, t, qk_head])
            finals[n, h] = S
    return o, finals


def random_inputs(B, T, H, HV, K, V, *, dtype=torch.float64, gate="normal", beta_mode="rand", seed=0,
                  device="cpu", initial_state=False, N=None):
    """Random q, k, v, g, beta (and optionally an initial state for N sequences)."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen, dtype=torch.float64)
    k = torch.randn(B, T, H, K, generator=gen, dtype=torch.float64) / K ** 0.5
    v = torch.randn(B, T, HV, V, generator=gen, dtype=torch.float64)
    if gate == "normal":
        g = torch.nn.functional.logsigmoid(torch.randn(B, T, HV, generator=gen, dtype=torch.float64) + 2)
    elif gate == "zero":
        g = torch.zeros(B, T, HV, dtype=torch.float64)
    elif gate == "strong":
        g = torch.full((B, T, HV), -30.0, dtype=torch.float64)
    else:
        raise ValueError(gate)
    if beta_mode == "rand":
        beta = torch.rand(B, T, HV, generator=gen, dtype=torch.float64)
    else:
        beta = torch.full((B, T, HV), float(beta_mode), dtype=torch.float64)
    S0 = None
    if initial_state:
        S0 = torch.randn(N if N is not None else B, HV, K, V, generator=gen, dtype=torch.float64)
    cast = lambda x: None if x is None else x.to(device=device, dtype=dtype)
    gate_dtype = torch.float64 if dtype == torch.float64 else torch.float32   # gates stay fp32 in low precision
    gates = lambda x: x.to(device=device, dtype=gate_dtype)
    S0 = None if S0 is None else S0.to(device=device, dtype=gate_dtype)
    return cast(q), cast(k), cast(v), gates(g), gates(beta), S0


def parallel_key_inputs(beta_max=1.0, *, device="cpu", T=128, K=32, V=32):
    """The in-chunk inverse's hard case, bf16 inputs: nearly parallel keys (one direction plus 5%
    noise), beta in [0.9, 1] x beta_max and slow decay (g in [-0.01, 0]), for B = 1, H = 1, HV = 2, and
    an fp32 initial state. The inverse's partial products (powers of A's 16 x 16 blocks) grow to
    thousands here while the inverse stays near 1. Returns q, k, v, g, beta, S0."""
    gen = torch.Generator().manual_seed(0)
    B, H, HV = 1, 1, 2
    k = (torch.randn(K, generator=gen) + 0.05 * torch.randn(B, T, H, K, generator=gen)).bfloat16()
    q = torch.randn(B, T, H, K, generator=gen).bfloat16()
    v = torch.randn(B, T, HV, V, generator=gen).bfloat16()
    g = -torch.rand(B, T, HV, generator=gen) * 0.01
    beta = (0.9 + 0.1 * torch.rand(B, T, HV, generator=gen)) * beta_max
    S0 = torch.randn(B, HV, K, V, generator=gen)
    return tuple(x.to(device) for x in (q, k, v, g, beta, S0))

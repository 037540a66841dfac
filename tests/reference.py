"""An independent float64 Gated DeltaNet, written plainly (no code shared with gdn), for the tests."""
from __future__ import annotations

import torch

from tests.tolerances import rel_err


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


def with_row_norms(x: torch.Tensor, low: float, high: float, seed: int = 0) -> torch.Tensor:
    """x [..., K] with each row rescaled to a norm drawn uniformly from [low, high] (e.g. around
    sqrt of l2norm's eps, where the eps shapes the normalised rows)."""
    gen = torch.Generator().manual_seed(seed)
    norms = low + (high - low) * torch.rand(x.shape[:-1] + (1,), generator=gen, dtype=torch.float64)
    return (x.double() / x.double().norm(dim=-1, keepdim=True) * norms).to(x.dtype)


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


def repeated_key_inputs(beta, *, device="cpu", T=256, K=32, V=32, H=1, HV=2, dtype=torch.bfloat16):
    """Every key of a head the same unit direction, beta constant (near 2: each step a reflection,
    I - beta k k^T, which keeps the state's norm and carries every rounding on) and g = 0 (nothing
    forgets), for B = 1: T diag(beta)'s rows alternate in sign across the chunk, the same in every
    chunk, so its fp16 rounding grew into o and S (the fp16 walk 7e-2 / 1.7e-1 off at beta 1.9 before
    the WY pass stored its low parts, NOTES.md v67). q random; q, k, v in dtype, g, beta fp32.
    Returns q, k, v, g, beta."""
    gen = torch.Generator().manual_seed(1)
    k = torch.nn.functional.normalize(torch.randn(1, 1, H, K, generator=gen), dim=-1).expand(1, T, H, K)
    q = torch.randn(1, T, H, K, generator=gen)
    v = torch.randn(1, T, HV, V, generator=gen)
    g = torch.zeros(1, T, HV)
    b = torch.full((1, T, HV), float(beta))
    return tuple(x.to(device) for x in (q.to(dtype), k.to(dtype).contiguous(), v.to(dtype), g, b))


# (values' scale, initial state's scale, what else): magnitudes far past fp16's range (65504 down to
# 6e-5), jumps inside a sequence, a gate that forgets at a chunk's start, all zeros: for the walks on
# fp16 operands scaled by powers of two (gdn.ops.triton.walk_f16 and the Gluon walks).
MAGNITUDES = {
    "v x 1e4": (1e4, 1.0, None), "v and S0 x 1e-8": (1e-8, 1e-8, None), "v and S0 x 1e-30": (1e-30, 1e-30, None),
    "v and S0 x 1e30": (1e30, 1e30, None), "S0 x 1e6": (1.0, 1e6, None), "S0 x 1e-20, v x 1e20": (1e20, 1e-20, None),
    "v x 1e-7, no S0": (1e-7, None, None), "v jumps x 3e4 mid-sequence": (1.0, 1.0, "jump"),
    "v zero, then x 1e16": (1.0, None, "zeros then big"), "a gate forgets, then v x 1e-8": (1.0, None, "forget"),
    "v and S0 x 1e36": (1e36, 1e36, None), "v zero on a random S0": (0.0, 1.0, "erase"), "zeros": (0.0, 0.0, None),
    "a gate of -100 forgets S0 x 1e10, v x 1e-30": (1e-30, 1e10, "deep forget"),
    "a gate forgets at a chunk's last token, then v x 1e-6": (1.0, None, "late forget"),
    "S0 with one entry of -1e7": (1.0, 1.0, "negative peak"),
}


def magnitude_inputs(case: str, dim: int, device="cpu"):
    """bf16 q, k, v, fp32 g, beta and S0 (or None) for B = 1, T = 256, H = HV = 2, K = V = dim, scaled
    as MAGNITUDES[case] says (the forgetting gates at tokens 63 and 64: a chunk's edge at chunks of
    32 or 64)."""
    q, k, v, g, beta, S0 = random_inputs(1, 256, 2, 2, dim, dim, dtype=torch.bfloat16, initial_state=True, seed=3,
                                         device=device)
    v_scale, s_scale, other = MAGNITUDES[case]
    v = v.float() * v_scale
    if other == "jump":
        v[:, 128:] *= 3e4
    elif other == "zeros then big":
        v[:, :160] = 0
        v[:, 160:] *= 1e16
    elif other == "forget":                  # at token 64, a chunk's first: the old state is gone
        g = g.clone()
        g[:, 64] = -60.0
        v[:, 64:] *= 1e-8
    elif other == "deep forget":             # e^G below fp32's range: the scales' ratio must not be
        g = g.clone()
        g[:, 0] = -100.0
    elif other == "late forget":             # the next chunk's scale comes from the writes, not the start
        g = g.clone()
        g[:, 63] = -60.0
        v[:, 32:] *= 1e-6
    elif other == "negative peak":           # the state's scale from its largest |entry|, not its largest
        S0 = S0.clone()
        S0[:, :, 3, 5] = -1e7
    return q, k, v.to(torch.bfloat16), g, beta, None if s_scale is None else S0 * s_scale


def magnitude_reference(inputs, chunk: int):
    """The float64 reference on magnitude_inputs' (q, k, v, g, beta, S0): o [B, T, HV, V], the final
    state and the state at the last chunk's start (chunk: the walk's chunk size), each [1, HV, K, V]."""
    q, k, v, g, beta, S0 = inputs
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    n = (q.shape[1] - 1) // chunk * chunk
    _, S_last_start = reference_gdn(q[:, :n], k[:, :n], v[:, :n], g[:, :n], beta[:, :n], initial_state=S0,
                                    use_qk_l2norm=True)
    return o_ref, S_ref, S_last_start


def assert_any_magnitude(case: str, o, S, reference) -> None:
    """What a walk scaled by powers of two must give on magnitude_inputs(case), against
    magnitude_reference's (o_ref, S_ref, S_last_start): finite, and as exact as at unit scale (o 1e-2,
    S 1.5e-3; the rows after a forgetting gate on their own too); zeros for zeros. Where the delta
    rule erases the state ("erase": v = 0 on keys that span the state's rows, beta near 1) the state
    is the difference of two near-equal terms rounded to 16 bits: its error is bounded by 1.5e-3 of
    the state the last chunk started from, not of what is left (walk_f16's docstring: at 64 dims and
    chunks of 64 a chunk erases ~1e6 of the state, and S comes out ~0.1 off relative to itself)."""
    o_ref, S_ref, S_last_start = reference
    assert torch.isfinite(o).all() and torch.isfinite(S).all()
    if case == "zeros":
        assert not o.any() and not S.any()
        return
    assert rel_err(o, o_ref) < 1e-2, rel_err(o, o_ref)
    if MAGNITUDES[case][2] == "erase":
        err = ((S.double().cpu() - S_ref.double().cpu()).abs().max() / S_last_start.double().abs().max().cpu()).item()
        assert err < 1.5e-3, err
    else:
        assert rel_err(S, S_ref) < 1.5e-3, rel_err(S, S_ref)
    if MAGNITUDES[case][2] in ("forget", "late forget"):
        assert rel_err(o[:, 64:], o_ref[:, 64:]) < 1e-2

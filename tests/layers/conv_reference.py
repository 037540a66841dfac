"""An independent reference for the causal conv: per sequence, the W-1 state columns (or zeros) are
concatenated in front of the tokens and F.conv1d runs without padding, in float64."""
import torch
import torch.nn.functional as F


def reference_conv(x, weight, bias=None, initial_state=None, cu_seqlens=None, silu=True):
    """x ``[B, T, D]``, weight ``[D, W]`` -> (y ``[B, T, D]`` float64, final state ``[N, D, W-1]`` float64)."""
    B, T, D = x.shape
    W = weight.shape[1]
    if cu_seqlens is None:
        pieces = [(n, x[n]) for n in range(B)]
    else:
        cu = cu_seqlens.tolist()
        pieces = [(n, x[0, cu[n]:cu[n + 1]]) for n in range(len(cu) - 1)]
    outs, finals = [], []
    for n, seq in pieces:
        state = initial_state[n].double() if initial_state is not None else torch.zeros(D, W - 1, dtype=torch.float64)
        ext = torch.cat([state, seq.double().T], dim=1)                    # [D, W-1 + L]
        if seq.shape[0]:
            y = F.conv1d(ext[None], weight.double()[:, None], None if bias is None else bias.double(), groups=D)[0].T
        else:
            y = torch.zeros(0, D, dtype=torch.float64)
        outs.append(F.silu(y) if silu else y)
        finals.append(ext[:, ext.shape[1] - (W - 1):])
    y = torch.stack(outs) if cu_seqlens is None else torch.cat(outs)[None]
    return y, torch.stack(finals)


def random_conv_inputs(B, T, D, W, *, state=True, bias=True, seed=0, cu_seqlens=None):
    gen = torch.Generator().manual_seed(seed)
    N = B if cu_seqlens is None else len(cu_seqlens) - 1
    x = torch.randn(B, T, D, generator=gen)
    weight = torch.randn(D, W, generator=gen)
    b = torch.randn(D, generator=gen) if bias else None
    s0 = torch.randn(N, D, W - 1, generator=gen) if state else None
    return x, weight, b, s0

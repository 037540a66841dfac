"""Depthwise causal conv1d (+ SiLU) over q/k/v, with a carried state and varlen support.

Every channel d has its own W taps: ``y[t, d] = act(bias[d] + sum_j w[d, j] * x[t - (W-1) + j, d])``.
Reads before a sequence's first token come from that sequence's conv state (its previous W-1
inputs), or are zero without a state; with ``cu_seqlens`` nothing crosses a sequence boundary.

Layout is channels-last, ``x [B, T, D]``, as the input projection produces it, so no transpose is
needed on the way in or out. Accumulation is float32 (float64 for float64 inputs).

Dispatch: CUDA tensors go to the fused Triton kernel (``gdn/ops/triton/causal_conv1d.py``, float32
accumulation), float64 ones and every other device to the torch code below;
``backend="causal_conv1d"`` uses the ``causal-conv1d`` package.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..checks import check_cu_seqlens
from ..ops.common import triton_interpreting

BACKENDS = ("auto", "torch", "triton", "causal_conv1d")
ACTIVATIONS = (None, "silu", "swish")


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    activation: str | None = "silu",
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Depthwise causal conv1d with optional SiLU, carried state and packed sequences.

    Args:
        x: ``[B, T, D]`` inputs (any float dtype).
        weight: ``[D, W]`` taps (an ``nn.Conv1d`` depthwise weight ``[D, 1, W]`` is also accepted).
        bias: ``[D]`` or None.
        initial_state: ``[N, D, W-1]``: the W-1 inputs that preceded each sequence (oldest first),
            or None for zeros. N = B, or ``len(cu_seqlens) - 1``.
        output_final_state: also return each sequence's last W-1 inputs, ``[N, D, W-1]``.
        cu_seqlens: ``[N+1]`` int cumulative sequence lengths (starts at 0, ends at T) with B == 1.
        activation: "silu" (or its alias "swish") or None.
        backend: "auto" (Triton on CUDA unless x is float64, torch elsewhere), "torch", "triton"
            (float32 accumulation whatever x's dtype) or "causal_conv1d".
    Returns:
        y ``[B, T, D]`` in x's dtype, and the final state ``[N, D, W-1]`` (dtype of initial_state,
        else of x) or None.
    """
    weight = _check(x, weight, bias, initial_state, cu_seqlens, activation, backend)
    if backend == "auto":
        backend = "triton" if x.is_cuda and x.dtype != torch.float64 else "torch"
    if backend == "triton":
        if not x.is_cuda and not triton_interpreting():
            raise ValueError("backend='triton' needs CUDA tensors (or TRITON_INTERPRET=1 set before triton "
                             "is imported, to run the kernel on CPU tensors in Triton's interpreter)")
        from gdn.ops.triton.causal_conv1d import causal_conv1d_triton

        y = causal_conv1d_triton(x, weight, bias, initial_state, cu_seqlens, activation is not None)
    elif backend == "causal_conv1d":
        y = _causal_conv1d_package(x, weight, bias, initial_state, cu_seqlens, activation)
    else:
        y = causal_conv1d_torch(x, weight, bias, initial_state, cu_seqlens, activation is not None)
    final_state = conv_final_state(x, initial_state, cu_seqlens, weight.shape[1]) if output_final_state else None
    return y, final_state


def causal_conv1d_torch(x, weight, bias=None, initial_state=None, cu_seqlens=None, silu: bool = True,
                        block_tokens: int = 128):
    """The torch path of :func:`causal_conv1d` (no argument checks, returns y ``[B, T, D]`` only).

    Works through the sequence in blocks of ``block_tokens``: each block reads its tokens plus the
    W-1 before them, sums the W shifted products, adds bias, applies SiLU and is written once, so
    the passes stay in cache instead of streaming [B, T, D] tensors through memory W + 2 times.
    """
    if cu_seqlens is not None:
        return _varlen_torch(x, weight, bias, initial_state, cu_seqlens, silu)
    B, T, D = x.shape
    W = weight.shape[1]
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    w = weight.to(dtype)                                   # [D, W]
    b = None if bias is None else bias.to(dtype)
    state = None if initial_state is None else initial_state.to(dtype).transpose(1, 2)   # [B, W-1, D]
    y = torch.empty_like(x)
    for s in range(0, T, block_tokens):
        e = min(s + block_tokens, T)
        lo = max(s - (W - 1), 0)
        window = x[:, lo:e].to(dtype)                      # tokens lo..e-1; a view for float32 input
        acc = window[:, s - lo:] * w[:, W - 1]             # the current token's tap
        for shift in range(1, W):
            first = max(s, shift)                          # first token whose tap reaches back `shift`
            if first < e:
                acc[:, first - s:].addcmul_(window[:, first - shift - lo:e - shift - lo], w[:, W - 1 - shift])
        if state is not None and s < W - 1:
            # Taps that reach before token 0 read the state: token t, tap j reads state column t + j
            # (tokens s .. t1 - 1 of this block; a block may start after token 0 when it is short).
            for j in range(W - 1):
                t1 = min(W - 1 - j, e)
                if t1 > s:
                    acc[:, :t1 - s].addcmul_(state[:, s + j:t1 + j], w[:, j])
        if b is not None:
            acc += b
        y[:, s:e] = F.silu(acc, inplace=True) if silu else acc
    return y


def _varlen_torch(x, weight, bias, initial_state, cu_seqlens, silu):
    """Packed sequences: lay every sequence out after its own W-1 state rows (zeros without a
    state), convolve the padded row as one dense sequence, and keep the rows of real tokens. Each
    output then only sees its own sequence's inputs or state."""
    T, D = x.shape[1], x.shape[2]
    W = weight.shape[1]
    N = cu_seqlens.numel() - 1
    pad = W - 1
    if pad == 0:
        return causal_conv1d_torch(x, weight, bias, None, None, silu)
    cu = cu_seqlens.to(device=x.device, dtype=torch.long)
    seq = _token_to_sequence(cu, T)                         # [T] sequence of each token
    rows_x = torch.arange(T, device=x.device) + (seq + 1) * pad          # where token t lands
    rows_s = (cu[:-1] + torch.arange(N, device=x.device) * pad)[:, None] + torch.arange(pad, device=x.device)
    # In the compute dtype, so that a float32 state next to bfloat16 tokens is not rounded.
    padded = x.new_zeros(1, T + N * pad, D, dtype=torch.float64 if x.dtype == torch.float64 else torch.float32)
    padded[0, rows_x] = x[0].to(padded.dtype)
    if initial_state is not None:
        padded[0, rows_s.reshape(-1)] = initial_state.transpose(1, 2).reshape(N * pad, D).to(padded.dtype)
    y = causal_conv1d_torch(padded, weight, bias, None, None, silu)
    return y[:, rows_x].to(x.dtype)


def conv_final_state(x, initial_state, cu_seqlens, W: int) -> torch.Tensor:
    """The last W-1 inputs of every sequence, ``[N, D, W-1]`` oldest first; a sequence shorter than
    W-1 keeps the tail of its initial state (or zeros) in front of its tokens."""
    B, T, D = x.shape
    pad = W - 1
    dtype = initial_state.dtype if initial_state is not None else x.dtype
    if cu_seqlens is None:
        starts = torch.arange(B, device=x.device) * T
        ends = starts + T
        flat = x.reshape(B * T, D)
    else:
        cu = cu_seqlens.to(device=x.device, dtype=torch.long)
        starts, ends = cu[:-1], cu[1:]
        flat = x[0]
    N = starts.numel()
    if pad == 0:
        return x.new_zeros(N, D, 0, dtype=dtype)
    pos = ends[:, None] - pad + torch.arange(pad, device=x.device)      # [N, W-1] source rows
    in_seq = pos >= starts[:, None]
    if flat.shape[0] == 0:
        out = x.new_zeros(N, pad, D, dtype=dtype)
    else:
        out = flat[pos.clamp(min=0, max=flat.shape[0] - 1)].to(dtype)   # [N, W-1, D]
    if initial_state is not None:
        # Position p before the start reads state column W-1 + (p - start).
        col = (pos - starts[:, None] + pad).clamp(min=0, max=pad - 1)  # [N, W-1]
        from_state = torch.gather(initial_state.transpose(1, 2), 1, col[:, :, None].expand(N, pad, D))
        out = torch.where(in_seq[:, :, None], out, from_state.to(dtype))
    else:
        out = out * in_seq[:, :, None]
    return out.transpose(1, 2).contiguous()


def _token_to_sequence(cu: torch.Tensor, T: int) -> torch.Tensor:
    """``[T]`` index of the sequence each packed token belongs to (no host sync)."""
    return torch.searchsorted(cu[1:], torch.arange(T, device=cu.device), right=True)


def _causal_conv1d_package(x, weight, bias, initial_state, cu_seqlens, activation):
    """The ``causal-conv1d`` package (CUDA). It takes ``[B, D, T]``; a transposed channels-last view
    is what it wants for states and seq_idx."""
    try:
        from causal_conv1d import causal_conv1d_fn
    except ImportError as e:
        raise ValueError("backend='causal_conv1d' needs the causal-conv1d package (pip install causal-conv1d)") from e
    seq_idx = None
    if cu_seqlens is not None:
        if initial_state is not None:
            raise ValueError("backend='causal_conv1d' does not take initial_state together with cu_seqlens")
        cu = cu_seqlens.to(device=x.device, dtype=torch.long)
        seq_idx = _token_to_sequence(cu, x.shape[1]).to(torch.int32)[None]
    states = None
    if initial_state is not None:
        states = initial_state.to(x.dtype).transpose(1, 2).contiguous().transpose(1, 2)
    y = causal_conv1d_fn(x.transpose(1, 2), weight.to(x.dtype), None if bias is None else bias.to(x.dtype),
                         seq_idx=seq_idx, initial_states=states, activation="silu" if activation else None)
    return y.transpose(1, 2)


def _check(x, weight, bias, initial_state, cu_seqlens, activation, backend) -> torch.Tensor:
    """Validate arguments; returns the weight as ``[D, W]``."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ValueError(f"x must be a [B, T, D] tensor, got shape {getattr(x, 'shape', None)}")
    # Floats only: an integer x would come back truncated to integers (the output takes x's dtype).
    for name, t in (("x", x), ("weight", weight), ("bias", bias), ("initial_state", initial_state)):
        if t is not None and not (isinstance(t, torch.Tensor) and t.is_floating_point()):
            raise TypeError(f"{name} must be a floating-point torch.Tensor, got "
                            f"{t.dtype if isinstance(t, torch.Tensor) else type(t).__name__}")
    B, T, D = x.shape
    if weight.dim() == 3 and weight.shape[1] == 1:
        weight = weight[:, 0]
    if weight.dim() != 2 or weight.shape[0] != D:
        raise ValueError(f"weight must be [D={D}, W], got {tuple(weight.shape)}")
    W = weight.shape[1]
    if bias is not None and tuple(bias.shape) != (D,):
        raise ValueError(f"bias must be [D={D}], got {tuple(bias.shape)}")
    N = B
    if cu_seqlens is not None:
        check_cu_seqlens(cu_seqlens, B, T)          # the op's own check: what reaches the kernels is valid
        N = cu_seqlens.numel() - 1
    if initial_state is not None and tuple(initial_state.shape) != (N, D, W - 1):
        raise ValueError(f"initial_state must be [N={N}, D={D}, W-1={W - 1}], got {tuple(initial_state.shape)}")
    return weight

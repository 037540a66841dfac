"""Adapters that run the peer libraries on gdn's inputs, so one benchmark can time them side by side.

Every adapter has the same call::

    o, final_state = fn(q, k, v, g, beta, *, scale=None, initial_state=None,
                        output_final_state=False, cu_seqlens=None, use_qk_l2norm=False)

with gdn's (= FLA's) layout:

    q, k           [B, T, H, K]    bf16/fp16/fp32
    v              [B, T, HV, V]   HV a multiple of H; value head h reads q/k head h // (HV // H)
    g              [B, T, HV]      fp32 natural-log decay (<= 0)
    beta           [B, T, HV]      fp32, usually in (0, 1)
    initial_state  [N, HV, K, V]   fp32, N = B (or len(cu_seqlens) - 1 for varlen)
    cu_seqlens     [N + 1]         int32 on the device, B == 1 (FlashAttention convention), or None
    o              [B, T, HV, V]   dtype of q;   final_state [N, HV, K, V] fp32, or None

Peers (versions as measured in shared/GUIDE.md; the GPU machine gets them from
scripts/pack_peers.sh + scripts/unpack_peers.sh):

- "fla":      fla-core 0.6.0 `fla.ops.gated_delta_rule.chunk_gated_delta_rule`, its own Triton path.
- "flashqla": flash-qla 0.1.3 `flash_qla.chunk_gated_delta_rule` (TileLang, SM90/SM100/SM120 only).
- "hf":       transformers 5.17 `torch_chunk_gated_delta_rule` (Qwen3-Next / Qwen3.5, pure torch).

Nothing here imports a peer at module import time: `available_peers` imports them lazily.
"""
from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Callable, Iterator

import torch

PeerFn = Callable[..., "tuple[torch.Tensor, torch.Tensor | None]"]


@contextlib.contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    """Set an environment variable for the duration of a call, then restore it."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _make_fla() -> PeerFn:
    """FLA's own Triton chunk kernel (never its FlashQLA backend).

    fla-core 0.6.0 wraps `chunk_gated_delta_rule` in `fla.backends.dispatch('gated_delta_rule')`; the
    wrapper asks each registered backend `is_enabled()` on EVERY call, which reads
    `os.environ['FLA_FLASH_QLA']` at that moment (fla/backends.py, BaseBackend.is_enabled). With
    flash_qla importable, the FlashQLA backend (priority 3) wins unless that variable is "0". So the
    variable must be "0" at call time, not at import time; we set it around the call only, so the
    "flashqla" adapter and anything else in the process are unaffected. (FLA_DISABLE_BACKEND_DISPATCH
    would also work but is read once at import and also turns off the TileLang fallback that FLA's
    backward needs on Triton 3.6 / Hopper.) The backward is chosen in the forward's autograd
    Function, so it stays on FLA's path too.

    FLA supports HV > H natively ("GVA"), g/beta fp32, int32 or int64 cu_seqlens, K and V of any
    size its Triton kernels take. Without `cu_seqlens_cpu`, varlen calls do a host sync of
    cu_seqlens (FLA caches the derived chunk indices per cu_seqlens tensor).
    """
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    def fla(q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=False,
            cu_seqlens=None, use_qk_l2norm=False):
        with _env("FLA_FLASH_QLA", "0"):
            return chunk_gated_delta_rule(
                q, k, v, g, beta, scale=scale, initial_state=initial_state,
                output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm,
                cu_seqlens=cu_seqlens)

    return fla


def _make_flashqla() -> PeerFn:
    """FlashQLA (Qwen team, TileLang), called directly (not through FLA's dispatcher).

    Same layout and argument names as FLA (q/k [B,T,H,K], v [B,T,HV,V], g/beta [B,T,HV],
    states [N,HV,K,V] fp32, `use_qk_l2norm_in_kernel`, `cu_seqlens`); HV > H native; initial_state
    and output_final_state supported; g/beta dtypes are template parameters (fp32 fine); cu_seqlens
    int32 or int64. Differences:
      - q, k, v must be bf16 or fp16 and of one dtype; K == V == 128 only (asserted in its kernels);
        we raise NotImplementedError up front for anything else so a benchmark can skip the row.
      - importing flash_qla queries the GPU's compute capability and raises ValueError unless it is
        SM90/SM100/SM103/SM120/SM121 (so it cannot even be imported on a CPU machine).
      - auto_cp=True (its default, kept here as in the GUIDE's table): with B == 1 it splits a long
        sequence across thread blocks where the preceding chunks' summed log-decay is below a
        threshold, warming each piece up from a zero state: an approximation that depends on g.
      - kernels are JIT-compiled by TileLang on first use per shape family (minutes): warm up.
    """
    import flash_qla  # raises ValueError on an unsupported GPU

    def flashqla(q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=False,
                 cu_seqlens=None, use_qk_l2norm=False):
        if q.dtype not in (torch.bfloat16, torch.float16) or not (q.dtype == k.dtype == v.dtype):
            raise NotImplementedError(f"flash_qla takes bf16/fp16 q, k, v only, got {q.dtype}")
        if q.shape[-1] != 128 or v.shape[-1] != 128:
            raise NotImplementedError(f"flash_qla takes K = V = 128 only, got {q.shape[-1]}, {v.shape[-1]}")
        return flash_qla.chunk_gated_delta_rule(
            q, k, v, g, beta, scale=scale, initial_state=initial_state,
            output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm,
            cu_seqlens=cu_seqlens)

    return flashqla


def _make_hf() -> PeerFn:
    """transformers' pure-torch chunk algorithm from the Qwen3-Next modeling file.

    Signature (transformers 5.17, models/qwen3_next/modeling_qwen3_next.py; Qwen3.5's copy is
    identical): torch_chunk_gated_delta_rule(query, key, value, g, beta, chunk_size=64,
    initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=False, **kwargs), inputs
    [B, T, heads, D], state [B, HV, K, V]. Differences we adapt to:
      - the module attribute is wrapped by `use_kernel_func_from_hub_with_fallback("chunk_gated_delta_rule",
        "fla")`: when fla is importable (as on the GPU machine) it silently calls FLA instead. We
        take the innermost function with `inspect.unwrap` so "hf" always times the torch code.
      - no grouped heads: q and k [B,T,H,K] are broadcast against the [B,HV,K,V] state, so we
        repeat_interleave them to HV heads (as the Qwen3-Next layer does before its call; timed).
      - no `scale` argument: it always uses K**-0.5. o is linear in the scale (the state does not
        depend on q), so another scale is applied to the output afterwards.
      - no cu_seqlens: varlen raises NotImplementedError.
      - computes in fp32 whatever the input dtype; o is cast back to q's dtype, the state is fp32.
    """
    from transformers.models.qwen3_next import modeling_qwen3_next

    torch_chunk = inspect.unwrap(modeling_qwen3_next.torch_chunk_gated_delta_rule)
    if not torch_chunk.__code__.co_filename.endswith("modeling_qwen3_next.py"):
        raise ImportError(f"unexpected torch_chunk_gated_delta_rule from {torch_chunk.__code__.co_filename}")

    def hf(q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=False,
           cu_seqlens=None, use_qk_l2norm=False):
        if cu_seqlens is not None:
            raise NotImplementedError("transformers' torch_chunk_gated_delta_rule has no cu_seqlens")
        group = v.shape[2] // q.shape[2]
        if group > 1:
            q = q.repeat_interleave(group, dim=2)  # [B, T, HV, K]: value head h reads head h // group
            k = k.repeat_interleave(group, dim=2)
        o, state = torch_chunk(q, k, v, g, beta, chunk_size=64, initial_state=initial_state,
                               output_final_state=output_final_state,
                               use_qk_l2norm_in_kernel=use_qk_l2norm)
        default = q.shape[-1] ** -0.5
        if scale is not None and scale != default:
            o = (o.float() * (scale / default)).to(o.dtype)
        return o, state

    return hf


def available_peers(device: torch.device | str,
                    errors: dict[str, str] | None = None) -> dict[str, PeerFn]:
    """The peers that import and can run on `device`, by name ("fla", "flashqla", "hf").

    FLA and FlashQLA are offered on CUDA devices only (Triton / TileLang kernels); "hf" wherever
    transformers imports. If `errors` is given, it receives the reason each missing peer is missing.
    """
    device = torch.device(device)
    makers = {"fla": _make_fla, "flashqla": _make_flashqla, "hf": _make_hf}
    peers: dict[str, PeerFn] = {}
    for name, make in makers.items():
        if name != "hf" and device.type != "cuda":
            if errors is not None:
                errors[name] = f"needs a CUDA device, got {device.type}"
            continue
        try:
            peers[name] = make()
        except Exception as exc:  # ImportError, or flash_qla's ValueError on an unsupported GPU
            if errors is not None:
                errors[name] = f"{type(exc).__name__}: {exc}"
    return peers

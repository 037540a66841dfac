"""Argument checks for the public op: every bad input gets a clear error naming the argument."""
from __future__ import annotations

import numbers
import weakref

import torch

BACKENDS = ("auto", "recurrent", "chunk", "scan", "triton")


# The dtypes every backend computes in (float8 is floating point too, but nothing here computes in it).
FLOAT_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)


def _floating(name: str, x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be a floating-point tensor (float64/float32/bfloat16/float16), got {x.dtype}")
    return x


def check_flag(name: str, value) -> None:
    """A switch must be a bool (numpy's too): a string such as "False" is truthy, and a tensor or a
    positional argument one place off would otherwise fail deep inside, or silently flip the switch."""
    numpy_bool = type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_")   # numpy 2, 1
    if not (isinstance(value, bool) or numpy_bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def _shape(name: str, x: torch.Tensor, expected: tuple, what: str) -> None:
    if tuple(x.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {what} = {tuple(expected)}, got {tuple(x.shape)}")


def check_inputs(q, k, v, g, beta, scale, initial_state, cu_seqlens, chunk_size, backend,
                 output_final_state=False, use_qk_l2norm=False):
    """Validate the op's arguments. Returns N, the number of sequences (B, or len(cu_seqlens) - 1)."""
    check_flag("output_final_state", output_final_state)
    check_flag("use_qk_l2norm", use_qk_l2norm)
    for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
        _floating(name, x)
    if q.dim() != 4:
        raise ValueError(f"q must be 4-D [B, T, H, K], got shape {tuple(q.shape)}")
    B, T, H, K = q.shape
    if H == 0 or K == 0:
        raise ValueError(f"q must have at least one head and a head dim K >= 1, got shape {tuple(q.shape)}")
    if k.dim() != 4:
        raise ValueError(f"k must be 4-D [B, T, H, K], got shape {tuple(k.shape)}")
    if k.shape[-1] != K:
        raise ValueError(f"k and q must have the same head dim K: q has K={K}, k has K={k.shape[-1]}")
    _shape("k", k, (B, T, H, K), "[B, T, H, K] like q")
    if v.dim() != 4:
        raise ValueError(f"v must be 4-D [B, T, HV, V], got shape {tuple(v.shape)}")
    if tuple(v.shape[:2]) != (B, T):
        raise ValueError(f"v must have shape [B, T, HV, V] with B={B}, T={T} as q, got {tuple(v.shape)}")
    HV = v.shape[2]
    if HV == 0 or HV % H:
        raise ValueError(f"v's head count HV={HV} must be a positive multiple of q/k's head count H={H}")
    if v.shape[3] == 0:
        raise ValueError(f"v's head dim V must be >= 1, got shape {tuple(v.shape)}")
    _shape("g", g, (B, T, HV), "[B, T, HV]")
    _shape("beta", beta, (B, T, HV), "[B, T, HV]")

    device = q.device
    for name, x in (("k", k), ("v", v), ("g", g), ("beta", beta), ("initial_state", initial_state),
                    ("cu_seqlens", cu_seqlens)):
        if isinstance(x, torch.Tensor) and x.device != device:
            raise ValueError(f"{name} is on {x.device} but q is on {device}: all tensors must share a device")

    # numbers.Real / Integral take numpy's scalars too (np.float32, np.int64), bool excluded.
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, numbers.Integral):
        raise TypeError(f"chunk_size must be an int (a positive power of two), got {type(chunk_size).__name__}")
    if chunk_size <= 0 or chunk_size & (chunk_size - 1):
        raise ValueError(f"chunk_size must be a positive power of two, got {chunk_size!r}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")

    if cu_seqlens is None:
        N = B
    else:
        check_cu_seqlens(cu_seqlens, B, T)
        N = cu_seqlens.numel() - 1
    if initial_state is not None:
        _floating("initial_state", initial_state)
        _shape("initial_state", initial_state, (N, HV, K, v.shape[-1]), "[N, HV, K, V]")
    return N


# The last CUDA cu_seqlens whose values passed, as (weak reference, version counter, T). Reading the
# values of a CUDA tensor is a host sync, which waits for all queued work and then exposes every launch
# of the call; the layers of a model pass the same tensor, so each one after the first skips it.
# In-place writes bump the version counter, so a changed tensor is read again. Writes that bypass
# autograd's counter (through .data, DLPack or a raw kernel) are not seen, and inference tensors have
# no counter: those are read every time. CPU tensors are always read (no sync there).
_last_valid_cu_seqlens = (lambda: None, -1, -1)


def check_cu_seqlens(cu_seqlens, B: int, T: int) -> None:
    """cu_seqlens ``[N + 1]`` (int32 / int64) of N sequences packed along the T tokens of a batch of
    one: its type, shape and values (from 0 to T, non-decreasing), the values read once per CUDA
    tensor (see above). Raises TypeError / ValueError naming what was expected."""
    global _last_valid_cu_seqlens
    if not isinstance(cu_seqlens, torch.Tensor):
        raise TypeError(f"cu_seqlens must be a 1-D integer torch.Tensor, got {type(cu_seqlens).__name__}")
    if cu_seqlens.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"cu_seqlens must be int32 or int64, got {cu_seqlens.dtype}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError(f"cu_seqlens must be 1-D [N + 1] with N >= 1, got shape {tuple(cu_seqlens.shape)}")
    if B != 1:
        raise ValueError(f"with cu_seqlens the batch size must be 1 (sequences packed along T), got B={B}")
    cacheable = cu_seqlens.is_cuda and not cu_seqlens.is_inference()
    if cacheable:
        ref, version, last_T = _last_valid_cu_seqlens
        if ref() is cu_seqlens and version == cu_seqlens._version and last_T == T:
            return
    check_seqlens(cu_seqlens.tolist(), T)
    if cacheable:
        _last_valid_cu_seqlens = (weakref.ref(cu_seqlens), cu_seqlens._version, T)


def check_seqlens(bounds: list, T: int) -> None:
    """The values of cu_seqlens, read to the host: from 0 to T, non-decreasing."""
    if bounds[0] != 0:
        raise ValueError(f"cu_seqlens must start at 0, got {bounds[0]}")
    if bounds[-1] != T:
        raise ValueError(f"cu_seqlens must end at T={T}, got {bounds[-1]}")
    if any(b < a for a, b in zip(bounds, bounds[1:])):
        raise ValueError(f"cu_seqlens must be non-decreasing, got {bounds}")

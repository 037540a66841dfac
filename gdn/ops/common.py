"""Layout helpers shared by the torch algorithms (recurrent, chunk, scan).

The public layout is FLA's: q, k ``[B, T, H, K]``, v ``[B, T, HV, V]``, g, beta ``[B, T, HV]``.
The torch algorithms work head-major with the value heads split into ``H`` groups of ``G = HV // H``
(value head ``h`` reads q/k head ``h // G``), so q/k broadcast over the group dimension instead of
being repeated:

    q, k  [B, H, 1, T, K]      v  [B, H, G, T, V]      g, beta  [B, H, G, T]
    state [B, H, G, K, V]
"""
from __future__ import annotations

import os
import threading

import torch

L2NORM_EPS = 1e-6


def l2norm_factors_from_squares(sq: torch.Tensor, eps: float = L2NORM_EPS) -> torch.Tensor:
    """The l2norm factors ``1 / sqrt(sq + eps)`` from the rows' sums of squares ``sq``."""
    return torch.rsqrt(sq + eps)


def l2norm_factors(x: torch.Tensor, eps: float = L2NORM_EPS) -> torch.Tensor:
    """``1 / sqrt(sum(x**2, -1) + eps)`` ``[..., 1]`` dropped to ``[...]``: the per-row factor of l2norm."""
    return l2norm_factors_from_squares(torch.linalg.vector_norm(x, dim=-1).square(), eps)


def l2norm(x: torch.Tensor, eps: float = L2NORM_EPS) -> torch.Tensor:
    """``x / sqrt(sum(x**2, -1) + eps)``: the q/k normalisation of Qwen3.5 (and FLA's in-kernel one)."""
    return x * l2norm_factors(x, eps)[..., None]


def to_grouped(q, k, v, g, beta):
    """``[B, T, heads, D]`` -> grouped head-major views (see module docstring). No data is copied
    for q/k beyond the transpose; value heads are split, not repeated."""
    B, T, H, K = q.shape
    HV = v.shape[2]
    G = HV // H
    q = q.permute(0, 2, 1, 3).unsqueeze(2)                        # [B, H, 1, T, K]
    k = k.permute(0, 2, 1, 3).unsqueeze(2)                        # [B, H, 1, T, K]
    v = v.permute(0, 2, 1, 3).reshape(B, H, G, T, v.shape[-1])    # [B, H, G, T, V]
    g = g.permute(0, 2, 1).reshape(B, H, G, T)                    # [B, H, G, T]
    beta = beta.permute(0, 2, 1).reshape(B, H, G, T)              # [B, H, G, T]
    return q, k, v, g, beta


def from_grouped_output(o: torch.Tensor) -> torch.Tensor:
    """``[B, H, G, T, V]`` -> ``[B, T, HV, V]``."""
    B, H, G, T, V = o.shape
    return o.reshape(B, H * G, T, V).transpose(1, 2).contiguous()


def state_from_grouped(S: torch.Tensor) -> torch.Tensor:
    """``[B, H, G, K, V]`` -> ``[B, HV, K, V]``."""
    B, H, G, K, V = S.shape
    return S.reshape(B, H * G, K, V)


def grouped_initial_state(initial_state, B: int, H: int, HV: int, K: int, V: int, like: torch.Tensor):
    """The start state ``[B, H, G, K, V]``: a view of ``initial_state`` ``[B, HV, K, V]``, or zeros."""
    if initial_state is None:
        return like.new_zeros(B, H, HV // H, K, V)
    return initial_state.view(B, H, HV // H, K, V)


def triton_interpreting() -> bool:
    """Whether TRITON_INTERPRET asks for Triton's CPU interpreter (kernels then accept CPU tensors)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


class Workspace:
    """Scratch buffers reused from call to call, one growing flat buffer per name, dtype and device.

    On a CPU the first touch of fresh pages costs about as much as the arithmetic (glibc hands large
    blocks back to the OS, so every call would fault its intermediates in again); writing them into
    buffers kept here faults each page once per process. A buffer is handed out as a view of its
    first prod(shape) elements, so a call may only hold one view per name at a time, and nothing
    handed out may reach the caller (results are copied out). Memory held: the largest of each name.
    """

    def __init__(self, max_bytes: int | None = None):
        self._buffers: dict = {}
        self.max_bytes = workspace_limit() if max_bytes is None else max_bytes

    def held_bytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self._buffers.values())

    def get(self, name: str, shape, like: torch.Tensor) -> torch.Tensor:
        """An uninitialised ``shape`` tensor with ``like``'s dtype and device, reused by the next call
        unless keeping it would hold more than ``max_bytes`` in all (then it is a fresh tensor)."""
        key = (name, like.dtype, like.device)
        numel = 1
        for n in shape:
            numel *= n
        buf = self._buffers.get(key)
        if buf is None or buf.numel() < numel:
            with torch.inference_mode(False):        # a normal tensor: usable in and out of inference mode
                buf = torch.empty(numel, dtype=like.dtype, device=like.device)
            old = self._buffers.pop(key, None)
            if self.held_bytes() + numel * buf.element_size() <= self.max_bytes:
                self._buffers[key] = buf
            elif old is not None:
                self._buffers[key] = old                 # keep the smaller one for smaller calls
        return buf[:numel].view(shape)


_thread_local = threading.local()


def workspace_limit() -> int:
    """Bytes a thread's CPU workspace may hold: GDN_CPU_WORKSPACE_MB (default 4096: the scan needs
    ~2 GB at T = 8192 with 16 heads of 128; the chunk algorithm ~60 MB at any length)."""
    text = os.environ.get("GDN_CPU_WORKSPACE_MB", "4096")
    try:
        mb = float(text)
    except ValueError:
        mb = float("nan")
    if not (0 <= mb < 2 ** 40):                  # NaN, inf and negative numbers too
        raise ValueError(f"GDN_CPU_WORKSPACE_MB must be a number of megabytes >= 0, got {text!r}")
    return int(mb * 2 ** 20)


def workspace(*tensors) -> Workspace | None:
    """The workspace for one call on ``tensors``: None when autograd records through them (their
    intermediates must then be fresh tensors that autograd can keep) or under torch.compile; on a
    CPU the calling thread's :class:`Workspace`, kept across calls; elsewhere a new one for this call
    only (the CUDA caching allocator already recycles memory between calls, and device memory is not
    to be held)."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        return None
    if torch.compiler.is_compiling():         # torch.compile plans the memory itself (out= views break it)
        return None
    if tensors[0].device.type != "cpu":
        return Workspace()
    if not hasattr(_thread_local, "workspace"):
        _thread_local.workspace = Workspace()
    return _thread_local.workspace


def release_workspace() -> None:
    """Free the calling thread's CPU workspace (at most GDN_CPU_WORKSPACE_MB, default 4 GiB; the scan
    keeps ~2 GB after a T = 8192, 16-head call); the next call allocates, and faults in, its buffers
    again."""
    _thread_local.__dict__.pop("workspace", None)


def scratch(ws: Workspace | None, like: torch.Tensor):
    """``buf(name, *shape)``: ``ws``'s reused buffer of that shape (``like``'s dtype and device), or
    None without a workspace (autograd: out= arguments must then be None, giving fresh tensors)."""
    if ws is None:
        return lambda name, *shape: None
    return lambda name, *shape: ws.get(name, shape, like)


def buffer_or_empty(buffer, shape, like: torch.Tensor) -> torch.Tensor:
    """``buffer`` when a workspace gave one, else a new uninitialised ``shape`` tensor like ``like``."""
    return buffer if buffer is not None else torch.empty(shape, dtype=like.dtype, device=like.device)

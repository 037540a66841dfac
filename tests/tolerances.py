"""The one tolerance helper of the suite: relative error in norm, NaN/Inf never passes."""
from __future__ import annotations

import torch

# Relative-norm tolerances by the dtype a result was computed from (see the README's accuracy notes).
RTOL = {torch.float64: 1e-10, torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 5e-3}


def rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """||actual - expected|| / ||expected|| computed in float64 (0 when both are zero)."""
    a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
    denom = e.norm().item()
    diff = (a - e).norm().item()
    return diff / denom if denom > 0 else diff


def assert_close(actual: torch.Tensor, expected: torch.Tensor, *, rtol: float | None = None,
                 dtype: torch.dtype | None = None, name: str = "tensor") -> None:
    """Assert same shape, all finite, and relative-norm error <= rtol (or RTOL[dtype])."""
    if rtol is None:
        rtol = RTOL[dtype if dtype is not None else actual.dtype]
    assert tuple(actual.shape) == tuple(expected.shape), \
        f"{name}: shape {tuple(actual.shape)} != expected {tuple(expected.shape)}"
    assert torch.isfinite(actual).all(), f"{name}: contains NaN/Inf"
    err = rel_err(actual, expected)
    assert err <= rtol, f"{name}: relative error {err:.3e} > {rtol:.1e}"


def assert_fp16_walk_close(o, S, o_ref, S_ref, o_triton, S_triton) -> None:
    """A walk on fp16 operands (gdn.ops.triton.walk_f16 and the Gluon walks) against the float64
    reference: o within bf16's rounding (1e-2), S within fp16's (1.5e-3); and against the Triton walk
    (the same products summed in another order) 5e-3 and 1e-3; all finite."""
    assert torch.isfinite(o).all() and torch.isfinite(S).all()
    assert_close(o, o_ref, rtol=1e-2, name="o")
    assert_close(S, S_ref, rtol=1.5e-3, name="S")
    assert_close(o, o_triton, rtol=5e-3, name="o against the Triton walk")
    assert_close(S, S_triton, rtol=1e-3, name="S against the Triton walk")

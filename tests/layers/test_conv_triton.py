"""The fused Triton conv kernel (gdn/ops/triton/causal_conv1d.py) against the float64 reference.

On CPU it runs in Triton's interpreter: TRITON_INTERPRET=1 must be set before triton is imported,
so the check runs in a fresh Python process. On a CUDA machine the same cases also run natively,
and against the causal-conv1d package when it is installed.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from gdn.layers import causal_conv1d
from tests.layers.conv_reference import random_conv_inputs, reference_conv
from tests.tolerances import assert_close

ROOT = Path(__file__).resolve().parents[2]

# (B, T, D, W, state, varlen lengths or None); T and D not multiples of the 64 x 64 tile.
CASES = [
    (2, 70, 70, 4, False, None),
    (2, 70, 70, 4, True, None),
    (3, 1, 40, 4, True, None),              # decode: one token per sequence, from a state
    (1, 5, 16, 3, True, None),
    (1, 0, 16, 4, True, [0, 0, 0]),         # nothing but empty sequences
    (1, 75, 20, 4, True, [0, 3, 64, 0, 1, 7]),
    (1, 75, 20, 4, False, [0, 3, 64, 0, 1, 7]),
]


def run_cases(device: str, backend: str) -> None:
    """Every case on ``device`` with ``backend`` vs the reference (float32 and bfloat16 inputs)."""
    for i, (B, T, D, W, state, lengths) in enumerate(CASES):
        cu = None if lengths is None else torch.tensor([0] + lengths[1:]).cumsum(0)
        x, w, b, s0 = random_conv_inputs(B, T, D, W, state=state, seed=i, cu_seqlens=cu)
        y_ref, final_ref = reference_conv(x, w, b, s0, cu)
        for dtype, rtol in ((torch.float32, 1e-6), (torch.bfloat16, 1e-2)):
            to = lambda t: None if t is None else t.to(device)  # noqa: E731
            y, final = causal_conv1d(to(x).to(dtype), to(w), to(b), initial_state=to(s0),
                                     output_final_state=True, cu_seqlens=to(cu), backend=backend)
            assert y.device.type == torch.device(device).type and y.dtype == dtype
            if dtype == torch.bfloat16:
                y_ref, _ = reference_conv(x.bfloat16(), w, b, s0, cu)
            assert_close(y, y_ref, rtol=rtol, name=f"case {i} y {dtype}")
            if dtype == torch.float32:
                assert_close(final, final_ref, rtol=0, name=f"case {i} final_state")
    # x as projections or transformers hand it: a channels-first tensor transposed (its last dim
    # strided: copied first) and a slice of wider rows (rows' stride != D: read in place).
    x, w, b, s0 = random_conv_inputs(2, 70, 20, 4, seed=12)
    y_ref, _ = reference_conv(x, w, b, s0)
    for name, xs in (("transposed", x.transpose(1, 2).contiguous().transpose(1, 2)),
                     ("sliced", torch.cat([x, torch.randn(2, 70, 12)], dim=2)[:, :, :20])):
        y, _ = causal_conv1d(xs.to(device), w.to(device), b.to(device), initial_state=s0.to(device), backend=backend)
        assert_close(y, y_ref, rtol=1e-6, name=name)
    # A bias sliced out of a wider parameter (stride 2): read by its stride, not as contiguous.
    b_wide = torch.stack([b, torch.randn_like(b)], dim=1).reshape(-1)
    y, _ = causal_conv1d(x.to(device), w.to(device), b_wide[::2].to(device), initial_state=s0.to(device),
                         backend=backend)
    assert_close(y, y_ref, rtol=1e-6, name="strided bias")
    # float64: "auto" keeps float64's accumulation (the kernel's is float32).
    if backend == "auto":
        y, _ = causal_conv1d(x.double().to(device), w.double().to(device), b.double().to(device),
                             initial_state=s0.double().to(device), backend=backend)
        assert_close(y, y_ref, rtol=1e-12, name="float64 y")


def test_triton_kernel_in_interpreter():
    script = textwrap.dedent("""
        from tests.layers.test_conv_triton import run_cases
        run_cases("cpu", "triton")
        print("ok")
    """)
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_triton_kernel_on_gpu():
    run_cases("cuda", "auto")                                # auto = Triton for CUDA tensors


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_causal_conv1d_package_same_numbers():
    pytest.importorskip("causal_conv1d")
    x, w, b, s0 = random_conv_inputs(2, 70, 64, 4, seed=9)
    y_ref, _ = reference_conv(x, w, b, s0)
    y, _ = causal_conv1d(x.cuda(), w.cuda(), b.cuda(), initial_state=s0.cuda(), backend="causal_conv1d")
    assert_close(y, y_ref, rtol=1e-6, name="y")


def test_triton_backend_needs_cuda_or_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    x, w, b, _ = random_conv_inputs(1, 4, 8, 4)
    with pytest.raises(ValueError, match="CUDA"):
        causal_conv1d(x, w, b, backend="triton")

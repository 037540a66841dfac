"""The fused Triton forward (gdn.ops.triton.chunk_fwd) against the float64 reference.

On a CPU machine this runs the real kernels in Triton's interpreter (tests/conftest.py sets
TRITON_INTERPRET=1), so shapes stay small; on a GPU machine the same tests run compiled kernels.
"""
import pytest
import torch

import gdn
from tests.reference import random_inputs, reference_gdn
from tests.tolerances import assert_close

triton = pytest.importorskip("triton")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

# (T, H, HV, K, V, chunk, segments, l2norm): odd lengths, grouped heads, K != V, non-power-of-two dims,
# forced sequence splits (segments > 1 joins the pieces with the affine-map scan).
CASES = [
    (1, 1, 1, 16, 16, 16, None, False),
    (63, 2, 4, 32, 48, 32, None, True),
    (65, 1, 2, 32, 32, 64, None, False),
    (200, 1, 2, 40, 24, 32, 3, True),
    (257, 2, 2, 32, 32, 16, 5, False),
    (130, 1, 1, 64, 64, 64, 2, True),
]


@pytest.mark.parametrize("T, H, HV, K, V, C, segments, l2norm", CASES)
def test_triton_matches_reference_fp32(T, H, HV, K, V, C, segments, l2norm):
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = random_inputs(2, T, H, HV, K, V, dtype=torch.float32, initial_state=True,
                                         seed=T, device=DEVICE)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=l2norm)
    o = torch.full_like(v, float("nan"))
    o, S = triton_forward(q, k, v, g, beta, scale=K ** -0.5, initial_state=S0, output_final_state=True,
                          use_qk_l2norm=l2norm, chunk_size=C, num_segments=segments, precision="ieee")
    assert_close(o, o_ref, rtol=1e-5, name="o")
    assert_close(S, S_ref, rtol=1e-5, name="S")


def test_triton_varlen_with_empty_sequences():
    cu = torch.tensor([0, 0, 17, 64, 64, 150], dtype=torch.int32, device=DEVICE)
    q, k, v, g, beta, S0 = random_inputs(1, 150, 2, 4, 32, 32, dtype=torch.float32, initial_state=True,
                                         N=5, seed=4, device=DEVICE)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, cu_seqlens=cu.cpu(), use_qk_l2norm=True)
    o, S = gdn.gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True, cu_seqlens=cu,
                                use_qk_l2norm=True, backend="triton", chunk_size=32)
    assert_close(o, o_ref, rtol=1e-3, name="o")        # default tf32 products on a GPU
    assert_close(S, S_ref, rtol=1e-3, name="S")
    assert torch.equal(S[0], S0[0]) and torch.equal(S[3], S0[3])


@pytest.mark.parametrize("inverse", ["substitution", "product"])
def test_triton_inverse_variants(inverse):
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = random_inputs(1, 100, 1, 2, 32, 32, dtype=torch.float32, initial_state=True,
                                         seed=12, device=DEVICE)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    o, S = triton_forward(q, k, v, g, beta, scale=32 ** -0.5, initial_state=S0, output_final_state=True,
                          use_qk_l2norm=True, chunk_size=64, inverse=inverse, precision="ieee")
    assert_close(o, o_ref, rtol=1e-5, name="o")
    assert_close(S, S_ref, rtol=1e-5, name="S")


@pytest.mark.parametrize("segments", [1, 3])
def test_triton_bf16(segments):
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = random_inputs(1, 160, 2, 4, 32, 32, dtype=torch.bfloat16, initial_state=True,
                                         seed=9, device=DEVICE)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    o, S = triton_forward(q, k, v, g, beta, scale=32 ** -0.5, initial_state=S0, output_final_state=True,
                          use_qk_l2norm=True, chunk_size=32, num_segments=segments)
    assert o.dtype == torch.bfloat16 and S.dtype == torch.float32
    assert_close(o, o_ref, rtol=1e-2, name="o")
    assert_close(S, S_ref, rtol=1e-2, name="S")


def test_triton_without_initial_or_final_state():
    q, k, v, g, beta, _ = random_inputs(1, 40, 1, 1, 16, 16, dtype=torch.float32, device=DEVICE)
    o_ref, _ = reference_gdn(q, k, v, g, beta)
    o, S = gdn.gated_delta_rule(q, k, v, g, beta, backend="triton", chunk_size=16)
    assert S is None
    assert_close(o, o_ref, rtol=1e-3, name="o")


def test_triton_falls_back_to_chunk_for_gradients():
    q, k, v, g, beta, _ = random_inputs(1, 20, 1, 1, 16, 16, dtype=torch.float32, device=DEVICE)
    q.requires_grad_(True)
    o, _ = gdn.gated_delta_rule(q, k, v, g, beta, backend="triton")
    o.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_triton_rejects_unsupported_chunk_size():
    q, k, v, g, beta, _ = random_inputs(1, 20, 1, 1, 16, 16, dtype=torch.float32, device=DEVICE)
    with pytest.raises(ValueError, match="chunk_size 16, 32, 64 or 128"):
        gdn.gated_delta_rule(q, k, v, g, beta, backend="triton", chunk_size=8)

"""The chunk math (gdn.ops.wy) on seed 002's 3-token worked example, and its pieces on random data."""
import pytest
import torch

import gdn
from gdn.ops.wy import chunk_factors, unit_lower_inverse
from tests.reference import random_inputs
from tests.tolerances import assert_close

# Seed 002, "3 个 token 手算一遍": no decay, empty start state, output scale 1.
SEED_K = [[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]]
SEED_V = [[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]
SEED_Q = [[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]
SEED_BETA = [1.0, 1.0, 0.5]
# The numbers the seed prints.
SEED_U = [[1.0, 0.0], [-0.6, 1.0], [1.24, 0.6]]
SEED_O = [[1.0, 0.0], [-0.48, 0.8], [0.992, 1.48]]
SEED_S = [[0.64, 0.6], [0.76, 1.4]]


def seed_inputs():
    t = lambda x: torch.tensor(x, dtype=torch.float64)
    q, k, v = (t(x).reshape(1, 3, 1, 2) for x in (SEED_Q, SEED_K, SEED_V))
    beta = t(SEED_BETA).reshape(1, 3, 1)
    return q, k, v, torch.zeros(1, 3, 1, dtype=torch.float64), beta


@pytest.mark.parametrize("backend", ["recurrent", "chunk", "scan"])
def test_seed_three_token_example(backend):
    q, k, v, g, beta = seed_inputs()
    o, S = gdn.gated_delta_rule(q, k, v, g, beta, scale=1.0, output_final_state=True, backend=backend,
                                chunk_size=4)
    assert torch.allclose(o[0, :, 0], torch.tensor(SEED_O, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(S[0, 0], torch.tensor(SEED_S, dtype=torch.float64), atol=1e-12)


def test_seed_writes_solve_the_triangular_system():
    q, k, v, g, beta = seed_inputs()
    f = chunk_factors(q, k, v, g, beta, scale=1.0, chunk_size=4)
    U = f.u[0, 0, 0, 0, :3]                         # with S0 = 0 the writes are u itself
    assert torch.allclose(U, torch.tensor(SEED_U, dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 16, 64])
def test_unit_lower_inverse(n):
    A = torch.randn(5, n, n, dtype=torch.float64) * 0.3
    expected = torch.linalg.inv(torch.eye(n, dtype=torch.float64) + A.tril(-1))
    # Only the strict lower triangle is read: the diagonal and upper triangle of A are noise here.
    assert_close(unit_lower_inverse(A), expected, name="(I + A)^-1")
    out = torch.empty_like(A)
    unit_lower_inverse(A, out=out)
    assert_close(out, expected, name="(I + A)^-1 into out")


def test_affine_map_reproduces_chunk_end_state():
    q, k, v, g, beta, _ = random_inputs(1, 32, 2, 4, 16, 8, seed=1)
    f = chunk_factors(q, k, v, g, beta, scale=0.25, chunk_size=32)
    S0 = torch.randn(1, 2, 2, 16, 8, dtype=torch.float64)          # [B, H, G, K, V]
    U = f.writes(S0, 0)
    A, B = f.affine_maps()
    assert_close(A[0] @ S0 + B[0], f.end_state(S0, U, 0), name="A S0 + B")


@pytest.mark.parametrize("chunk_size", [1, 2, 64])
@pytest.mark.parametrize("ratio", [1, 2])
def test_walk_exact_with_zero_and_huge_keys(chunk_size, ratio):
    """The no-grad chunk walk takes the keys' l2 norms from k k^T's diagonal and folds them into the
    decay matrix's exponent (+ log r_j): zero keys (r = 1 / sqrt(eps)), huge keys and a strong decay
    must stay exact, for any chunk size and group size (float64: the float32 rounding of the
    exponents is test_float32_exact_with_fast_forgetting_gates's)."""
    from tests.reference import reference_gdn
    q, k, v, g, beta, S0 = random_inputs(1, 200, 2, 2 * ratio, 16, 24, initial_state=True, seed=4)
    k[:, 5:40] = 0
    k[:, 100:120] *= 1e4
    g[:, 50:60] = -200.0
    with torch.no_grad():
        o, S = gdn.gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                    use_qk_l2norm=True, backend="chunk", chunk_size=chunk_size)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    assert_close(o, o_ref, name="o")
    assert_close(S, S_ref, name="S")


@pytest.mark.parametrize("backend", ["recurrent", "chunk", "scan"])
def test_float32_exact_with_fast_forgetting_gates(backend):
    """float32 with l2norm on raw keys and g = -30 a token (G reaches -1920 in a chunk of 64): the
    keys' norm factors must not be rounded at G's ulp (1.2e-4 there; the chunk walk once added
    log r_j to G_j before the difference, 2.5e-5 relative in o). All three within 2e-6 of float64,
    ten times their float32 rounding here."""
    from tests.reference import reference_gdn
    q, k, v, g, beta, S0 = random_inputs(1, 130, 2, 4, 32, 32, dtype=torch.float32, gate="strong",
                                         initial_state=True, seed=3)
    k = k * 3
    with torch.no_grad():
        o, S = gdn.gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                    use_qk_l2norm=True, backend=backend)
    o_ref, S_ref = reference_gdn(*(x.double() for x in (q, k, v, g, beta)), initial_state=S0.double(),
                                 use_qk_l2norm=True)
    assert_close(o, o_ref, rtol=2e-6, name="o")
    assert_close(S, S_ref, rtol=2e-6, name="S")


@pytest.mark.parametrize("backend", ["recurrent", "chunk", "scan"])
@pytest.mark.parametrize("reset", [-1e3, -1e5, float("-inf")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_resets_inside_chunks(backend, reset, dtype):
    """Tokens whose gate forgets everything (g = -1e3, -1e5, or -inf: a hard reset) every 13 tokens,
    so mid-chunk: the chunked backends' decays are exps of differences of cumulative sums, which must
    neither round at their ulp (float32 sums of -1e3 cost 4e-5 relative) nor turn -inf - -inf into
    NaN. Each against the float64 recurrence, at ten times float32's rounding here (float64: its
    tolerance), with autograd (chunk_factors) and without (the chunk walk)."""
    from tests.reference import reference_gdn
    q, k, v, g, beta, S0 = random_inputs(1, 130, 2, 4, 32, 32, dtype=dtype, initial_state=True, seed=5)
    g[:, 10::13] = reset
    o_ref, S_ref = reference_gdn(*(x.double() for x in (q, k, v, g, beta)), initial_state=S0.double(),
                                 use_qk_l2norm=True)
    rtol = 2e-6 if dtype == torch.float32 else None
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            o, S = gdn.gated_delta_rule(q, k, v.requires_grad_(grad), g, beta, initial_state=S0,
                                        output_final_state=True, use_qk_l2norm=True, backend=backend)
        assert_close(o, o_ref, rtol=rtol, name=f"o (autograd {grad})")
        assert_close(S, S_ref, rtol=rtol, name=f"S (autograd {grad})")

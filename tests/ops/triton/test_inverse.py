"""The in-chunk triangular inverse of the WY pass (gdn.ops.triton.inverse.unit_lower_inverse) on its own,
in Triton's interpreter on a CPU machine (tests/conftest.py): each algorithm against a float64
inverse, and the chunks that leave fp16's range taking the tf32x3 path (in the whole pass:
tests/ops/triton/test_wy.py)."""
import pytest
import torch

from tests.tolerances import assert_close

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from gdn.ops.common import triton_interpreting  # noqa: E402
from gdn.ops.triton.inverse import unit_lower_inverse  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BT = 64


@triton.jit
def _inverse_kernel(a_ptr, t_ptr, BT: tl.constexpr, LOG_BLOCKS: tl.constexpr, INVERSE: tl.constexpr,
                    F16_DOT: tl.constexpr):
    o_i = tl.arange(0, BT)
    b_A = tl.load(a_ptr + o_i[:, None] * BT + o_i[None, :])
    b_T = unit_lower_inverse(b_A, BT, 16, LOG_BLOCKS, INVERSE, F16_DOT)
    tl.store(t_ptr + o_i[:, None] * BT + o_i[None, :], b_T)


def inverse(A: torch.Tensor, how: str) -> torch.Tensor:
    """(I + A)^-1 of a strictly lower [n, n] fp32 tile (n = 32 or 64) by unit_lower_inverse's INVERSE=how."""
    T = torch.full_like(A, float("nan"))
    n = A.shape[0]
    _inverse_kernel[(1,)](A, T, BT=n, LOG_BLOCKS=(n // 16).bit_length() - 1, INVERSE=how,
                          F16_DOT=tl.float32 if triton_interpreting() else tl.float16)
    return T


def chunk_A(keys: str, beta: torch.Tensor, seed: int = 0, BT: int = BT) -> torch.Tensor:
    """A_ij = beta_i (k_i . k_j) D_ij below the diagonal, for l2-normalised keys: "random" ones, or
    "parallel" ones (one direction plus 5% noise: the partial products of the product form grow to
    thousands there), with a slow decay."""
    gen = torch.Generator().manual_seed(seed)
    k = torch.randn(BT, 128, generator=gen, dtype=torch.float64)
    if keys == "parallel":
        k = torch.randn(128, generator=gen, dtype=torch.float64) + 0.05 * k
    k = k / k.norm(dim=1, keepdim=True)
    G = (-torch.rand(BT, generator=gen, dtype=torch.float64) * 0.01).cumsum(0)
    D = (G[:, None] - G[None, :]).tril().exp()
    return (beta.double()[:, None] * (k @ k.T) * D).tril(-1).float()


@pytest.mark.parametrize("bt", [16, 32, 64])
@pytest.mark.parametrize("keys", ["random", "parallel"])
@pytest.mark.parametrize("how", ["blocks_f16", "blocks_f16_subst", "f16_subst", "f16_subst_t", "blocks_parts", "subst"])
def test_inverse_against_float64(keys, how, bt):
    """Pairs of fp16 parts and tf32x3 keep ~22 bits (less where the product form's partial products grow:
    parallel keys; substitution at tf32x3, "subst", keeps them there too); the merge by fp16 substitution
    keeps T to a few times fp16's rounding (2^-11 = 4.9e-4) either way, where plain fp16 products in the
    product form would lose every bit (precision_study.py; benchmarks/NOTES.md v18), and so does f16_subst,
    whose diagonal blocks are on plain fp16 products too, and f16_subst_t, the same on the transposes.
    Chunks of 16: no merge; of 32: one substitution step; of 64: three. The substitutions' T is not the
    tf32x3 one ("subst", their fallback): the fp16 path ran."""
    rtol = {"blocks_f16": (1e-6, 2e-4), "blocks_f16_subst": (5e-4, 2e-3), "f16_subst": (5e-4, 2e-3),
            "f16_subst_t": (5e-4, 2e-3), "blocks_parts": (1e-6, 2e-4), "subst": (1e-6, 1e-5)}[how]
    rtol = rtol[keys == "parallel"]
    gen = torch.Generator().manual_seed(1)
    A = chunk_A(keys, 0.9 + 0.1 * torch.rand(bt, generator=gen), BT=bt).to(DEVICE)
    eye = torch.eye(bt, dtype=torch.float64, device=DEVICE)
    exact = torch.linalg.solve_triangular(eye + A.double(), eye, upper=False)
    T = inverse(A, how)
    assert_close(T, exact, rtol=rtol, name=f"T, {how}")
    if how in ("blocks_f16_subst", "f16_subst", "f16_subst_t"):
        assert not torch.equal(T, inverse(A, "subst"))          # (their fallback: the fp16 path ran)


@pytest.mark.parametrize("beta", [-0.22, -0.15])
@pytest.mark.parametrize("how", ["blocks_f16_subst", "f16_subst", "f16_subst_t"])
def test_inverse_by_substitution_falls_back_out_of_fp16_range(how, beta):
    """beta = -0.22 on parallel keys: A_ij ~ -0.22 below the diagonal, so T's entries grow as
    1.22^(i - j) to ~3.4e4, past what merge_subst keeps in fp16: the chunk is formed again at tf32x3,
    bit for bit as INVERSE="subst" (the pairs keep it: their partial products stay in range).
    beta = -0.15: every entry below 1000, but sum |T| ~3.8e4 past _F16_SAFE (16384), the bound that
    vouches for every entry on the way: the fallback too."""
    A = chunk_A("parallel", torch.full((BT,), beta)).to(DEVICE)
    T_subst, T_parts, T_pairs = (inverse(A, name) for name in (how, "subst", "blocks_f16"))
    assert torch.isfinite(T_parts).all()
    if beta == -0.22:
        assert T_parts.abs().max() > 16384
        assert not torch.equal(T_pairs, T_parts)
    else:
        assert 16384 < T_parts.double().abs().sum() < 65504 and T_parts.abs().max() < 1000
    assert torch.equal(T_subst, T_parts)


def test_inverse_by_substitution_keeps_reflections_exact():
    """beta = 2 on parallel keys (the delta rule's reflections, I - 2 k k^T): A_ij ~ 2 below the
    diagonal, T's entries stay within a few units, but the product form's partial products grow as
    2^m C(15, m) in each 16 x 16 block and their tf32x3 sums cancel to a few % of T; substitution
    ("subst", every fp16 form's fallback) keeps ~fp32's bits, and the fp16 forms, whose |A_ij| > 1
    test sends the chunk to it, give its bits."""
    A = chunk_A("parallel", torch.full((BT,), 2.0)).to(DEVICE)
    eye = torch.eye(BT, dtype=torch.float64, device=DEVICE)
    exact = torch.linalg.solve_triangular(eye + A.double(), eye, upper=False)
    assert exact.abs().max() < 10
    T = inverse(A, "subst")
    assert_close(T, exact, rtol=5e-5, name="T, subst")
    for how in ("f16_subst", "f16_subst_t", "blocks_f16"):
        assert torch.equal(inverse(A, how), T), how
    from tests.tolerances import rel_err
    assert rel_err(inverse(A, "blocks_parts"), exact) > 1e-3        # (why the product forms are not the default)

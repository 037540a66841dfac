"""The split products' tile helpers (gdn.ops.triton.split_dot) in Triton's interpreter: the tiles
side by side and stacked, dot_cat against the products of the parts in float64, and the tf32 parts."""
import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from gdn.ops.triton.split_dot import cat_cols, cat_rows, dot_cat, dot_tf32x3, sum_halves, tf32_parts  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@triton.jit
def _tiles_kernel(a, b, cols, rows, halves, M: tl.constexpr, N: tl.constexpr):
    o_m = tl.arange(0, M)
    o_n = tl.arange(0, N)
    b_a = tl.load(a + o_m[:, None] * N + o_n[None, :])
    b_b = tl.load(b + o_m[:, None] * N + o_n[None, :])
    o_n2 = tl.arange(0, 2 * N)
    o_m2 = tl.arange(0, 2 * M)
    b_c = cat_cols(b_a, b_b)
    tl.store(cols + o_m[:, None] * (2 * N) + o_n2[None, :], b_c)
    tl.store(rows + o_m2[:, None] * N + o_n[None, :], cat_rows(b_a, b_b))
    tl.store(halves + o_m[:, None] * N + o_n[None, :], sum_halves(b_c))


def test_tiles_side_by_side_stacked_and_halves_summed():
    a = torch.randn(16, 32, device=DEVICE)
    b = torch.randn(16, 32, device=DEVICE)
    cols, rows = torch.empty(16, 64, device=DEVICE), torch.empty(32, 32, device=DEVICE)
    halves = torch.empty(16, 32, device=DEVICE)
    _tiles_kernel[(1,)](a, b, cols, rows, halves, M=16, N=32)
    assert torch.equal(cols, torch.cat([a, b], dim=1))
    assert torch.equal(rows, torch.cat([a, b], dim=0))
    assert torch.equal(halves, a + b)


@triton.jit
def _dot_cat_kernel(a1, a2, b1, b2, out, NA: tl.constexpr, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr,
                    DOT_DTYPE: tl.constexpr):
    o_m = tl.arange(0, M)
    o_k = tl.arange(0, K)
    o_n = tl.arange(0, N)
    o_a = o_m[:, None] * K + o_k[None, :]
    o_b = o_k[:, None] * N + o_n[None, :]
    b_a1 = tl.load(a1 + o_a).to(DOT_DTYPE)
    b_a2 = tl.load(a2 + o_a).to(DOT_DTYPE)
    b_b1 = tl.load(b1 + o_b).to(DOT_DTYPE)
    b_b2 = tl.load(b2 + o_b).to(DOT_DTYPE)
    tl.store(out + o_m[:, None] * N + o_n[None, :], dot_cat(b_a1, b_a2, NA, b_b1, b_b2))


@pytest.mark.parametrize("NA", [1, 2])
def test_dot_cat_is_the_product_of_the_parts(NA):
    """(a_1 (+ a_2)) @ (b_1 + b_2) from bf16-valued parts (the second ones 2^-8 smaller, as
    bf16_parts cuts them): every product of parts, fp32 accumulation."""
    from gdn.ops.common import triton_interpreting
    gen = torch.Generator().manual_seed(NA)

    def part(*shape, size=1.0):
        return (size * torch.randn(*shape, generator=gen)).bfloat16().float().to(DEVICE)
    a1, a2 = part(16, 32), part(16, 32, size=2 ** -8)
    b1, b2 = part(32, 16), part(32, 16, size=2 ** -8)
    out = torch.empty(16, 16, device=DEVICE)
    dot_dtype = tl.float32 if triton_interpreting() else tl.bfloat16
    _dot_cat_kernel[(1,)](a1, a2, b1, b2, out, NA=NA, M=16, K=32, N=16, DOT_DTYPE=dot_dtype)
    a = a1.double() if NA == 1 else a1.double() + a2.double()
    want = a @ (b1.double() + b2.double())
    torch.testing.assert_close(out.double(), want, rtol=1e-6, atol=1e-5)


@triton.jit
def _tf32_kernel(a, b, big, small, prod, M: tl.constexpr):
    o_m = tl.arange(0, M)
    o = o_m[:, None] * M + o_m[None, :]
    b_a = tl.load(a + o)
    b_big, b_small = tf32_parts(b_a)
    tl.store(big + o, b_big)
    tl.store(small + o, b_small)
    tl.store(prod + o, dot_tf32x3(b_a, tl.load(b + o)))


def test_tf32_parts_round_to_tf32_and_sum_exactly():
    """big is a tf32 value (13 low mantissa bits clear) within half a tf32 ulp of a, big + small is
    a exactly; dot_tf32x3's three products give a @ b (here to fp32 accuracy: the interpreter does
    not cut operands to tf32, which the H200's matrix units do)."""
    gen = torch.Generator().manual_seed(3)
    a = (torch.randn(16, 16, generator=gen) * torch.logspace(-3, 3, 16)).to(DEVICE)
    b = torch.randn(16, 16, generator=gen).to(DEVICE)
    big, small, prod = (torch.empty(16, 16, device=DEVICE) for _ in range(3))
    _tf32_kernel[(1,)](a, b, big, small, prod, M=16)
    assert torch.all(big.view(torch.int32) & 0x1FFF == 0)
    assert torch.equal(big + small, a)
    assert torch.all(small.abs() <= a.abs() * 2.0 ** -11)
    ref = a.double() @ b.double()
    assert ((prod.double() - ref).norm() / ref.norm()).item() < 1e-6

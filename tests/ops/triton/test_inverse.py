"""The in-chunk triangular inverse of the WY pass (gdn.ops.triton.inverse.unit_lower_inverse) on its own,
in Triton's interpreter on a CPU machine (tests/conftest.py): each algorithm against a float64
inverse, and the chunks that leave fp16's range taking the tf32x3 path; in the whole pass, that
fallback after every head (wy_fallback="after") storing what the inline one stores."""
import pytest
import torch

from tests.ops.triton.launches import spy_launches
from tests.reference import random_inputs
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
@pytest.mark.parametrize("how", ["blocks_f16", "blocks_f16_subst", "f16_subst", "f16_subst_t", "blocks_parts"])
def test_inverse_against_float64(keys, how, bt):
    """Pairs of fp16 parts and tf32x3 keep ~22 bits (less where the product form's partial products
    grow: parallel keys); the merge by fp16 substitution keeps T to a few times fp16's rounding
    (2^-11 = 4.9e-4) either way, where plain fp16 products in the product form would lose every bit
    (precision_study.py; benchmarks/NOTES.md v18), and so does f16_subst, whose diagonal blocks are on
    plain fp16 products too, and f16_subst_t, the same on the transposes. Chunks of 16: no merge; of
    32: one substitution step; of 64: three. The substitutions' T is not the tf32x3 one: the fp16 path
    ran, not the fallback."""
    rtol = {"blocks_f16": (1e-6, 2e-4), "blocks_f16_subst": (5e-4, 2e-3), "f16_subst": (5e-4, 2e-3),
            "f16_subst_t": (5e-4, 2e-3), "blocks_parts": (1e-6, 2e-4)}[how]
    rtol = rtol[keys == "parallel"]
    gen = torch.Generator().manual_seed(1)
    A = chunk_A(keys, 0.9 + 0.1 * torch.rand(bt, generator=gen), BT=bt).to(DEVICE)
    eye = torch.eye(bt, dtype=torch.float64, device=DEVICE)
    exact = torch.linalg.solve_triangular(eye + A.double(), eye, upper=False)
    T = inverse(A, how)
    assert_close(T, exact, rtol=rtol, name=f"T, {how}")
    if how in ("blocks_f16_subst", "f16_subst", "f16_subst_t"):
        assert not torch.equal(T, inverse(A, "blocks_parts"))


@pytest.mark.parametrize("how", ["blocks_f16_subst", "f16_subst", "f16_subst_t"])
def test_inverse_by_substitution_falls_back_out_of_fp16_range(how):
    """beta = -0.22 on parallel keys: A_ij ~ -0.22 below the diagonal, so T's entries grow as
    1.22^(i - j) to ~3.4e4, past what merge_f16 keeps in fp16: the chunk is formed again at tf32x3,
    bit for bit as INVERSE="blocks_parts" (the pairs keep it: their partial products stay in range)."""
    A = chunk_A("parallel", torch.full((BT,), -0.22)).to(DEVICE)
    T_subst, T_parts, T_pairs = (inverse(A, name) for name in (how, "blocks_parts", "blocks_f16"))
    assert T_parts.abs().max() > 16384 and torch.isfinite(T_parts).all()
    assert torch.equal(T_subst, T_parts)
    assert not torch.equal(T_pairs, T_parts)


@pytest.mark.parametrize("inverse", [None, "f16_subst_t"])
@pytest.mark.parametrize("BT, H, HV, K, heads", [(32, 2, 4, 32, None), (16, 1, 4, 48, 4), (64, 1, 2, 32, None)])
def test_fallback_after_the_heads_stores_what_the_inline_one_does(monkeypatch, BT, H, HV, K, heads, inverse):
    """wy_fallback="after" (the default: every head's fp16 inverse first, the tf32x3 fallback after all
    of them, FALLBACK_AFTER) stores T diag(beta), the output attention and G bit for bit as the inline
    fallback, every entry written (the buffers NaN-filled before each launch), and the walk's o and S
    with them. beta = 6 in one chunk of every second value head (max |A_ij| > 1 there, checked here:
    those heads' chunk takes the fallback, the heads beside them in the same program do not); two
    heads a program (the default) or four (bits 1 and 3 of its mask); chunks of 16, 32 and 64, K not
    a power of two; the default inverse and the transposed one (f16_subst_t, whose inline fallback
    follows its head's store)."""
    import inspect
    import gdn.ops.triton.forward as forward
    T = 100
    q, k, v, g, beta, S0 = random_inputs(1, T, H, HV, K, K, dtype=torch.bfloat16, initial_state=True, seed=7,
                                         device=DEVICE)
    c0, c1 = BT, min(2 * BT, T)                 # chunk 1
    beta[:, c0:c1, 1::2] = 6.0
    kn = torch.nn.functional.normalize(k[0, c0:c1].double(), dim=-1)          # [rows, H, K]
    for hv in range(HV):
        G = g[0, c0:c1, hv].double().cumsum(0)
        D = torch.exp((G[:, None] - G[None]).tril()).tril()
        kh = kn[:, hv // (HV // H)]
        A = (beta[0, c0:c1, hv].double()[:, None] * (kh @ kh.T) * D).tril(-1)
        assert (A.abs().max() > 1) == (hv % 2 == 1)
    names = list(inspect.signature(forward.wy_kernel.fn).parameters)
    watched = [names.index(n) for n in ("t_out", "attn_out", "G_out")]
    stored = []
    spy_launches(monkeypatch, "wy_kernel",
                 lambda grid, args, kw: stored.append([args[i].clone() for i in watched] + [kw["FALLBACK_AFTER"]]),
                 before=lambda grid, args, kw: [args[i].fill_(float("nan")) for i in watched])
    call = dict(scale=K ** -0.5, initial_state=S0, output_final_state=True, use_qk_l2norm=True, chunk_size=BT,
                **({} if heads is None else dict(wy_heads=heads)), **({} if inverse is None else dict(inverse=inverse)))
    inline = forward.triton_forward(q, k, v, g, beta, wy_fallback="inline", **call)
    after = forward.triton_forward(q, k, v, g, beta, **call)
    (*first, flag_inline), (*second, flag_after) = stored
    assert not flag_inline and flag_after
    for x, y in zip(first, second):
        assert torch.equal(x, y) and not torch.isnan(x).any()
    assert torch.equal(inline[0], after[0]) and torch.equal(inline[1], after[1])
    if inverse is not None:
        return
    with pytest.raises(ValueError, match="wy_fallback must be"):
        forward.triton_forward(q, k, v, g, beta, wy_fallback="later", **call)
    with pytest.raises(ValueError, match="wy_fallback='after' needs inverse='f16_subst'"):
        forward.triton_forward(q, k, v, g, beta, wy_fallback="after", inverse="blocks_f16", **call)
    with pytest.raises(ValueError, match="needs the fp16 walk"):
        forward.triton_forward(q, k, v, g, beta, wy_fallback="after", operands="bf16_parts", **call)


def test_transposed_inverse_stores_the_untransposed_tiles(monkeypatch):
    """inverse="f16_subst_t" forms A, P and T transposed in place and stores them where the default's go:
    T diag(beta) and P within fp16's rounding of the default pass's (the same sums in other orders), G
    bit for bit, every entry written; the walk's o and S within the walk's own rounding of the
    default's. Two sequences with a partial last chunk (masked rows and columns)."""
    import inspect
    import gdn.ops.triton.forward as forward
    T, H, HV, K = 90, 2, 4, 32
    q, k, v, g, beta, S0 = random_inputs(2, T, H, HV, K, K, dtype=torch.bfloat16, initial_state=True, seed=3,
                                         device=DEVICE)
    names = list(inspect.signature(forward.wy_kernel.fn).parameters)
    watched = [names.index(n) for n in ("t_out", "attn_out", "G_out")]
    stored = []
    spy_launches(monkeypatch, "wy_kernel", lambda grid, args, kw: stored.append([args[i].clone() for i in watched]),
                 before=lambda grid, args, kw: [args[i].fill_(float("nan")) for i in watched])
    call = dict(scale=K ** -0.5, initial_state=S0, output_final_state=True, use_qk_l2norm=True, chunk_size=64)
    plain = forward.triton_forward(q, k, v, g, beta, **call)
    transposed = forward.triton_forward(q, k, v, g, beta, inverse="f16_subst_t", **call)
    (tb, p, G), (tb_t, p_t, G_t) = stored
    assert not any(torch.isnan(x).any() for x in (tb_t, p_t, G_t))
    assert torch.equal(G, G_t)
    assert_close(tb_t, tb, rtol=2e-3, name="T diag(beta)")
    assert_close(p_t, p, rtol=2e-3, name="P")
    assert_close(transposed[0], plain[0], rtol=5e-3, name="o")
    assert_close(transposed[1], plain[1], rtol=2e-3, name="S")

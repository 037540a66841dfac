"""The WY pass (gdn.ops.triton.wy.wy_kernel) in the whole forward, in Triton's interpreter on a CPU
machine (tests/conftest.py): what it stores for the walk (T diag(beta), the output attention P, G)
with the tf32x3 fallback after every head or inline, and with the inverse on the transposes. Its
inverse alone: test_inverse.py; the forward's outputs against the reference: test_chunk_fwd.py."""
import pytest
import torch

from tests.ops.triton.launches import spy_launches
from tests.reference import random_inputs
from tests.tolerances import assert_close

pytest.importorskip("triton")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("wide", [1, 0])
@pytest.mark.parametrize("inverse", [None, "f16_subst_t"])
@pytest.mark.parametrize("BT, H, HV, K, heads", [(32, 2, 4, 32, None), (16, 1, 4, 48, 4), (64, 1, 2, 32, None)])
def test_fallback_after_the_heads_stores_what_the_inline_one_does(monkeypatch, BT, H, HV, K, heads, inverse, wide):
    """wy_fallback="after" (the default: every head's fp16 inverse first, the tf32x3 fallback after all
    of them, FALLBACK_AFTER) stores T diag(beta), the output attention and G bit for bit as the inline
    fallback, every entry written (the buffers NaN-filled before each launch), and the walk's o and S
    with them. beta = 6 in one chunk of every second value head from head `wide` (max |A_ij| > 1
    there, checked here: those heads' chunk takes the fallback, the heads beside them in the same
    program do not): the odd heads (bits 1 and 3 of a program's mask) or the even ones (bit 0, each
    program's first head, and bit 2); two heads a program (the default) or four; chunks of 16, 32
    and 64, K not a power of two; the default inverse and the transposed one (f16_subst_t, whose
    inline fallback follows its head's store)."""
    import inspect
    import gdn.ops.triton.forward as forward
    T = 100
    q, k, v, g, beta, S0 = random_inputs(1, T, H, HV, K, K, dtype=torch.bfloat16, initial_state=True, seed=7,
                                         device=DEVICE)
    c0, c1 = BT, min(2 * BT, T)                 # chunk 1
    beta[:, c0:c1, wide::2] = 6.0
    kn = torch.nn.functional.normalize(k[0, c0:c1].double(), dim=-1)          # [rows, H, K]
    for hv in range(HV):
        G = g[0, c0:c1, hv].double().cumsum(0)
        D = torch.exp((G[:, None] - G[None]).tril()).tril()
        kh = kn[:, hv // (HV // H)]
        A = (beta[0, c0:c1, hv].double()[:, None] * (kh @ kh.T) * D).tril(-1)
        assert (A.abs().max() > 1) == (hv % 2 == wide)
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


@pytest.mark.parametrize("B, T, packed", [(2, 100, False), (1, 230, True)])
def test_decays_stored_by_head_are_the_same_values(monkeypatch, B, T, packed):
    """G_BY_HEAD (decays_layout="heads", the Gluon walks'): each launch of the WY pass is run again
    with G stored [HV, tokens] into a NaN-filled buffer; every value equals the [tokens, HV] store's,
    bit for bit, dense (B = 2) and packed (three sequences, chunks across their ends). The knob itself
    takes the Gluon walks, which the interpreter does not run: refused here by name."""
    import inspect
    import gdn.ops.triton.forward as forward
    from gdn.ops.triton.wy import wy_kernel
    HV = 4
    q, k, v, g, beta, _ = random_inputs(B, T, 2, HV, 32, 32, dtype=torch.bfloat16, seed=3, device=DEVICE)
    cu = torch.tensor([0, 70, 71, T], device=DEVICE) if packed else None
    names = list(inspect.signature(wy_kernel.fn).parameters)
    i_G, i_rows = names.index("G_out"), names.index("g_rows")
    pairs = []

    def again(grid, args, kw):
        G_tokens = args[i_G].clone()
        G_heads = torch.full((HV, B * T), float("nan"), device=DEVICE)
        args = list(args)
        args[i_G], args[i_rows] = G_heads, B * T
        wy_kernel[grid](*args, **dict(kw, G_BY_HEAD=True))
        pairs.append((G_tokens, G_heads))

    spy_launches(monkeypatch, "wy_kernel", again)
    forward.triton_forward(q, k, v, g, beta, scale=0.2, use_qk_l2norm=True, cu_seqlens=cu)
    assert pairs
    for G_tokens, G_heads in pairs:
        assert not torch.isnan(G_heads).any()
        assert torch.equal(G_heads, G_tokens.reshape(B * T, HV).T)
    with pytest.raises(ValueError, match="decays_layout='heads' takes the Gluon walks"):
        forward.triton_forward(q, k, v, g, beta, scale=0.2, use_qk_l2norm=True, cu_seqlens=cu, decays_layout="heads")

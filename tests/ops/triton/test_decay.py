"""The in-chunk decays (gdn.ops.triton.decay) in Triton's interpreter on a CPU machine
(tests/conftest.py): the factored decay tile against the exact one, and end to end."""
import pytest
import torch

from tests.reference import random_inputs, reference_gdn
from tests.tolerances import assert_close

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from gdn.ops.triton.decay import chunk_decay  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BT = 64


@triton.jit
def _decay_kernel(g_ptr, d_ptr, BT: tl.constexpr, FACTORED: tl.constexpr):
    o_i = tl.arange(0, BT)
    _, b_D = chunk_decay(tl.load(g_ptr + o_i), BT, FACTORED)
    tl.store(d_ptr + o_i[:, None] * BT + o_i[None, :], b_D)


def decay_tile(g: torch.Tensor, factored: bool) -> torch.Tensor:
    D = torch.full((BT, BT), float("nan"), device=DEVICE)
    _decay_kernel[(1,)](g.to(DEVICE), D, BT=BT, FACTORED=factored)
    return D


@pytest.mark.parametrize("g_scale, g_first, factored_kept", [(0.3, None, True), (0.01, None, True),
                                                           (0.01, -100.0, True), (1.0, None, False),
                                                           (30.0, None, False)])
def test_factored_decay_tile(g_scale, g_first, factored_kept):
    """Spans up to 20 (g_scale 0.3: ~9.6 on average) take the factored tile, within 1e-5 of the exact
    one and zero above the diagonal, also after a first gate of -100 (G itself far past e^-88: the
    factors are taken relative to max G); wider spans (g_scale 1: ~32, 30: ~960, where the factors
    would overflow) keep the exact tile bit for bit."""
    g = -torch.rand(BT, generator=torch.Generator().manual_seed(0)) * g_scale
    if g_first is not None:
        g[0] = g_first
    G = g.cumsum(0)
    span = (G.max() - G.min()).item()
    assert (span <= 20) == factored_kept
    exact, factored = decay_tile(g, False), decay_tile(g, True)
    assert torch.isfinite(factored).all() and (factored.triu(1) == 0).all()
    if factored_kept:
        assert_close(factored, exact, rtol=1e-5, name="D")
        assert not torch.equal(factored, exact)
    else:
        assert torch.equal(factored, exact)


def test_factored_decay_end_to_end():
    """wy_decay="factored" on the fp16 walk: within the same tolerances of the reference as the default."""
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = random_inputs(2, 150, 2, 4, 32, 32, dtype=torch.bfloat16, initial_state=True, seed=3,
                                         device=DEVICE)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    o, S = triton_forward(q, k, v, g, beta, scale=32 ** -0.5, initial_state=S0, output_final_state=True,
                          use_qk_l2norm=True, chunk_size=64, wy_decay="factored")
    assert_close(o, o_ref, rtol=1e-2, name="o")
    assert_close(S, S_ref, rtol=1.5e-3, name="S")
    with pytest.raises(ValueError, match="wy_decay must be"):
        triton_forward(q, k, v, g, beta, scale=32 ** -0.5, wy_decay="exp2")

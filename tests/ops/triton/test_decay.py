"""The in-chunk decays (gdn.ops.triton.decay) and a chunk's stored decays read back
(gdn.ops.triton.chunk_io.load_chunk_decays), on their own: in Triton's interpreter on a CPU
machine (tests/conftest.py), compiled on a GPU. The WY pass's tests (test_wy.py) use them whole."""
import pytest
import torch

from tests.tolerances import assert_close

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from gdn.ops.common import triton_interpreting  # noqa: E402
from gdn.ops.triton.chunk_io import load_chunk_decays  # noqa: E402
from gdn.ops.triton.decay import chunk_decay  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@triton.jit
def _decay_kernel(g_ptr, G_ptr, D_ptr, Dt_ptr, BT: tl.constexpr):
    o_i = tl.arange(0, BT)
    b_g = tl.load(g_ptr + o_i)
    b_G, b_D = chunk_decay(b_g, BT)
    _, b_Dt = chunk_decay(b_g, BT, True)
    tl.store(G_ptr + o_i, b_G)
    tl.store(D_ptr + o_i[:, None] * BT + o_i[None, :], b_D)
    tl.store(Dt_ptr + o_i[:, None] * BT + o_i[None, :], b_Dt)


def decays(g: torch.Tensor):
    """chunk_decay's G [BT], D [BT, BT] and its TRANSPOSED D^T for one chunk's log-decays g [BT]."""
    BT = g.numel()
    G = torch.full_like(g, float("nan"))
    D = torch.full((BT, BT), float("nan"), device=g.device)
    Dt = torch.full_like(D, float("nan"))
    _decay_kernel[(1,)](g, G, D, Dt, BT=BT)
    return G, D, Dt


@pytest.mark.parametrize("BT", [16, 64])
def test_decay_matrix_against_float64(BT):
    """G is the cumulative sum of g; D_ij = e^(G_i - G_j) on and below the diagonal (1 on it: an
    exponent of exactly 0), exactly 0 above it, and the TRANSPOSED form is D^T bit for bit. The gates
    span the bench's regimes (logsigmoid(randn + 4) and + 9) with a gate of -100 nats in the middle,
    so that the entries across it fall below 2^-126: on a GPU, where exp2 flushes those to zero
    (decay.exp_ftz), they are exactly 0; everywhere the rest is e^(G_i - G_j) to fp32's rounding."""
    gen = torch.Generator().manual_seed(BT)
    g = torch.nn.functional.logsigmoid(torch.randn(BT, generator=gen) + 4 + 5 * (torch.arange(BT) % 2))
    g[BT // 2] = -100.0
    g = g.to(DEVICE)
    G, D, Dt = decays(g)
    G64 = g.double().cpu().cumsum(0)
    assert_close(G, G64, rtol=1e-6, name="G")
    exponent = (G.double().cpu()[:, None] - G.double().cpu()[None, :])
    lower = torch.ones(BT, BT, dtype=torch.bool).tril()
    D, Dt = D.cpu(), Dt.cpu()
    assert torch.equal(Dt, D.T)
    assert (D[~lower] == 0).all()
    assert (D.diagonal() == 1).all()
    tiny = lower & (exponent < -126 * 0.6931471805599453)        # below 2^-126
    assert tiny.any()
    if not triton_interpreting():
        assert (D[tiny] == 0).all()
    normal = lower & ~tiny
    assert_close(D[normal], exponent[normal].exp(), rtol=1e-6, name="D")


@triton.jit
def _chunk_decays_kernel(Gc, G_ptr, last_ptr, t0, T_seq, HV: tl.constexpr, BT: tl.constexpr, i_hv):
    o_t = tl.arange(0, BT)
    m_t = (t0 + o_t) < T_seq
    b_G, b_G_last = load_chunk_decays(Gc, t0, t0, T_seq, i_hv, HV, BT, o_t, m_t)
    tl.store(G_ptr + o_t, b_G)
    tl.store(last_ptr, b_G_last)


def test_load_chunk_decays_rows_past_the_end_take_the_last():
    """A chunk's G as the WY pass stored it ([tokens, HV]): the chunk's rows of head i_hv, and where
    the sequence ends inside the chunk, its last token's G in every row past the end (identity
    rows: no decay there), which is also G_last."""
    BT, HV, T_seq = 16, 3, 40
    Gc = -torch.rand(T_seq, HV, generator=torch.Generator().manual_seed(3)).cumsum(0).to(DEVICE)
    for t0, i_hv in ((16, 1), (32, 2)):              # a whole chunk, then the last one (8 tokens)
        G = torch.full((BT,), float("nan"), device=DEVICE)
        last = torch.full((1,), float("nan"), device=DEVICE)
        _chunk_decays_kernel[(1,)](Gc, G, last, t0, T_seq, HV=HV, BT=BT, i_hv=i_hv)
        n = min(BT, T_seq - t0)
        expected = torch.cat([Gc[t0:t0 + n, i_hv], Gc[t0 + n - 1, i_hv].repeat(BT - n)])
        assert torch.equal(G, expected)
        assert torch.equal(last, Gc[t0 + n - 1, i_hv].reshape(1))

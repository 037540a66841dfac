"""The warp-specialised fp16 walks in Gluon (gdn.ops.triton.walk_gluon_ws and walk_gluon_ws2, walk="gluon_ws"
and "gluon_ws2", candidates):
on a GPU against the float64 reference and the Triton walk; everywhere, the calls it refuses (Gluon has
no interpreter: on a CPU machine only the refusals run here, and its sm_90 compile in test_compiled)."""
import pytest
import torch

from tests.reference import random_inputs, reference_gdn
from tests.tolerances import assert_fp16_walk_close

pytest.importorskip("triton")

HOPPER = torch.cuda.is_available() and torch.version.hip is None and torch.cuda.get_device_capability()[0] == 9


PACKED = [0, 0, 17, 18, 146, 146, 275, 400]
SHAPES = [
    (2, 256, 64, 64, None),                               # whole chunks
    (1, 300, 64, 64, None),                               # a partial last chunk (rows past the end read as zeros)
    (3, 200, 64, 64, None),                               # partial chunks at B > 1: the next sequence's rows masked
    (1, 400, 64, 64, PACKED),                             # packed, empty ones, one token, a chunk's edge
    (2, 256, 64, 128, None),                              # K != V
    (2, 512, 128, 128, None),                             # the Qwen shape's K = V = 128
    (1, 400, 64, 128, PACKED),
    (3, 200, 128, 128, None),
]
# gluon_ws2 takes V = 128 only (two halves of 64 columns).
CASES = [(walk, bound, *shape) for walk, bound in (("gluon_ws", False), ("gluon_ws", True), ("gluon_ws2", False))
         for shape in SHAPES if walk == "gluon_ws" or shape[3] == 128]


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
@pytest.mark.parametrize("walk, bound_tau, B, T, K, V, cu", CASES)
def test_gluon_ws_matches_reference_and_triton_walk(walk, bound_tau, B, T, K, V, cu):
    """o within bf16's rounding of the reference, S within fp16's, and both close to the Triton walk's
    (the same products, summed in another order), with and without an initial state, tau from the
    state's max or from the chain's bound (ws_bound_tau); no output row left unwritten (NaN-poisoned);
    the empty sequences keep their state."""
    from gdn.ops.triton import triton_forward
    cu = None if cu is None else torch.tensor(cu, dtype=torch.int32, device="cuda")
    N = B if cu is None else len(cu) - 1
    q, k, v, g, beta, S0 = random_inputs(B, T, 2, 4, K, V, dtype=torch.bfloat16, initial_state=True, N=N,
                                         seed=T + K + V, device="cuda")
    for h0 in (S0, None):
        # One segment: at so few heads the bf16 defaults would split long sequences (no fp16 walk).
        call = dict(scale=K ** -0.5, initial_state=h0, output_final_state=True, use_qk_l2norm=True, cu_seqlens=cu,
                    num_segments=None if cu is not None else 1)
        o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=h0, use_qk_l2norm=True,
                                     cu_seqlens=None if cu is None else cu.cpu())
        o, S = triton_forward(q, k, v, g, beta, walk=walk, ws_bound_tau=bound_tau,
                              out=torch.full_like(v, float("nan")), **call)
        o_t, S_t = triton_forward(q, k, v, g, beta, walk="triton", **call)
        assert_fp16_walk_close(o, S, o_ref, S_ref, o_t, S_t)
        if cu is not None and h0 is not None:
            assert torch.equal(S[0], S0[0]) and torch.equal(S[4], S0[4])


def test_gluon_ws_refusals(monkeypatch):
    """Outside what the kernels do, a ValueError that says what they need: V or K outside 64/128 (V
    other than 128 for gluon_ws2), pieces, the bf16-parts walk, other chunk sizes, ws_bound_tau beside
    gluon_ws2 (which always takes it); and no interpreter. One stage is refused by the launchers (the
    chain's k refill needs two). Meta tensors: the refusals come before any launch."""
    import gdn.ops.triton.forward as forward

    def call(K=64, V=64, device="meta", walk="gluon_ws", **kw):
        q = torch.empty(1, 128, 1, K, dtype=torch.bfloat16, device=device)
        v = torch.empty(1, 128, 2, V, dtype=torch.bfloat16, device=device)
        g = torch.zeros(1, 128, 2, device=device)
        return forward.triton_forward(q, q, v, g, g, scale=0.125, use_qk_l2norm=True, walk=walk, **kw)
    monkeypatch.setattr(forward, "triton_interpreting", lambda: False)
    monkeypatch.setattr(forward, "_tma_ready", lambda *tensors: True)
    for kw in (dict(V=32), dict(K=256), dict(pieces=2), dict(operands="bf16_parts"), dict(chunk_size=32)):
        with pytest.raises(ValueError, match="walk='gluon_ws' needs the fp16 walk"):
            call(**kw)
    with pytest.raises(ValueError, match=r"walk='gluon_ws2' needs the fp16 walk.*V in \(128,\)"):
        call(walk="gluon_ws2")
    with pytest.raises(ValueError, match="ws_bound_tau=True applies to walk='gluon_ws' only"):
        call(V=128, walk="gluon_ws2", ws_bound_tau=True)
    monkeypatch.setattr(forward, "triton_interpreting", lambda: True)
    with pytest.raises(ValueError, match="walk='gluon_ws' needs an sm_90 CUDA GPU"):
        call()


@pytest.mark.parametrize("halves", [1, 2])
def test_gluon_ws_launchers_refuse_one_stage(halves):
    """At one stage the chain would wait for a k tile it only loads later (a hang): refused first."""
    from gdn.ops.triton.walk_gluon_ws import walk_gluon_ws
    q = torch.empty(1, 128, 1, 64, dtype=torch.float16, device="meta")
    v = torch.empty(1, 128, 2, 128, dtype=torch.bfloat16, device="meta")
    with pytest.raises(ValueError, match="needs stages >= 2, got 1"):
        walk_gluon_ws(q, q, v, None, None, None, v, None, None, 0.125, 1, 2, 64, stages=1, halves=halves)

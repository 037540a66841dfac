"""The Gluon walk with k S a chunk ahead (gdn.ops.triton.walk_gluon_ahead, walk="gluon_ahead", a
candidate): on a GPU against the float64 reference and the Triton walk; everywhere, what it refuses.
Gluon kernels have no interpreter, so on a CPU machine only the refusals run here (and the kernel's
sm_90 compile in test_compiled.py)."""
import pytest
import torch

from tests.ops.triton.launches import spy_launches
from tests.reference import MAGNITUDES, assert_any_magnitude, magnitude_inputs, random_inputs, reference_gdn
from tests.tolerances import assert_fp16_walk_close

pytest.importorskip("triton")


HOPPER = torch.cuda.is_available() and torch.version.hip is None and torch.cuda.get_device_capability()[0] == 9


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
@pytest.mark.parametrize("case", ["beside the WY pass", "partial last chunk", "after the WY pass, no h0",
                                  "varlen", "three stages"])
def test_gluon_ahead_matches_reference_and_triton_walk(case, monkeypatch):
    """B = 1 beside the WY pass (waiting on its counts) with whole chunks and with a partial last one,
    after it without an initial state, packed sequences (empty ones, one of a single token: rows of the
    next sequence masked), three stages: o within bf16's rounding of the reference, S within fp16's,
    both close to the Triton walk's; no output row left unwritten (NaN-poisoned); empty sequences keep
    their state."""
    import gdn.ops.triton.walk_gluon_ahead as ahead
    from gdn.ops.triton import triton_forward
    launches = []
    spy_launches(monkeypatch, "walk_ahead_kernel", lambda grid, args, kw: launches.append(kw["WAIT"]), module=ahead)
    cu, B, T, N = None, 1, 4096, None
    call = dict(num_segments=1)                 # few heads: the bf16 defaults would split the sequence
    if case == "partial last chunk":
        T = 8195
    elif case == "after the WY pass, no h0":
        call = dict(call, pieces=1)
    elif case == "varlen":
        cu = torch.tensor([0, 0, 17, 18, 146, 146, 275, 400], dtype=torch.int32, device="cuda")
        T, N, call = 400, 7, dict(cu_seqlens=cu)
    elif case == "three stages":
        call = dict(call, walk_stages=3, pieces=1)
    q, k, v, g, beta, S0 = random_inputs(B, T, 2, 4, 64, 64, dtype=torch.bfloat16, initial_state=True, N=N,
                                         seed=T, device="cuda")
    h0 = None if case == "after the WY pass, no h0" else S0
    call = dict(call, scale=64 ** -0.5, initial_state=h0, output_final_state=True, use_qk_l2norm=True)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=h0, use_qk_l2norm=True,
                                 cu_seqlens=None if cu is None else cu.cpu())
    o, S = triton_forward(q, k, v, g, beta, walk="gluon_ahead", out=torch.full_like(v, float("nan")), **call)
    o_t, S_t = triton_forward(q, k, v, g, beta, walk="triton", **call)
    assert launches == [case == "beside the WY pass" or case == "partial last chunk"]
    assert_fp16_walk_close(o, S, o_ref, S_ref, o_t, S_t)
    if cu is not None:
        assert torch.equal(S[0], S0[0]) and torch.equal(S[4], S0[4])    # the empty sequences


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
@pytest.mark.parametrize("walk", ["gluon", "gluon_ahead"])
@pytest.mark.parametrize("case", list(MAGNITUDES))
def test_gluon_walks_scale_any_magnitude(case, walk):
    """Both Gluon walks on tests.reference's magnitudes far outside fp16's range (test_walk_f16 runs
    them on the Triton walk): finite and as exact as at unit scale. The lookahead walk takes Z's scale
    from a bound on the state, not its max (walk_gluon_ahead's docstring): a state erased or forgotten
    inside a chunk is where that bound is loose."""
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = magnitude_inputs(case, 64, "cuda")
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    o, S = triton_forward(q, k, v, g, beta, scale=64 ** -0.5, initial_state=S0, output_final_state=True,
                          use_qk_l2norm=True, walk=walk, num_segments=1, out=torch.full_like(v, float("nan")))
    assert_any_magnitude(case, o, S, o_ref, S_ref)


def test_gluon_ahead_refusals(monkeypatch):
    """One stage (P's ring runs a chunk behind) is refused with the reason, as is everything the Gluon
    walk refuses (one case here; test_walk_gluon has the rest), and gluon_scale_late, which does not
    apply to it. Meta tensors: the refusals come before any launch."""
    import gdn.ops.triton.forward as forward
    monkeypatch.setattr(forward, "triton_interpreting", lambda: False)
    monkeypatch.setattr(forward, "_tma_ready", lambda *tensors: True)

    def call(**kw):
        q = torch.empty(1, 128, 1, 64, dtype=torch.bfloat16, device="meta")
        v = torch.empty(1, 128, 2, 64, dtype=torch.bfloat16, device="meta")
        g = torch.zeros(1, 128, 2, device="meta")
        return forward.triton_forward(q, q, v, g, g, scale=0.125, use_qk_l2norm=True, walk="gluon_ahead",
                                      num_segments=1, **kw)
    with pytest.raises(ValueError, match="walk='gluon_ahead' needs .*walk_stages >= 2"):
        call(walk_stages=1)
    with pytest.raises(ValueError, match="walk='gluon_ahead' needs the fp16 walk"):
        call(operands="bf16_parts")
    with pytest.raises(ValueError, match="gluon_scale_late=True applies to the Gluon walk only"):
        call(gluon_scale_late=True)

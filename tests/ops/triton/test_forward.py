"""The launcher (gdn.ops.triton.forward), through the op or called itself: a call on CUDA tensors
makes no host synchronisation (issue 3: none per call beyond what varlen bookkeeping strictly needs,
and none when lengths are equal), whichever schedule it takes. torch's sync debug mode turns any synchronising
call torch makes (a device-to-host copy, .item(), .tolist(), nonzero) into an error; Triton's
launches make none. GPU only: the interpreter's tensors are on the CPU."""
import pytest
import torch

from gdn import gated_delta_rule
from tests.reference import random_inputs, reference_gdn
from tests.tolerances import assert_close

pytest.importorskip("triton")

CUDA = torch.cuda.is_available() and torch.version.hip is None
HOPPER = CUDA and torch.cuda.get_device_capability()[0] == 9       # (the automatic split's Gluon walks)


def _without_sync(fn):
    """fn()'s result, with torch's synchronising calls raising inside it."""
    torch.cuda.synchronize()
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        return fn()
    finally:
        torch.cuda.set_sync_debug_mode(before)


# (B, T, dtype, l2norm, packed lengths, launcher knobs): the automatic split at B = 1 (512 chunks and
# a partial one; one segment asked for, whatever the few-heads rule of the day takes at 4 value
# heads (v54-v56); without l2norm its keys' kernel too), segments joined by their maps, wide and odd, one
# token, fp32, packed sequences (the second call of a cu_seqlens tensor: the first validates its
# values once). Calls with knobs go to the launcher itself (gdn.ops.triton.triton_forward).
CASES = {
    "split": (1, 512 * 64 + 37, torch.bfloat16, True, None, dict(num_segments=1)),
    "split, no l2norm": (1, 512 * 64 + 37, torch.bfloat16, False, None, dict(num_segments=1)),
    "maps": (1, 2000, torch.bfloat16, True, None, dict(num_segments=4)),
    "wide, odd T": (8, 300, torch.bfloat16, True, None, {}),
    "one token": (3, 1, torch.bfloat16, True, None, {}),
    "fp32": (2, 200, torch.float32, True, None, {}),
    "packed": (1, 1000, torch.bfloat16, True, [0, 1, 300, 300, 1000], {}),
}


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (a host sync is a CUDA notion)")
@pytest.mark.parametrize("case", list(CASES))
def test_a_call_makes_no_host_sync(case):
    """The second call of each case (the first compiles, plans and validates) under sync debug mode
    "error", then its outputs against the float64 reference within issue 3's bounds (so the call did
    run, and ran right); the split cases took the automatic split, every head chosen."""
    import gdn.ops.triton.split_walk as split_walk
    from gdn.ops.triton import triton_forward
    B, T, dtype, l2norm, lengths, knobs = CASES[case]
    if case.startswith("split") and not HOPPER:
        pytest.skip("the automatic split needs an sm_90 GPU (its walks are Gluon kernels)")
    q, k, v, g, beta, S0 = random_inputs(B, T, 2, 4, 128, 128, dtype=dtype, initial_state=True, seed=len(case),
                                         device="cuda")
    if not l2norm:                      # (the delta rule needs |k| <= ~1 without l2norm)
        q, k = (torch.nn.functional.normalize(x.float(), dim=-1).to(dtype) for x in (q, k))
    cu_seqlens = None
    if lengths is not None:
        cu_seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
        S0 = S0[:1].expand(len(lengths) - 1, -1, -1, -1).contiguous()
    call = dict(scale=128 ** -0.5, initial_state=S0, output_final_state=True, use_qk_l2norm=l2norm,
                cu_seqlens=cu_seqlens)
    op = (lambda: triton_forward(q, k, v, g, beta, **call, **knobs)) if knobs else \
        (lambda: gated_delta_rule(q, k, v, g, beta, **call, backend="triton"))
    op()
    split_walk.last_heads = None
    o, S = _without_sync(op)
    if case.startswith("split"):        # (the schedule this case is for: every head's warm-ups forget)
        assert split_walk.last_heads is not None and bool(split_walk.last_heads.all())
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, scale=128 ** -0.5, initial_state=S0, cu_seqlens=cu_seqlens,
                                 use_qk_l2norm=l2norm)
    rtol = 5e-3 if dtype == torch.bfloat16 else 1e-3            # (issue 3's bounds on the GPU)
    assert_close(o, o_ref, rtol=rtol, name="o")
    assert_close(S, S_ref, rtol=rtol, name="S")


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (a host sync is a CUDA notion)")
def test_sync_debug_mode_catches_a_sync():
    """The check above can fail: a device-to-host read under the same mode raises."""
    x = torch.ones(3, device="cuda")
    with pytest.raises(RuntimeError):
        _without_sync(lambda: x.sum().item())

"""The reused workspace of the torch algorithms (gdn.ops.common.Workspace): calls of different shapes
in a row stay exact, and nothing a call returns aliases a buffer the next call overwrites."""
import pytest
import torch

import gdn
from gdn.ops.common import Workspace, release_workspace, workspace
from tests.reference import random_inputs, reference_gdn
from tests.tolerances import assert_close


def test_workspace_buffers_are_reused_and_grow():
    ws, like = Workspace(), torch.empty(0)
    a = ws.get("x", (4, 8), like)
    assert ws.get("x", (2, 3), like).data_ptr() == a.data_ptr()          # a smaller view of the same memory
    b = ws.get("x", (64, 64), like)                                      # larger: a new buffer
    assert b.shape == (64, 64) and ws.get("x", (4, 8), like).data_ptr() == b.data_ptr()
    assert ws.get("x", (4, 8), like.double()).dtype == torch.float64     # one buffer per dtype


def test_no_workspace_while_autograd_records():
    x = torch.zeros(2, requires_grad=True)
    assert workspace(x) is None
    with torch.no_grad():
        assert workspace(x) is not None
    assert workspace(x.detach()) is workspace(x.detach())                # one per thread, kept
    release_workspace()


@pytest.mark.parametrize("backend", ["chunk", "scan"])
def test_calls_of_different_shapes_in_a_row(backend):
    """Shrinking and growing shapes reuse the same buffers; the results of an earlier call must not
    change when a later call overwrites them."""
    cases = [(1, 1100, 2, 2, 32, 16, 64), (2, 77, 1, 2, 16, 24, 16), (1, 600, 2, 4, 32, 16, 32),
             (1, 1100, 2, 2, 32, 16, 64)]
    kept = []
    with torch.no_grad():
        for i, (B, T, H, HV, K, V, C) in enumerate(cases):
            q, k, v, g, beta, S0 = random_inputs(B, T, H, HV, K, V, initial_state=True, seed=i)
            o, S = gdn.gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                        use_qk_l2norm=True, backend=backend, chunk_size=C)
            o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
            assert_close(o, o_ref, name=f"o[{i}]")
            assert_close(S, S_ref, name=f"S[{i}]")
            kept.append((o, S, o.clone(), S.clone()))
    for i, (o, S, o_copy, S_copy) in enumerate(kept):
        assert torch.equal(o, o_copy) and torch.equal(S, S_copy), f"call {i}'s results were overwritten"


@pytest.mark.parametrize("backend", ["chunk", "scan"])
def test_inference_mode_then_no_grad(backend):
    """Buffers first made under torch.inference_mode() must still be writable outside it."""
    release_workspace()
    q, k, v, g, beta, _ = random_inputs(1, 100, 2, 2, 16, 16, seed=5)
    with torch.inference_mode():
        o_inference, _ = gdn.gated_delta_rule(q, k, v, g, beta, backend=backend, chunk_size=32)
    with torch.no_grad():
        o, _ = gdn.gated_delta_rule(q, k, v, g, beta, backend=backend, chunk_size=32)
    assert torch.equal(o, o_inference)


def test_workspace_holds_at_most_its_limit():
    ws, like = Workspace(max_bytes=1000), torch.empty(0)                # float32: 400 bytes per 100
    ws.get("x", (100,), like)
    ws.get("y", (100,), like)
    z1, z2 = ws.get("z", (100,), like), ws.get("z", (100,), like)       # over the limit: fresh each time
    assert z1.data_ptr() != z2.data_ptr() and ws.held_bytes() == 800


@pytest.mark.parametrize("text", ["abc", "nan", "inf", "-1"])
def test_a_bad_workspace_limit_is_named(text, monkeypatch):
    from gdn.ops.common import workspace_limit
    monkeypatch.setenv("GDN_CPU_WORKSPACE_MB", text)
    with pytest.raises(ValueError, match="GDN_CPU_WORKSPACE_MB must be a number of megabytes"):
        workspace_limit()


@pytest.mark.parametrize("backend", ["chunk", "scan"])
def test_exact_with_a_workspace_too_small_to_hold_anything(backend, monkeypatch):
    monkeypatch.setenv("GDN_CPU_WORKSPACE_MB", "0")
    release_workspace()
    q, k, v, g, beta, S0 = random_inputs(1, 1100, 2, 4, 16, 24, initial_state=True, seed=8)   # 3 blocks
    with torch.no_grad():
        o, S = gdn.gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                    backend=backend, chunk_size=32)
    assert workspace(q).held_bytes() == 0
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0)
    assert_close(o, o_ref, name="o")
    assert_close(S, S_ref, name="S")
    release_workspace()


@pytest.mark.parametrize("backend", ["chunk", "scan"])
def test_torch_compile_takes_fresh_tensors(backend):
    """Under torch.compile no workspace is used: its out= views of reused buffers failed in
    functionalization (BackendCompilerFailed, inductor and aot_eager alike). aot_eager here, which
    traces the same graph as inductor without its C++ build (a cold inductor took ~45 s on a 2-core
    VM; with it the same call passes, checked by hand); compiled = eager within float32's rounding,
    outputs and gradients."""
    q, k, v, g, beta, S0 = random_inputs(1, 24, 1, 2, 16, 16, dtype=torch.float32, initial_state=True)
    kw = dict(initial_state=S0, output_final_state=True, use_qk_l2norm=True, backend=backend, chunk_size=16)
    torch._dynamo.reset()
    compiled = torch.compile(lambda *a: gdn.gated_delta_rule(*a, **kw), backend="aot_eager")
    with torch.no_grad():
        o, S = compiled(q, k, v, g, beta)
        o_eager, S_eager = gdn.gated_delta_rule(q, k, v, g, beta, **kw)
    assert_close(o, o_eager, rtol=1e-6, name="o")
    assert_close(S, S_eager, rtol=1e-6, name="S")
    # With autograd (training through a compiled model): the same gradients as eager.
    grads = []
    for fn in (compiled, lambda *a: gdn.gated_delta_rule(*a, **kw)):
        q_grad = q.clone().requires_grad_(True)
        fn(q_grad, k, v, g, beta)[0].square().sum().backward()
        grads.append(q_grad.grad)
    assert_close(grads[0], grads[1], rtol=1e-6, name="dq")

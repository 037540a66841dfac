"""recurrent, chunk and scan against the independent float64 recurrence of tests/reference.py."""
import pytest
import torch

import gdn
from tests.reference import random_inputs, reference_gdn
from tests.tolerances import assert_close

BACKENDS = ["recurrent", "chunk", "scan"]


@pytest.mark.parametrize("T", [1, 63, 64, 65, 200, 1000])
@pytest.mark.parametrize("ratio", [1, 2, 4])
def test_all_backends_match_reference_float64(T, ratio):
    H, K, V = 2, 64, 96                                   # K != V on purpose
    q, k, v, g, beta, S0 = random_inputs(1, T, H, H * ratio, K, V, initial_state=True, seed=T + ratio)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0)
    for backend in BACKENDS:
        for chunk_size in ([64] if backend == "recurrent" else [16, 32, 64, 128]):
            o, S = gdn.gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                        backend=backend, chunk_size=chunk_size)
            assert_close(o, o_ref, name=f"o[{backend}, C={chunk_size}]")
            assert_close(S, S_ref, name=f"S[{backend}, C={chunk_size}]")


@pytest.mark.parametrize("gate", ["zero", "strong"])
@pytest.mark.parametrize("beta_mode", [0, 1])
def test_extreme_gates_and_betas(gate, beta_mode):
    q, k, v, g, beta, S0 = random_inputs(2, 130, 2, 4, 32, 16, gate=gate, beta_mode=beta_mode,
                                         initial_state=True, seed=7)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0)
    for backend in BACKENDS:
        o, S = gdn.gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                    backend=backend, chunk_size=32)
        # g = -30 wipes the state every token: the output norm is tiny but must still match.
        assert_close(o, o_ref, name=f"o[{backend}]")
        assert_close(S, S_ref, name=f"S[{backend}]")


@pytest.mark.parametrize("backend", BACKENDS)
def test_varlen_with_empty_and_short_sequences(backend):
    cu = torch.tensor([0, 0, 1, 66, 66, 130, 337], dtype=torch.int32)
    N, T = len(cu) - 1, int(cu[-1])
    q, k, v, g, beta, S0 = random_inputs(1, T, 2, 4, 32, 48, initial_state=True, N=N, seed=3)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, cu_seqlens=cu)
    o, S = gdn.gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                cu_seqlens=cu, backend=backend, chunk_size=32)
    assert_close(o, o_ref, name="o")
    assert_close(S, S_ref, name="S")
    # The empty sequences hand their initial state straight through.
    assert torch.equal(S[0], S0[0]) and torch.equal(S[3], S0[3])


@pytest.mark.parametrize("backend", BACKENDS)
def test_l2norm_scale_and_batch(backend):
    q, k, v, g, beta, _ = random_inputs(3, 77, 2, 2, 32, 32, seed=11)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, scale=0.3, use_qk_l2norm=True)
    o, S = gdn.gated_delta_rule(q, k, v, g, beta, scale=0.3, use_qk_l2norm=True, output_final_state=True,
                                backend=backend, chunk_size=16)
    assert_close(o, o_ref, name="o")
    assert_close(S, S_ref, name="S")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("backend", BACKENDS)
def test_low_precision_inputs(dtype, backend):
    q, k, v, g, beta, S0 = random_inputs(1, 150, 2, 4, 32, 32, dtype=dtype, initial_state=True, seed=5)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    o, S = gdn.gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                use_qk_l2norm=True, backend=backend, chunk_size=32)
    assert o.dtype == dtype and S.dtype == torch.float32
    # Inputs were rounded to `dtype` before the reference saw them, so only the output rounding and
    # float32 accumulation separate the two.
    rtol = {torch.float32: 2e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}[dtype]
    assert_close(o, o_ref, rtol=rtol, name="o")
    assert_close(S, S_ref, rtol=2e-5, name="S")


def test_no_final_state_unless_asked():
    q, k, v, g, beta, _ = random_inputs(1, 10, 1, 1, 8, 8)
    assert gdn.gated_delta_rule(q, k, v, g, beta)[1] is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_sequence_returns_initial_state(backend):
    q, k, v, g, beta, S0 = random_inputs(2, 0, 2, 2, 8, 8, initial_state=True)
    o, S = gdn.gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True, backend=backend)
    assert o.shape == (2, 0, 2, 8)
    assert torch.equal(S, S0)
    o, S = gdn.gated_delta_rule(q, k, v, g, beta, output_final_state=True, backend=backend)
    assert torch.equal(S, torch.zeros(2, 2, 8, 8, dtype=S.dtype))


def test_fla_compatible_names():
    q, k, v, g, beta, S0 = random_inputs(1, 40, 2, 2, 16, 16, initial_state=True)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    for fn in (gdn.chunk_gated_delta_rule, gdn.fused_recurrent_gated_delta_rule):
        o, S = fn(q, k, v, g, beta, initial_state=S0, output_final_state=True, use_qk_l2norm_in_kernel=True)
        assert_close(o, o_ref, name=fn.__name__)
        assert_close(S, S_ref, name=fn.__name__)


def test_chunk_walk_from_zero_state_across_blocks():
    """No initial state and more than WALK_BLOCK_TOKENS (1024) tokens: only the first chunk of the
    first block may skip the product with S (S_is_zero); every later block starts from the state the
    earlier ones left. (Mutant: chunk.py's ``S_is_zero = False`` dropped; every test of T > 1024 had
    an initial state.)"""
    q, k, v, g, beta, _ = random_inputs(1, 1100, 1, 1, 16, 16, seed=21)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta)
    with torch.no_grad():                               # the workspace walk (no autograd)
        o, S = gdn.gated_delta_rule(q, k, v, g, beta, output_final_state=True, backend="chunk", chunk_size=64)
    assert_close(o, o_ref, name="o")
    assert_close(S, S_ref, name="S")


@pytest.mark.parametrize("backend", ["chunk", "scan"])
def test_chunk_size_larger_than_a_block(backend):
    """chunk_size past BLOCK_TOKENS (512) and WALK_BLOCK_TOKENS (1024): at least one chunk a block.
    (Mutant: scan.py's ``step = max(1, BLOCK_TOKENS // chunk_size)`` without the max: a step of 0.)"""
    q, k, v, g, beta, S0 = random_inputs(1, 1100, 1, 1, 16, 16, initial_state=True, seed=22)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0)
    with torch.no_grad():
        o, S = gdn.gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                    backend=backend, chunk_size=1024)
    assert_close(o, o_ref, name="o")
    assert_close(S, S_ref, name="S")


@pytest.mark.parametrize("backend", ["recurrent", "chunk", "scan"])
def test_float64_initial_state_alone_computes_in_float64(backend):
    """The dtype policy: float64 when ANY input is float64, the initial state included (gated_delta_rule's
    docstring). (Mutant: api.py's float64 test over q, k, v, g, beta only.)"""
    q, k, v, g, beta, S0 = random_inputs(1, 40, 1, 2, 16, 16, initial_state=True, seed=23)
    q32, k32, v32, g32, b32 = (x.float() for x in (q, k, v, g, beta))
    o_ref, S_ref = reference_gdn(q32, k32, v32, g32, b32, initial_state=S0)
    o, S = gdn.gated_delta_rule(q32, k32, v32, g32, b32, initial_state=S0, output_final_state=True,
                                backend=backend, chunk_size=16)
    assert o.dtype == torch.float32 and S.dtype == torch.float64
    assert_close(S, S_ref, rtol=1e-10, name="S")


@pytest.mark.parametrize("backend", ["recurrent", "chunk", "scan"])
def test_final_state_never_aliases_the_initial_state(backend):
    """The final state is a new tensor, also for T = 0, where it equals the initial state: writing
    into it must not change the caller's initial_state. (Mutant: api.py's ``S0.clone()`` -> ``S0``.)"""
    for T in (0, 5):
        q, k, v, g, beta, S0 = random_inputs(1, T, 1, 2, 8, 8, initial_state=True, seed=24)
        S0_before = S0.clone()
        _, S = gdn.gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True, backend=backend)
        S.add_(1.0)
        assert torch.equal(S0, S0_before), f"T={T}: the initial state changed with the final state"

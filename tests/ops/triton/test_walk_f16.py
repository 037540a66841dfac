"""The walk on fp16 operands scaled by powers of two (gdn.ops.triton.walk_f16) against the float64
reference: where it is the default, its accuracy, values and states far outside fp16's range, and
the arguments it refuses (varlen: tests/ops/triton/test_chunk_fwd.py). On a CPU machine the kernels
run in Triton's interpreter (tests/conftest.py)."""
import pytest
import torch

import gdn
from tests.ops.triton.launches import launch_flags
from tests.reference import MAGNITUDES, assert_any_magnitude, magnitude_inputs, magnitude_reference, parallel_key_inputs, random_inputs, \
    reference_gdn
from tests.tolerances import assert_close

pytest.importorskip("triton")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("l2norm", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("T, H, HV, K, V, C", [(1, 1, 1, 16, 16, 16), (150, 2, 4, 32, 32, 32),
                                              (65, 1, 2, 32, 48, 64), (100, 2, 2, 64, 64, 16)])
def test_fp16_walk_is_the_default_and_matches_reference(T, H, HV, K, V, C, dtype, l2norm, monkeypatch):
    """bf16 and fp16 inputs take the fp16 walk by default, with l2norm or without (q of norm ~sqrt(K),
    keys of norm ~1, as given): o within the inputs' rounding, the state within fp16's (S ~4e-4
    against float64, where two bf16 parts give ~3e-5 and one bf16 part ~3e-3).
    Fewer than 8 chunks a sequence: on a GPU, longer sequences of so few heads are cut into segments,
    which keep the bf16 parts (test_fp16_walk_where_it_does_not_apply)."""
    seen = launch_flags(monkeypatch)
    q, k, v, g, beta, S0 = random_inputs(2, T, H, HV, K, V, dtype=dtype, initial_state=True, seed=T,
                                         device=DEVICE)
    for h0 in (S0, None):
        o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=h0, use_qk_l2norm=l2norm)
        o, S = gdn.gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                    use_qk_l2norm=l2norm, chunk_size=C, backend="triton")
        assert o.dtype == dtype and S.dtype == torch.float32
        assert_close(o, o_ref, rtol=1e-2 if dtype == torch.bfloat16 else 2e-3, name="o")
        assert_close(S, S_ref, rtol=1.5e-3, name="S")
    assert seen and all(seen)


def test_fp16_walk_inverse_by_substitution():
    """inverse="blocks_f16_subst" (the in-chunk inverse's merge on plain fp16 products: gdn.ops.triton.
    inverse.merge_subst), "f16_subst" (every step on them: inverse.inverse_subst) and "f16_subst_t" (the same on the
    transposes) on the hard case of the inverse, nearly parallel keys with beta near 1 and slow
    decay: within the fp16 walk's tolerances of the reference, as the pairs of fp16 parts are.
    Elsewhere than the fp16 walk the name is refused (tests/ops/triton/test_inverse.py: the inverse alone)."""
    from gdn.ops.triton import triton_forward
    K = 32
    q, k, v, g, beta, S0 = parallel_key_inputs(device=DEVICE, K=K)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    call = dict(scale=K ** -0.5, initial_state=S0, output_final_state=True, use_qk_l2norm=True, chunk_size=64)
    for inverse in ("blocks_f16_subst", "f16_subst", "f16_subst_t", "blocks_f16"):
        o, S = triton_forward(q, k, v, g, beta, inverse=inverse, **call)
        assert_close(o, o_ref, rtol=2e-2, name=f"o, {inverse}")
        assert_close(S, S_ref, rtol=3e-3, name=f"S, {inverse}")
    with pytest.raises(ValueError, match="blocks_f16_subst' needs the fp16 walk"):
        triton_forward(q, k, v, g, beta, inverse="blocks_f16_subst", operands="bf16_parts", **call)


@pytest.mark.parametrize("segments", [dict(), dict(num_segments=4, maps="f16")])
@pytest.mark.parametrize("case", list(MAGNITUDES))
def test_fp16_walk_scales_any_magnitude(case, segments):
    """Every fp16 operand is scaled per chunk by a power of two from its largest entry, so no
    magnitude overflows fp16 or falls below its normal range: finite, and as exact as at unit scale
    (the rows after the forgetting gate on their own too: their scale comes from the values; the
    state the delta rule erases with zero values: each chunk scales what is left of it). In one
    segment, and in four joined by maps walked the same way (maps="f16": each map's columns scaled
    as a state, the fold on bf16 parts, which keep fp32's range)."""
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = inputs = magnitude_inputs(case, 32, DEVICE)
    reference = magnitude_reference(inputs, 32)
    o, S = triton_forward(q, k, v, g, beta, scale=32 ** -0.5, initial_state=S0, output_final_state=True,
                          use_qk_l2norm=True, chunk_size=32, operands="fp16", **segments)
    assert_any_magnitude(case, o, S, reference)


def test_fp16_walk_on_a_state_erased_within_a_chunk():
    """At 64 dims and chunks of 64, v = 0 on a random state erases ~1e6 of it each chunk (1e-19 of S0
    after 256 tokens): the fp16 walk's state is then within fp16's rounding of the state the last
    chunk started from, not of what is left (assert_any_magnitude's "erase" bound; ~0.1 off relative
    to itself, walk_f16's docstring), while two bf16 parts keep it relative too."""
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = inputs = magnitude_inputs("v zero on a random S0", 64, DEVICE)
    reference = magnitude_reference(inputs, 64)
    call = dict(scale=64 ** -0.5, initial_state=S0, output_final_state=True, use_qk_l2norm=True, chunk_size=64)
    o, S = triton_forward(q, k, v, g, beta, operands="fp16", **call)
    assert_any_magnitude("v zero on a random S0", o, S, reference)
    o, S = triton_forward(q, k, v, g, beta, operands="bf16_parts", **call)
    assert_close(S, reference[1], rtol=1.5e-3, name="S of bf16 parts")


def test_fp16_walk_where_it_does_not_apply(monkeypatch):
    """With segments on bf16 parts (maps="bf16_parts"), with |scale| > 256 or < 2^-10 (P stored in
    fp16 unscaled would overflow or fall to subnormals) or w and u stored (factors="wu") the default
    keeps the bf16 parts (fp16 inputs the tf32 walk), and asking for fp16 there is an error naming
    what it needs. Segments take it by default (maps="f16")."""
    from gdn.ops.triton import triton_forward
    seen = launch_flags(monkeypatch)
    q, k, v, g, beta = random_inputs(1, 70, 1, 2, 32, 32, dtype=torch.bfloat16, seed=5, device=DEVICE)[:5]
    parts = dict(num_segments=2, maps="bf16_parts")
    triton_forward(q, k, v, g, beta, scale=0.25, chunk_size=32, use_qk_l2norm=True, **parts)
    triton_forward(q, k, v, g, beta, scale=300.0, chunk_size=32, use_qk_l2norm=True)
    triton_forward(q, k, v, g, beta, scale=1e-4, chunk_size=32, use_qk_l2norm=True)
    triton_forward(q, k, v, g, beta, scale=0.25, chunk_size=32, **parts)          # no l2norm either
    triton_forward(q, k, v, g, beta, scale=0.25, chunk_size=32, use_qk_l2norm=True, num_segments=2)
    assert seen == [False, False, False, False, True]
    for kw in (parts, dict(use_qk_l2norm=True, **parts), dict(use_qk_l2norm=True, scale=300.0),
               dict(use_qk_l2norm=True, scale=1e-4), dict(use_qk_l2norm=True, factors="wu")):
        with pytest.raises(ValueError, match="operands='fp16' needs"):
            triton_forward(q, k, v, g, beta, **{"scale": 0.25, "chunk_size": 32, "operands": "fp16", **kw})
    with pytest.raises(ValueError, match="operands must be"):
        triton_forward(q, k, v, g, beta, scale=0.25, operands="fp8")
    # fp16 inputs: in segments the tf32 walk (not bf16 parts, which need bf16 values)
    q, k, v = q.half(), k.half(), v.half()
    seen.clear()
    triton_forward(q, k, v, g, beta, scale=0.25, chunk_size=32, num_segments=2)
    triton_forward(q, k, v, g, beta, scale=0.25, chunk_size=32, use_qk_l2norm=True, num_segments=2)
    wy_splits = launch_flags(monkeypatch, "wy_kernel", "WY_SPLIT")
    for kw in (dict(fast_dots=True), dict(state_split=0), dict(wy_dtype=torch.bfloat16)):     # knobs of that walk
        triton_forward(q, k, v, g, beta, scale=0.25, chunk_size=32, use_qk_l2norm=True, **kw)
    assert seen == [False] * 5 and wy_splits == [0] * 3        # no bf16 parts of fp16-derived values
    with pytest.raises(ValueError, match="wy_split must be"):
        triton_forward(q, k, v, g, beta, scale=0.25, chunk_size=32, use_qk_l2norm=True, wy_split=-1)
    with pytest.raises(ValueError, match="operands='bf16_parts' needs bf16 inputs"):
        triton_forward(q, k, v, g, beta, scale=0.25, chunk_size=32, use_qk_l2norm=True, operands="bf16_parts")


def test_fp16_walk_without_l2norm_takes_q_and_k_as_given(monkeypatch):
    """Without l2norm the WY pass rounds q and k to fp16 as given: queries of norms 1e-2 to 1e3 and keys
    of norms 0.05 to 1.4 (entries within fp16's range) come out as exact as unit ones, row by row,
    against float64 on the same bf16 inputs and as the bf16-parts walk (bf16's range) does; a query
    entry past fp16's largest (65504) gives infinities in o, never a quiet error."""
    from gdn.ops.triton import triton_forward
    from tests.reference import with_row_norms
    seen = launch_flags(monkeypatch)
    K = 32
    q, k, v, g, beta, S0 = random_inputs(1, 130, 2, 4, K, K, dtype=torch.float64, initial_state=True, seed=11)
    gen = torch.Generator().manual_seed(1)
    q = q / q.norm(dim=-1, keepdim=True) * 10 ** (5 * torch.rand(q.shape[:-1] + (1,), generator=gen) - 2)
    k = with_row_norms(k, 0.05, 1.4, seed=2)
    q, k, v = (x.bfloat16().double() for x in (q, k, v))                # the inputs as the kernels see them
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0)
    dev = lambda x, dtype=torch.bfloat16: x.to(DEVICE, dtype)
    args = (dev(q), dev(k), dev(v), dev(g, torch.float32), dev(beta, torch.float32))
    call = dict(scale=K ** -0.5, initial_state=dev(S0, torch.float32), output_final_state=True, chunk_size=32)
    rows = lambda x: x.double().cpu().reshape(-1, K)
    row_error = lambda o: float(((rows(o) - rows(o_ref)).norm(dim=1) / rows(o_ref).norm(dim=1)).max())
    o, S = triton_forward(*args, **call)
    assert seen == [True]
    assert row_error(o) < 1e-2, f"o rows off by up to {row_error(o):.2e}"
    assert_close(S, S_ref, rtol=1.5e-3, name="S")
    o, _ = triton_forward(*args, operands="bf16_parts", **call)
    assert row_error(o) < 1e-2, f"bf16 parts: o rows off by up to {row_error(o):.2e}"
    big = args[0].clone()
    big[0, 7, 1, 3] = 1e5
    o, _ = triton_forward(big, *args[1:], **call)
    assert not bool(torch.isfinite(o).all())


def test_fp16_inputs_without_l2norm_are_the_walks_q_and_k(monkeypatch):
    """fp16 inputs without l2norm are what the fp16 walk reads: the WY pass writes no copies of q and k
    (STORE_QK off) and the results are the copies' bits (qk_copies=True). With l2norm, with bf16
    inputs, and where q starts off a 16-byte boundary (TMA), the WY pass writes the copies."""
    from gdn.ops.triton import triton_forward
    stores = launch_flags(monkeypatch, "wy_kernel", "STORE_QK")
    q, k, v, g, beta, S0 = random_inputs(2, 100, 2, 4, 32, 32, dtype=torch.float16, initial_state=True, seed=3,
                                         device=DEVICE)
    call = dict(scale=32 ** -0.5, initial_state=S0, output_final_state=True, chunk_size=32)
    o, S = triton_forward(q, k, v, g, beta, **call)
    o_copies, S_copies = triton_forward(q, k, v, g, beta, qk_copies=True, **call)
    q_off = torch.empty(q.numel() + 1, dtype=q.dtype, device=DEVICE)[1:].view(q.shape).copy_(q)
    o_off, S_off = triton_forward(q_off, k, v, g, beta, **call)
    assert stores == [False, True, True]
    for x, y in ((o, o_copies), (S, S_copies), (o, o_off), (S, S_off)):
        assert torch.equal(x, y)
    triton_forward(q, k, v, g, beta, use_qk_l2norm=True, **call)
    triton_forward(q.bfloat16(), k.bfloat16(), v.bfloat16(), g, beta, **call)
    assert stores[3:] == [True, True]
    with pytest.raises(ValueError, match="qk_copies=False needs fp16 inputs without use_qk_l2norm"):
        triton_forward(q, k, v, g, beta, use_qk_l2norm=True, qk_copies=False, **call)


def test_tiny_scale_keeps_o():
    """scale 1e-6 (P = scale q k^T D would sit in fp16's subnormals on the fp16 walk: o 2.0e-1 off,
    NOTES.md v66): the default takes the bf16-parts walk there, o within bf16's rounding."""
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = random_inputs(1, 100, 1, 2, 32, 32, dtype=torch.bfloat16, initial_state=True, seed=3,
                                         device=DEVICE)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, scale=1e-6, initial_state=S0, use_qk_l2norm=True)
    o, S = triton_forward(q, k, v, g, beta, scale=1e-6, initial_state=S0, output_final_state=True,
                          use_qk_l2norm=True, chunk_size=32)
    assert_close(o, o_ref, rtol=1e-2, name="o")
    assert_close(S, S_ref, rtol=1.5e-3, name="S")

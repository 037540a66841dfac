"""What a call of the Triton forward runs (gdn.ops.triton.plan.plan_forward): decisions only, on meta
tensors, with the device probes standing in for an H200 (132 SMs, sm_90, TMA-aligned tensors) where
a test says so. No kernel runs."""
import pytest
import torch

pytest.importorskip("triton")

import gdn.ops.triton.plan as planning  # noqa: E402
from gdn.ops.triton.plan import plan_forward  # noqa: E402
from gdn.ops.triton.schedule import MAPS_SPLIT_CHUNKS  # noqa: E402


def tensors(B, T, H=16, HV=32, K=128, V=128, dtype=torch.bfloat16):
    """q [B, T, H, K] and v [B, T, HV, V] on the meta device."""
    return (torch.empty(B, T, H, K, dtype=dtype, device="meta"),
            torch.empty(B, T, HV, V, dtype=dtype, device="meta"))


@pytest.fixture
def h200(monkeypatch):
    """The probes of an H200 outside the interpreter: 132 SMs, tensors as torch allocates them there."""
    monkeypatch.setattr(planning, "triton_interpreting", lambda: False)
    monkeypatch.setattr(planning, "_tma_ready", lambda *tensors: True)
    monkeypatch.setattr(planning, "num_sms", lambda device: 132)


def test_the_bench_shapes_take_the_measured_defaults(h200):
    """B8 x T4k fills the GPU: the transposed Gluon walk after the WY pass, no flags; B1 x T32k does
    not: the Gluon walk beside the WY pass, waiting on its counts, with the automatic split. Both on
    fp16 operands, two value heads a WY program, the fp16 inverse on the transposes with its fallback
    after the heads; one head a program (HV = H) keeps the untransposed inverse."""
    q, v = tensors(8, 4096)
    wide = plan_forward(q, v, None, scale=128 ** -0.5, use_qk_l2norm=True)
    assert (wide.walk, wide.flags, wide.pieces, wide.BV, wide.NT) == ("gluon_t", False, 1, 64, 64)
    q, v = tensors(1, 32768)
    one = plan_forward(q, v, None, scale=128 ** -0.5, use_qk_l2norm=True)
    assert (one.walk, one.flags, one.auto_split, one.BV, one.NT) == ("gluon", True, True, 32, 512)
    assert not one.graph_safe and not wide.graph_safe
    assert one.pieces > 1 and one.wy_maxnreg is None            # beside the walk: no register cap
    for p in (wide, one):
        assert (p.f16, p.t_in, p.attn_in, p.wy_heads, p.inverse, p.wy_fallback) == \
            (True, True, True, 2, "f16_subst_t", "after")
    q, v = tensors(8, 4096, HV=16)
    assert plan_forward(q, v, None, scale=128 ** -0.5, use_qk_l2norm=True).inverse == "f16_subst"


def test_few_value_heads_walk_one_segment_or_the_maps(h200):
    """B = 1 with few value heads leaves the walk a fraction of the GPU's SMs: the defaults cut each
    sequence into segments joined by maps on fp16 operands below 16 sequences x value heads on
    sequences the automatic split does not cut, and from its chunk count while heads^2 x chunks stays
    within schedule.MAPS_BUDGET (v57); one segment (the fp16 walk, the automatic split) elsewhere. The
    rule counts from schedule.MAPS_SPLIT_CHUNKS (512), not from the split's 256 of v62: 12 value heads
    at 384 chunks keep the maps. The maps on bf16 parts where asked for; fp32 inputs (no fp16 walk)
    take segments on theirs, fp16 inputs one segment."""
    one_chunk_short = (MAPS_SPLIT_CHUNKS - 1) * 64
    for B, H, HV, T, walks_one in ((1, 8, 16, 32768, True), (1, 8, 16, 8192, True), (1, 4, 8, 65536, True),
                                   (1, 2, 4, 262144, True), (1, 4, 8, 32768, False), (1, 4, 8, 8192, False),
                                   (1, 2, 4, 32768, False), (2, 1, 2, 32768, False), (1, 2, 4, one_chunk_short, False),
                                   (1, 1, 2, 32768, False), (1, 1, 2, 131072, False), (3, 1, 1, 8192, False),
                                   (1, 6, 12, 384 * 64, False)):
        q, v = tensors(B, T, H=H, HV=HV)
        plan = plan_forward(q, v, None, scale=128 ** -0.5, use_qk_l2norm=True)
        if walks_one:
            assert (plan.P, plan.f16, plan.auto_split) == (1, True, True), (B, H, HV, T)
        else:
            assert plan.P > 1 and plan.f16 and plan.t_in, (B, H, HV, T)
        maps = plan_forward(q, v, None, scale=128 ** -0.5, use_qk_l2norm=True, num_segments=4)
        assert (maps.P, maps.f16) == (4, True)
        parts = plan_forward(q, v, None, scale=128 ** -0.5, use_qk_l2norm=True, num_segments=4, maps="bf16_parts")
        assert (parts.P, parts.f16) == (4, False)
    q, v = tensors(1, 32768, H=4, HV=8, dtype=torch.float32)
    p = plan_forward(q, v, None, scale=128 ** -0.5, use_qk_l2norm=True)
    assert p.P > 1 and not p.f16
    q, v = tensors(1, 32768, H=1, HV=2, K=256, V=256)               # K x K maps past an SM: one segment
    assert plan_forward(q, v, None, scale=256 ** -0.5, use_qk_l2norm=True).P == 1
    with pytest.raises(ValueError, match="needs K <= 128"):
        plan_forward(q, v, None, scale=256 ** -0.5, use_qk_l2norm=True, num_segments=2)
    q, v = tensors(1, 8192, H=1, HV=2, dtype=torch.float16)        # fp16 inputs: the fp16 walk only
    assert plan_forward(q, v, None, scale=128 ** -0.5, use_qk_l2norm=True).P == 1


def test_segment_maps_on_fp16_operands_where_asked_for(h200):
    """maps="f16": the segments' maps and walk on the fp16 walk's operands (the WY pass stores T
    diag(beta), its fp16 copies of q and k, P and G; the Triton walk, no flags beside it); maps=
    "bf16_parts" the maps from w and u. Refused where the fp16 walk cannot run (fp32 inputs, bf16
    parts asked for), and maps_stages without those maps."""
    q, v = tensors(1, 32768, H=1, HV=2)
    f16 = plan_forward(q, v, None, scale=128 ** -0.5, use_qk_l2norm=True, num_segments=16, maps="f16")
    assert (f16.P, f16.f16, f16.t_in, f16.walk, f16.flags, f16.pieces, f16.maps_stages) == \
        (16, True, True, "triton", False, 1, f16.walk_stages)
    parts = plan_forward(q, v, None, scale=128 ** -0.5, use_qk_l2norm=True, num_segments=16, maps="bf16_parts")
    assert (parts.P, parts.f16, parts.t_in) == (16, False, False)
    staged = plan_forward(q, v, None, scale=128 ** -0.5, use_qk_l2norm=True, num_segments=16, maps="f16", maps_stages=1)
    assert staged.maps_stages == 1 and staged.walk_stages == f16.walk_stages
    one = plan_forward(q, v, None, scale=128 ** -0.5, use_qk_l2norm=True, num_segments=1, maps="f16")
    assert (one.P, one.f16) == (1, True)              # one segment: nothing to map
    for kw, match in ((dict(operands="bf16_parts"), "maps='f16' needs"), (dict(maps="fp8"), "maps must be"),
                      (dict(maps="bf16_parts", maps_stages=1), "maps_stages needs"),
                      (dict(maps="f16", maps_stages=0), "maps_stages needs")):
        with pytest.raises(ValueError, match=match):
            plan_forward(q, v, None, scale=128 ** -0.5, use_qk_l2norm=True, num_segments=4, **{"maps": "f16", **kw})
    q, v = tensors(1, 32768, H=1, HV=2, dtype=torch.float32)
    with pytest.raises(ValueError, match="maps='f16' needs bf16 inputs"):
        plan_forward(q, v, None, scale=128 ** -0.5, use_qk_l2norm=True, num_segments=4, maps="f16")


def test_graph_capture_takes_no_flags(h200, monkeypatch):
    """While a CUDA graph is being captured: no flags (a graph may start the waiting walk first). At
    B1 x T32k the Gluon walk after the WY pass in one piece (graph_safe: forward runs the automatic
    split's two walks there); at B1 x T8k, where the defaults keep the Triton walk, its pieces. A
    graph never reuses an eager call's plan: the key holds whether one is being captured."""
    monkeypatch.setattr(planning, "stream_capturing", lambda q: True)
    q, v = tensors(1, 32768)
    one = plan_forward(q, v, None, scale=128 ** -0.5, use_qk_l2norm=True)
    assert (one.walk, one.flags, one.graph_safe, one.pieces, one.auto_split, one.BV) == ("gluon", False, True, 1, True, 32)
    q, v = tensors(1, 8192)
    short = plan_forward(q, v, None, scale=128 ** -0.5, use_qk_l2norm=True)
    assert (short.walk, short.flags, short.graph_safe) == ("triton", False, False) and short.pieces > 1
    q, v = tensors(8, 4096)             # (no flags eagerly either)
    assert not plan_forward(q, v, None, scale=128 ** -0.5, use_qk_l2norm=True).graph_safe
    key = planning.plan_key(q, v, None, 0.125, True, 64, {})
    monkeypatch.setattr(planning, "stream_capturing", lambda q: False)
    assert planning.plan_key(q, v, None, 0.125, True, 64, {}) != key


def test_fp32_inputs_take_tf32x3_without_splits():
    """fp32 inputs: no bf16 parts, no fp16 walk, the inverse by substitution at tf32x3 ("subst": the
    product form lost T where keys are near parallel and beta exceeds 1), tf32x3 products."""
    q, v = tensors(2, 300, H=2, HV=2, K=64, V=64, dtype=torch.float32)
    p = plan_forward(q, v, None, scale=0.125, use_qk_l2norm=True)
    assert (p.wy_split, p.state_split, p.f16, p.inverse, p.precision) == (0, 0, False, "subst", "tf32x3")
    assert (p.BT, p.BK, p.NT) == (64, 64, 5)


def test_an_empty_sequence_has_no_plan_but_its_knobs_are_checked():
    """T = 0: nothing to launch (None), yet a knob that no call takes is still refused, by name."""
    q, v = tensors(1, 0, H=1, HV=2, K=64, V=64)
    assert plan_forward(q, v, None, scale=0.125, use_qk_l2norm=False) is None
    with pytest.raises(ValueError, match="chunk_size 16, 32 or 64, got 128"):
        plan_forward(q, v, None, scale=0.125, use_qk_l2norm=False, chunk_size=128)


@pytest.mark.parametrize("knobs, message", [
    (dict(walk_loads="some"), "walk_loads must be 'dots' or 'all'"),
    (dict(state_split=3), "state_split must be 0 or 2"),
    (dict(wy_heads=3), "wy_heads must be a power of two dividing HV // H = 2"),
    (dict(inverse="lu"), "inverse must be one of"),
    (dict(operands="fp8"), "operands must be 'bf16_parts' or 'fp16'"),
    (dict(flag_group=0), "flag_group must be a positive int"),
    (dict(split_warmup=0), "split_warmup must be an int of at least 1"),
    (dict(bounds_priority=True), "bounds_priority must be an int"),
    (dict(walk_priority=0.5), "walk_priority must be an int"),
    (dict(split_launches=3), "split_launches must be None, 1 or 2"),
    (dict(split_heads_in="walk"), "split_heads_in must be 'kernel' or 'wy'"),
    (dict(walk_descriptors="device"), "walk_descriptors must be 'host' or 'kernel'"),
    (dict(split_heads_in="wy", split_check="bounds"), "split_heads_in='wy' takes split_check='posterior'"),
    (dict(wy_fallback="after", inverse="blocks_parts"), "wy_fallback='after' needs"),
    (dict(decays_layout="rows"), "decays_layout must be None, 'tokens' or 'heads'"),
    (dict(decays_layout="heads", walk="triton"), "decays_layout='heads' takes the Gluon walks"),
    (dict(qk_copies="yes"), "qk_copies must be None, True or False"),
    (dict(qk_copies=False), "qk_copies=False needs fp16 inputs without use_qk_l2norm"),
    (dict(qk_copies=True, operands="bf16_parts"), "qk_copies applies to the fp16 walk"),
])
def test_knobs_that_do_not_apply_are_refused_by_name(knobs, message):
    q, v = tensors(1, 300, H=1, HV=2, K=64, V=64)
    with pytest.raises(ValueError, match=message):
        plan_forward(q, v, None, scale=0.125, use_qk_l2norm=True, **knobs)


@pytest.mark.parametrize("dtype, l2norm, operands, walk", [(torch.float32, True, None, "walk on fp32 tiles"),
                                                         (torch.float16, False, None, "fp16 walk"),
                                                         (torch.bfloat16, True, None, "fp16 walk")])
def test_q_late_is_refused_where_the_walk_does_not_have_it(dtype, l2norm, operands, walk):
    """q_late is the bf16-parts walk's: on the fp32-tile walk it left q unread (o all wrong, S right),
    on the fp16 walk it did nothing; both are refused by name. The bf16-parts walk takes it."""
    q, v = tensors(1, 300, H=1, HV=2, K=64, V=64, dtype=dtype)
    with pytest.raises(ValueError, match=f"q_late applies to the state walk on bf16 parts.*takes the {walk}"):
        plan_forward(q, v, None, scale=0.125, use_qk_l2norm=l2norm, q_late=True, operands=operands)
    q, v = tensors(1, 300, H=1, HV=2, K=64, V=64)
    assert plan_forward(q, v, None, scale=0.125, use_qk_l2norm=True, q_late=True, operands="bf16_parts").q_late


def test_an_unknown_knob_is_a_type_error():
    q, v = tensors(1, 300, H=1, HV=2, K=64, V=64)
    with pytest.raises(TypeError, match="walk_stage"):
        plan_forward(q, v, None, scale=0.125, use_qk_l2norm=True, walk_stage=2)


def test_plan_key_holds_what_the_plan_reads(monkeypatch):
    """planned() keeps one Plan per plan_key on a GPU: the key tells apart every input plan_forward
    reads (shapes, dtypes, v's alignment, packed sequences, scale, l2norm, chunk size, knobs, a
    replaced device probe), and is the same for fresh tensors of one call."""
    def key(q, v, cu=None, scale=0.125, l2=True, chunk=64, **knobs):
        return planning.plan_key(q, v, cu, scale, l2, chunk, knobs)
    q, v = (torch.empty(1, 64, 2, 64, dtype=torch.bfloat16) for _ in range(2))
    flat = torch.empty(v.numel() + 1, dtype=v.dtype)
    same = key(torch.empty_like(q), torch.empty_like(v))
    assert key(q, v) == same
    keys = [same, key(q[:, :32], v[:, :32]), key(q.float(), v.float()), key(q, flat[1:].view(v.shape)),
            key(q, v, cu=torch.zeros(3, dtype=torch.int32)), key(q, v, cu=torch.zeros(4, dtype=torch.int32)),
            key(q, v, scale=0.25), key(q, v, l2=False), key(q, v, chunk=32), key(q, v, split_walk=True),
            key(q, v, split_walk=1)]                  # True: the SM count's segments; 1: one segment
    monkeypatch.setattr(planning, "num_sms", lambda device: 132)
    keys.append(key(q, v))
    assert len(set(keys)) == len(keys)
    with pytest.raises(TypeError):
        key(q, v, num_segments=[2])


def test_planned_plans_every_call_off_a_gpu():
    """Off CUDA (meta tensors here, the interpreter in the suite) nothing is kept: each call plans
    anew, so tests that replace the device probes see their effect."""
    q, v = tensors(1, 300, H=1, HV=2, K=64, V=64)
    one = planning.planned(q, v, None, scale=0.125, use_qk_l2norm=True)
    assert one == planning.planned(q, v, None, scale=0.125, use_qk_l2norm=True)
    assert one is not planning.planned(q, v, None, scale=0.125, use_qk_l2norm=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="plans are kept on CUDA devices only")
def test_planned_keeps_one_plan_a_key_on_a_gpu():
    q = torch.empty(1, 300, 1, 64, dtype=torch.bfloat16, device="cuda")
    v = torch.empty(1, 300, 2, 64, dtype=torch.bfloat16, device="cuda")
    one = planning.planned(q, v, None, scale=0.125, use_qk_l2norm=True)
    assert planning.planned(torch.empty_like(q), torch.empty_like(v), None, scale=0.125, use_qk_l2norm=True) is one
    assert planning.planned(q, v, None, scale=0.125, use_qk_l2norm=True, walk="triton") is not one

"""The Triton forward (gdn.ops.triton.forward and its kernels) against the float64 reference.

On a CPU machine this runs the real kernels in Triton's interpreter (tests/conftest.py sets
TRITON_INTERPRET=1), so shapes stay small; on a GPU machine the same tests run compiled kernels.
"""
import pytest
import torch

import gdn
from tests.reference import parallel_key_inputs, random_inputs, reference_gdn, repeated_key_inputs, with_row_norms
from tests.ops.triton.launches import launch_flags, spy_launches
from tests.tolerances import assert_close

triton = pytest.importorskip("triton")
from gdn.ops.triton.configs import OLD, SPLIT, V3  # noqa: E402  (needs triton)
from gdn.ops.triton.plan import plan_forward  # noqa: E402
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

# (T, H, HV, K, V, chunk, segments, l2norm): odd lengths, grouped heads, K != V, non-power-of-two dims,
# forced sequence splits (segments > 1 joins the pieces with the affine-map scan).
CASES = [
    (1, 1, 1, 16, 16, 16, None, False),
    (63, 2, 4, 32, 48, 32, None, True),
    (65, 1, 2, 32, 32, 64, None, False),
    (200, 1, 2, 40, 24, 32, 3, True),
    (257, 2, 2, 32, 32, 16, 5, False),
    (130, 1, 1, 64, 64, 64, 2, True),
]


@pytest.mark.parametrize("T, H, HV, K, V, C, segments, l2norm", CASES)
def test_triton_matches_reference_fp32(T, H, HV, K, V, C, segments, l2norm):
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = random_inputs(2, T, H, HV, K, V, dtype=torch.float32, initial_state=True,
                                         seed=T, device=DEVICE)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=l2norm)
    o = torch.full_like(v, float("nan"))
    o, S = triton_forward(q, k, v, g, beta, scale=K ** -0.5, initial_state=S0, output_final_state=True,
                          use_qk_l2norm=l2norm, chunk_size=C, num_segments=segments, precision="ieee")
    assert_close(o, o_ref, rtol=1e-5, name="o")
    assert_close(S, S_ref, rtol=1e-5, name="S")


@pytest.mark.parametrize("dtype, o_rtol, s_rtol", [(torch.float32, 1e-3, 1e-3), (torch.bfloat16, 1e-2, 1.5e-3),
                                                   (torch.float16, 2e-3, 1.5e-3)])
def test_triton_varlen_with_empty_sequences(dtype, o_rtol, s_rtol):
    """fp32: tf32 products on a GPU by default; bf16 and fp16: the walk on fp16 operands (walk_f16)."""
    cu = torch.tensor([0, 0, 17, 64, 64, 150], dtype=torch.int32, device=DEVICE)
    q, k, v, g, beta, S0 = random_inputs(1, 150, 2, 4, 32, 32, dtype=dtype, initial_state=True,
                                         N=5, seed=4, device=DEVICE)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, cu_seqlens=cu.cpu(), use_qk_l2norm=True)
    o, S = gdn.gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True, cu_seqlens=cu,
                                use_qk_l2norm=True, backend="triton", chunk_size=32)
    assert_close(o, o_ref, rtol=o_rtol, name="o")
    assert_close(S, S_ref, rtol=s_rtol, name="S")
    assert torch.equal(S[0], S0[0]) and torch.equal(S[3], S0[3])


@pytest.mark.parametrize("inverse", ["substitution", "product", "blocks", "blocks_parts", "blocks_f16"])
def test_triton_inverse_variants(inverse):
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = random_inputs(1, 100, 1, 2, 32, 32, dtype=torch.float32, initial_state=True,
                                         seed=12, device=DEVICE)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    o, S = triton_forward(q, k, v, g, beta, scale=32 ** -0.5, initial_state=S0, output_final_state=True,
                          use_qk_l2norm=True, chunk_size=64, inverse=inverse, precision="ieee")
    assert_close(o, o_ref, rtol=1e-5, name="o")
    assert_close(S, S_ref, rtol=1e-5, name="S")


@pytest.mark.parametrize("segments, walk_tma, q_late", [(1, None, False), (3, None, False), (1, False, False),
                                                       (1, None, True)])
def test_triton_bf16(segments, walk_tma, q_late):
    """The defaults in one segment (the fused walk's tiles by TMA: a last chunk that runs past the end
    reads zeros; the varlen test has stores next to another sequence) and in three; walk_tma=False:
    the fused walk through block pointers (v9); q_late: q loaded right before its product, on the
    walk on bf16 parts (the one that has it)."""
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = random_inputs(1, 150, 2, 4, 32, 32, dtype=torch.bfloat16, initial_state=True,
                                         seed=9, device=DEVICE)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    knobs = dict(q_late=True, operands="bf16_parts") if q_late else {}
    o, S = triton_forward(q, k, v, g, beta, scale=32 ** -0.5, initial_state=S0, output_final_state=True,
                          use_qk_l2norm=True, chunk_size=32, num_segments=segments, walk_tma=walk_tma, **knobs)
    assert o.dtype == torch.bfloat16 and S.dtype == torch.float32
    assert_close(o, o_ref, rtol=1e-2, name="o")
    assert_close(S, S_ref, rtol=1e-2, name="S")


@pytest.mark.parametrize("dtype, o_rtol, s_rtol", [(torch.float32, 1e-5, 1e-5), (torch.bfloat16, 1e-2, 1.5e-3)])
def test_triton_l2norm_of_small_queries_and_keys(dtype, o_rtol, s_rtol):
    """l2norm is x / sqrt(|x|^2 + 1e-6), as the torch algorithms and transformers have it: q and k of
    norm 0.5e-3 to 1.5e-3 (|x|^2 near the eps) come out of norm ~0.4-0.8, which only that formula
    gives (x / max(|x|, 1e-3), say, gives 0.5-1). fp32 (the walk on fp32 tiles) and bf16 (the fp16
    walk, its WY pass's norms from k k^T's diagonal)."""
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = random_inputs(1, 70, 1, 2, 32, 32, initial_state=True, seed=8)
    q, k = with_row_norms(q, 0.5e-3, 1.5e-3, seed=1), with_row_norms(k, 0.5e-3, 1.5e-3, seed=2)
    q, k, v = (x.to(DEVICE, dtype) for x in (q, k, v))
    g, beta, S0 = (x.float().to(DEVICE) for x in (g, beta, S0))
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    o, S = triton_forward(q, k, v, g, beta, scale=32 ** -0.5, initial_state=S0, output_final_state=True,
                          use_qk_l2norm=True, chunk_size=32, **(dict(precision="ieee") if dtype == torch.float32 else {}))
    assert_close(o, o_ref, rtol=o_rtol, name="o")
    assert_close(S, S_ref, rtol=s_rtol, name="S")


def test_triton_bf16_three_part_wy_at_chunk_64():
    """wy_split=3 (T and its products in three bf16 parts, fp32-exact) at chunk size 64 with K = 32:
    the WY pass's u and w then go through the transposed product (wy._t_times_columns: the split
    operand on the right, split_dot's NA = 1, NB = 3 case), which BF16_VARIANTS (chunk size 32)
    never reaches. An fp32 walk: S as exact as fp32 (~2e-7), as test_triton_bf16_variants's
    fp32-exact paths. (Mutant: dot_parts' a_1 b_3 product dropped: S off by ~1e-5.)"""
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = random_inputs(1, 150, 1, 2, 32, 48, dtype=torch.bfloat16, initial_state=True,
                                         seed=31, device=DEVICE)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    o, S = triton_forward(q, k, v, g, beta, scale=32 ** -0.5, initial_state=S0, output_final_state=True,
                          use_qk_l2norm=True, chunk_size=64, wy_split=3, state_split=0)
    assert_close(o, o_ref, rtol=1e-2, name="o")
    if DEVICE == "cpu":                 # the interpreter multiplies in fp32 (a GPU's unsplit walk: tf32)
        assert_close(S, S_ref, rtol=1e-6, name="S")


# Knobs of the bf16 paths (gdn.ops.triton.plan.plan_forward's docstring, gdn.ops.triton.configs): the
# defaults (the split paths), v2's substitution inverse without splits, the split WY pass and state walk
# apart, other part counts, block widths and pipelining.
BF16_VARIANTS = [
    {},
    OLD,
    SPLIT,
    V3,                                               # the previous default: WY exact, attention in the walk
    dict(wy_split=3, state_split=0),                  # split WY pass, unsplit walk
    dict(wy_split=0, state_split=2),                  # unsplit WY pass writing w parts and norm factors
    dict(SPLIT, wy_split=3),
    dict(SPLIT, block_v=16, walk_stages=1),
    dict(block_v=64, walk_stages=1),                  # the default's two walk shapes, forced
    dict(block_v=32, walk_stages=2),
    dict(attention="walk"),                           # the walk forms the output attention
    dict(attention="walk", block_v=64, walk_stages=1),
    dict(fast_dots=True),
    dict(state_split=0),                              # an fp32 walk: w and u then default to fp32-exact
    dict(fused=False),                                # each product of parts on its own (v6's walk)
    dict(walk_loads="all"),                           # every load of the walk's loop pipelined
]


@pytest.mark.parametrize("variant", range(len(BF16_VARIANTS)))
def test_triton_bf16_variants(variant):
    """The fp32 final state pins the products: Triton's interpreter multiplies in fp32 (no tf32), so
    what remains is each path's own rounding: 16 bits of the state in 2 bf16 parts (state_split=2 and
    w and u with wy_split=2, the bf16-parts path's defaults), 11 where the maps and walk take fp16
    operands (maps="f16", the default where they apply), fp32 otherwise. o is rounded to bf16. Three
    segments: the maps and their fold run on the same path."""
    from gdn.ops.triton import triton_forward
    kw = BF16_VARIANTS[variant]
    q, k, v, g, beta, S0 = random_inputs(1, 150, 1, 2, 32, 48, dtype=torch.bfloat16, initial_state=True,
                                         seed=20 + variant, device=DEVICE)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    o = torch.full_like(v, float("nan"))
    args = dict(scale=32 ** -0.5, initial_state=S0, output_final_state=True, use_qk_l2norm=True, chunk_size=32,
                num_segments=3, out=o, **kw)
    if DEVICE == "cuda" and kw.get("block_v") == 16 and kw.get("walk_stages") == 1:
        with pytest.raises(ValueError, match="crashes on sm_90"):     # Triton 3.6's sm_90 code for it
            triton_forward(q, k, v, g, beta, **args)
        return
    o, S = triton_forward(q, k, v, g, beta, **args)
    split_walk = kw.get("state_split", 2) == 2 and not kw.get("fast_dots")
    sixteen_bits = split_walk or kw.get("wy_split", 2 if split_walk else 3) == 2
    assert_close(o, o_ref, rtol=1e-2, name="o")
    if plan_forward(q, v, None, scale=32 ** -0.5, use_qk_l2norm=True, chunk_size=32, num_segments=3, **kw).f16:
        assert_close(S, S_ref, rtol=1.5e-3, name="S")        # fp16's 11 bits: ~4e-4
    elif not split_walk and not kw.get("fast_dots") and DEVICE == "cuda":
        # the unsplit walk's products at tf32 (11 bits) on a GPU: ~8e-4 on an H200
        assert_close(S, S_ref, rtol=2e-3, name="S")
    elif not kw.get("fast_dots"):        # fp32-exact paths: ~2e-7 here; 16 bits anywhere: ~1e-5
        assert_close(S, S_ref, rtol=1e-4 if sixteen_bits else 1e-6, name="S")


@pytest.mark.parametrize("T, H, HV, K, V, C, segments, l2norm, h0", [
    (150, 1, 2, 32, 32, 32, 3, True, True),
    (150, 2, 2, 64, 32, 32, 3, True, False),       # K > V: A's column blocks past V's
    (97, 1, 1, 32, 48, 16, 5, False, True),        # a partial last chunk, V not a power of two, no l2norm
    (130, 2, 4, 32, 64, 64, 2, True, True),        # grouped value heads, two a WY program
])
def test_segment_maps_on_fp16_operands(T, H, HV, K, V, C, segments, l2norm, h0, monkeypatch):
    """maps="f16": each segment's map [A | B] by the fp16 walk's step (chunk_fwd._segment_maps_f16_kernel,
    walk_f16.walk_chunk_f16 with MAP), folded by the fp16 walk: as exact as that walk in one segment
    (S ~4e-4 against float64, fp16's 11 bits; the maps on bf16 parts keep 16, ~2e-5), o within bf16's
    rounding, and within 5e-4 of one segment's o (a few bf16 roundings apart)."""
    from gdn.ops.triton import triton_forward
    maps_grids, walk_f16 = [], launch_flags(monkeypatch)
    spy_launches(monkeypatch, "_segment_maps_f16_kernel", lambda grid, args, kw: maps_grids.append((grid, kw["BM"])))
    q, k, v, g, beta, S0 = random_inputs(2, T, H, HV, K, V, dtype=torch.bfloat16, initial_state=True, seed=T + K,
                                         device=DEVICE)
    S0 = S0 if h0 else None
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=l2norm)
    call = dict(scale=K ** -0.5, initial_state=S0, output_final_state=True, use_qk_l2norm=l2norm, chunk_size=C)
    o = torch.full_like(v, float("nan"))
    o, S = triton_forward(q, k, v, g, beta, num_segments=segments, maps="f16", out=o, **call)
    assert_close(o, o_ref, rtol=1e-2, name="o")
    assert_close(S, S_ref, rtol=1.5e-3, name="S")
    (grid, BM), = maps_grids               # column blocks of A and B x sequences x heads, the maps
    NT = triton.cdiv(T, C)
    assert grid == ((triton.cdiv(K, BM) + triton.cdiv(V, BM)) * 2 * HV, triton.cdiv(NT, triton.cdiv(NT, segments)) - 1)
    o_one, S_one = triton_forward(q, k, v, g, beta, num_segments=1, **call)
    assert walk_f16 == [True, True]
    assert_close(o, o_one, rtol=5e-4, name="o against one segment")


@pytest.mark.parametrize("attention, factors", [("walk", "wu"), ("stored", "wu"), ("stored", "t")])
def test_triton_bf16_pieces(attention, factors):
    """The WY pass and the walk cut into pieces of chunks (on a GPU the WY pass of one piece runs
    beside the walk of the previous one): the state carried across pieces, from an initial state
    and without one, uneven pieces (7 chunks in 3 pieces)."""
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = random_inputs(2, 200, 1, 2, 32, 32, dtype=torch.bfloat16, initial_state=True,
                                         seed=11, device=DEVICE)
    for h0 in (S0, None):
        o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=h0, use_qk_l2norm=True)
        o = torch.full_like(v, float("nan"))
        o, S = triton_forward(q, k, v, g, beta, scale=32 ** -0.5, initial_state=h0, output_final_state=True,
                              use_qk_l2norm=True, chunk_size=32, pieces=3, out=o,
                              **dict(SPLIT, attention=attention, factors=factors))
        assert_close(o, o_ref, rtol=1e-2, name="o")
        assert_close(S, S_ref, rtol=1e-4, name="S")
    o2, none = triton_forward(q, k, v, g, beta, scale=32 ** -0.5, use_qk_l2norm=True, chunk_size=32, pieces=3)
    assert none is None
    assert_close(o2, reference_gdn(q, k, v, g, beta, use_qk_l2norm=True)[0], rtol=1e-2, name="o")
    # One sequence: the launcher would cut it into segments (4 "SMs" in the interpreter); asking for
    # pieces walks it in one segment instead.
    o1, S1 = triton_forward(q[:1], k[:1], v[:1], g[:1], beta[:1], scale=32 ** -0.5, initial_state=S0[:1],
                            output_final_state=True, use_qk_l2norm=True, chunk_size=32, pieces=3,
                            operands="bf16_parts")
    o1_ref, S1_ref = reference_gdn(q[:1], k[:1], v[:1], g[:1], beta[:1], initial_state=S0[:1], use_qk_l2norm=True)
    assert_close(o1, o1_ref, rtol=1e-2, name="o")
    assert_close(S1, S1_ref, rtol=1e-4, name="S")
    with pytest.raises(ValueError, match="pieces > 1 needs a dense batch"):
        triton_forward(q[:1], k[:1], v[:1], g[:1], beta[:1], scale=0.25, pieces=2,
                       cu_seqlens=torch.tensor([0, 100, 200], device=DEVICE))
    with pytest.raises(ValueError, match="one segment"):
        triton_forward(q, k, v, g, beta, scale=0.25, pieces=2, num_segments=2)


def _assert_same_and_close(got, same_as, inputs, h0, l2norm, s_rtol=1e-4):
    """o and S bit for bit as another launch of the same products, and within the bf16 tolerances of
    the float64 reference (S: s_rtol, 1e-4 for bf16 parts, 1e-3 for fp16 operands)."""
    (o, S), (o_same, S_same) = got, same_as
    assert torch.equal(o, o_same) and torch.equal(S, S_same)
    o_ref, S_ref = reference_gdn(*inputs, initial_state=h0, use_qk_l2norm=l2norm)
    assert_close(o, o_ref, rtol=1e-2, name="o")
    assert_close(S, S_ref, rtol=s_rtol, name="S")


# Each group size, both stage counts, both operands and both WY heads a program once (the suite's
# time: each case runs the interpreter three times).
@pytest.mark.parametrize("group, stages, operands, heads, hv", [(1, 2, "bf16_parts", 1, 2), (16, 2, "bf16_parts", 1, 2),
                                                                (1, 3, "bf16_parts", 1, 2), (4, 2, "fp16", 1, 2),
                                                                (4, 2, "bf16_parts", 2, 2), (4, 2, "fp16", 2, 4)])
def test_triton_bf16_overlap_flags(group, stages, operands, heads, hv, monkeypatch):
    """overlap="flags" (the default where pieces would run): one WY launch over all chunks, in
    order, counting each group of ``group`` chunks done, and the walk beside it waiting for each
    group's count. The interpreter runs the WY pass to its end before the walk, so here the counts
    and group bounds are what is checked (9 chunks: groups of 1, of 4, 4 and 1, or one of 9); the
    values equal those of the pieces, bit for bit, from an initial state and without one. The walk
    waits for the group of the chunk ``stages`` ahead (its pipeline's stages; 3 also takes q through
    registers): every wait, the ones before its loop included, must find its group's full count, or
    it spins forever. With fp16 operands the first value head of a group stores the group's q and k,
    so it counts for the group (two heads here) and the walk of either head waits for twice the count.
    heads: value heads a WY program (wy_heads), each counted as before; hv value heads (4: two fp16
    WY programs of two heads each add to one group's count)."""
    import faulthandler
    import inspect
    import gdn.ops.triton.forward as forward
    import gdn.ops.triton.plan as planning
    from gdn.ops.triton.schedule import choose_flag_group
    q, k, v, g, beta, S0 = random_inputs(1, 280, 1, hv, 32, 32, dtype=torch.bfloat16, initial_state=True,
                                         seed=51 + group, device=DEVICE)
    counts = []                     # the done counts each flags call leaves: every chunk counted once
    groups = []                     # the group size each flags launch took
    i_done = list(inspect.signature(forward.wy_kernel.fn).parameters).index("done")

    def record(grid, args, kw):
        if kw.get("SIGNAL"):
            counts.append(args[i_done].flatten().tolist())          # after the WY pass ran
            groups.append(kw["GROUP"])
    spy_launches(monkeypatch, "wy_kernel", record)
    # The flags need fewer walk programs than SMs (the interpreter's 4): room for four heads' walks.
    monkeypatch.setattr(planning, "num_sms", lambda device: 2 * hv)
    faulthandler.dump_traceback_later(300, exit=True)      # a count short of its group would spin forever
    try:
        for h0 in (S0, None):
            kw = dict(scale=32 ** -0.5, initial_state=h0, output_final_state=True, use_qk_l2norm=True,
                      chunk_size=32, pieces=3, walk_stages=stages, operands=operands, wy_heads=heads)
            o_pieces, S_pieces = forward.triton_forward(q, k, v, g, beta, overlap="pieces", **kw)
            o = torch.full_like(v, float("nan"))
            o, S = forward.triton_forward(q, k, v, g, beta, overlap="flags", flag_group=group, out=o, **kw)
            _assert_same_and_close((o, S), (o_pieces, S_pieces), (q, k, v, g, beta), h0, True,
                                   1e-3 if operands == "fp16" else 1e-4)
        o_default, _ = forward.triton_forward(q, k, v, g, beta, **kw)      # flag_group left to the schedule
        assert torch.equal(o_default, o_pieces)
    finally:
        faulthandler.cancel_dump_traceback_later()
    per_group = [min(group, 9 - c) for c in range(0, 9, group)]          # 9 chunks in groups
    heads = [(hv * n,) + (0,) * (hv - 1) if operands == "fp16" else (n,) * hv for n in per_group]
    assert counts[:2] == [[n for row in heads for n in row]] * 2     # [group, head]
    assert groups == [group, group, choose_flag_group(9)]
    with pytest.raises(ValueError, match="overlap must be"):
        forward.triton_forward(q, k, v, g, beta, scale=0.25, overlap="events")
    with pytest.raises(ValueError, match="flag_group must be"):
        forward.triton_forward(q, k, v, g, beta, scale=0.25, flag_group=0)


def test_triton_grids_stay_within_cuda_limits(monkeypatch):
    """CUDA caps a launch's second and third grid axes at 65535: 70000 packed sequences, and a
    sequence of 65537 chunks whose WY pass runs beside the walk (flags), stay on the first axis.
    The kernels are recorded, not run (meta tensors, no memory)."""
    import gdn.ops.triton.forward as forward
    grids = []
    for name in ("wy_kernel", "_chunk_fwd_kernel"):
        spy_launches(monkeypatch, name, lambda grid, args, kw: grids.append(grid), run=False)

    def record(N, T, **kw):
        q = torch.empty(1, T, 1, 16, dtype=torch.bfloat16, device="meta")
        g = torch.empty(1, T, 1, device="meta")
        forward.triton_forward(q, q, q, g, g, scale=0.25, chunk_size=16, **kw)
    record(70000, 70000, cu_seqlens=torch.arange(70001, dtype=torch.int32, device="meta"))
    record(1, 16 * 65537, pieces=16, window_tokens=None)          # (not the windows of 2^18 tokens)
    assert (70000, 1) in grids and (65537,) in grids          # the walk's and the flags WY's
    assert all(d <= 65535 for grid in grids for d in grid[1:])


@pytest.mark.parametrize("kw, s_rtol", [(dict(), 1e-3),                                 # fp16 walk
                                         (dict(operands="bf16_parts", pieces=3), 1e-4),  # in pieces
                                         (dict(SPLIT, num_segments=2), 1e-4),            # w and u
                                         (dict(SPLIT, factors="wu"), 1e-4)])
def test_triton_wy_heads_per_program(monkeypatch, kw, s_rtol):
    """wy_heads: the value heads that share a q/k head in one WY program give the same bits as one
    head a program (the same products in the same order), with HV / wy_heads programs a chunk; the
    stored cumulative gates bit for bit too, gates of -0.0 (logsigmoid of a large input) included.
    The default takes two heads a program on the fp16 walk and one elsewhere."""
    import inspect
    import gdn.ops.triton.forward as forward
    q, k, v, g, beta, S0 = random_inputs(2, 100, 1, 4, 32, 32, dtype=torch.bfloat16, initial_state=True,
                                         seed=51, device=DEVICE)
    g[:, :40:3] = -0.0
    # (The fp16 walk's inverse named: its default differs with one head a program and with two.)
    call = dict(scale=32 ** -0.5, initial_state=S0, output_final_state=True, use_qk_l2norm=True, chunk_size=32,
                **(kw or dict(inverse="f16_subst_t")))
    i_G = list(inspect.signature(forward.wy_kernel.fn).parameters).index("G_out")
    grids, gates = [], []

    def record(grid, args, kw):
        grids.append(grid[0])
        gates.append(args[i_G].clone().view(torch.int32))
    spy_launches(monkeypatch, "wy_kernel", record)
    one = forward.triton_forward(q, k, v, g, beta, wy_heads=1, **call)
    gates_one = gates.copy()
    assert sum(grids) == 2 * 4 * 4
    grids.clear()
    default = forward.triton_forward(q, k, v, g, beta, **call)
    _assert_same_and_close(default, one, (q, k, v, g, beta), S0, True, s_rtol)
    assert sum(grids) == 2 * 4 * 4 // (2 if not kw else 1)
    for heads in (2, 4) if not kw else (2,):         # 4: every head of a q/k head (the default's path only)
        grids.clear()
        gates.clear()
        both = forward.triton_forward(q, k, v, g, beta, wy_heads=heads, **call)
        _assert_same_and_close(both, one, (q, k, v, g, beta), S0, True, s_rtol)
        assert sum(grids) == 2 * 4 * 4 // heads         # 2 sequences x 4 chunks x 4 heads, over the pieces
        if "operands" not in kw:                        # one WY launch, which stores G (attention stored)
            assert len(gates) == 1 and torch.equal(gates[0], gates_one[0])
    for bad in (3, 8, 0):
        with pytest.raises(ValueError, match="wy_heads must be"):
            forward.triton_forward(q, k, v, g, beta, wy_heads=bad, **call)
        with pytest.raises(ValueError, match="wy_heads must be"):      # also where no kernel runs
            forward.triton_forward(q[:, :0], k[:, :0], v[:, :0], g[:, :0], beta[:, :0], wy_heads=bad, **call)
    with pytest.raises(ValueError, match="wy_heads > 1 needs the split WY pass"):
        forward.triton_forward(q, k, v, g, beta, wy_heads=2, **dict(call, wy_split=0))


def test_triton_wy_registers_capped_where_it_runs_alone(monkeypatch):
    """The fp16 walk's WY pass of one head a program takes 168 registers a thread (three programs an
    SM) where it runs alone before the walk (one piece, flags or not), and no cap beside the walk
    (pieces), with two heads a program (the default where HV / H is even) or with wy_maxnreg=0;
    the walk's cap only when asked for (walk_maxnreg).
    As compiled for a GPU (the interpreter takes no cap); recorded, not run (meta tensors)."""
    import gdn.ops.triton.forward as forward
    import gdn.ops.triton.plan as planning
    monkeypatch.setattr(planning, "triton_interpreting", lambda: False)
    caps = []
    spy_launches(monkeypatch, "wy_kernel", lambda grid, args, kw: caps.append(kw.get("maxnreg")), run=False)
    walk_caps = []
    spy_launches(monkeypatch, "_chunk_fwd_kernel", lambda grid, args, kw: walk_caps.append(kw.get("maxnreg")),
                 run=False)

    def record(B, **kw):
        q = torch.empty(B, 256, 1, 32, dtype=torch.bfloat16, device="meta")
        v = torch.empty(B, 256, 2, 32, dtype=torch.bfloat16, device="meta")
        g = torch.empty(B, 256, 2, device="meta")
        caps.clear()
        forward.triton_forward(q, q, v, g, g, scale=0.25, use_qk_l2norm=True, **kw)
        return set(caps)
    assert record(1, wy_heads=1) == {168}       # 2 walk programs on the interpreter's 4 "SMs": flags, one piece
    assert record(2, wy_heads=1) == {168}       # 4: no flags
    assert record(1, wy_heads=1, pieces=2) == {None}      # beside the walk: the flags' single WY launch
    assert record(2, wy_heads=1, pieces=2) == {None}      # beside the walk: a WY launch a piece
    assert record(2, wy_heads=1, wy_maxnreg=0) == {None}
    assert record(1) == record(2) == {None}     # two heads a program (HV / H = 2)
    assert record(2, wy_maxnreg=128) == {128}
    assert set(walk_caps) == {None}                  # the walk's own knob, off by default
    record(2, walk_maxnreg=168)
    assert walk_caps[-1] == 168
    for knob in ("wy_maxnreg", "walk_maxnreg"):
        with pytest.raises(ValueError, match=f"{knob} must be"):
            record(2, **{knob: -1})


@pytest.mark.parametrize("C, K", [(16, 32), (32, 32), (64, 16), (64, 32), (64, 48)])
@pytest.mark.parametrize("l2norm", [True, False])
def test_triton_bf16_split_chunk_sizes(C, K, l2norm):
    """The split path at every chunk size (1, 2 and 4 diagonal blocks in the inverse), its w as two
    bf16 parts (segments). At chunk size 64 with K < 64, Triton 3.6's ptxas once miscompiled the u
    and w products there (o 0.67 on an H200: NOTES.md v14); wy._t_times_columns avoids it."""
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = random_inputs(1, 140, 1, 2, K, 32, dtype=torch.bfloat16, initial_state=True,
                                         seed=C + K + l2norm, device=DEVICE)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=l2norm)
    o, S = triton_forward(q, k, v, g, beta, scale=K ** -0.5, initial_state=S0, output_final_state=True,
                          use_qk_l2norm=l2norm, chunk_size=C, num_segments=2, **SPLIT)
    assert_close(o, o_ref, rtol=1e-2, name="o")
    assert_close(S, S_ref, rtol=1e-4, name="S")


@pytest.mark.parametrize("factors", ["t", "wu"])
@pytest.mark.parametrize("C, l2norm", [(16, True), (32, False), (64, True)])
def test_triton_bf16_factors(factors, C, l2norm):
    """What the WY pass hands the walk, in one segment: T diag(beta), from which the walk forms the
    writes U = T diag(beta) (v - diag(r e^G) k S) (the default), or w and u (U = u - w S)."""
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = random_inputs(2, 150, 1, 2, 32, 48, dtype=torch.bfloat16, initial_state=True,
                                         seed=C + 3 * l2norm, device=DEVICE)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=l2norm)
    o = torch.full_like(v, float("nan"))
    o, S = triton_forward(q, k, v, g, beta, scale=32 ** -0.5, initial_state=S0, output_final_state=True,
                          use_qk_l2norm=l2norm, chunk_size=C, num_segments=1, out=o,
                          **dict(SPLIT, factors=factors, wy_split=None))   # default parts (GPU, C = 64: three)
    assert_close(o, o_ref, rtol=1e-2, name="o")
    assert_close(S, S_ref, rtol=1e-4, name="S")
    with pytest.raises(ValueError, match="factors must be"):
        triton_forward(q, k, v, g, beta, scale=0.25, factors="w")
    with pytest.raises(ValueError, match="inverse must be"):
        triton_forward(q, k, v, g, beta, scale=0.25, inverse="blocks_bf16")


@pytest.mark.parametrize("factors, inverse, beta_max", [("t", "blocks", 1.0), ("wu", "blocks", 1.0),
                                                      ("t", "blocks_parts", 1.0), ("t", "blocks_f16", 1.0),
                                                      ("t", "blocks_f16", 1.9)])
def test_triton_bf16_correlated_keys(factors, inverse, beta_max):
    """Nearly parallel keys, beta near 1 and slow decay: the in-chunk inverse's partial products
    (powers of the 16 x 16 blocks of A) grow to thousands while the inverse stays near 1. Products
    kept to 16 bits there gave S errors of 2e-2 to 6e-2 (a two-part bf16 inverse, measured and
    dropped: benchmarks/NOTES.md v5); the tf32x3 inverse keeps ~1e-4, pairs of fp16 parts ~2e-4.
    beta_max 1.9: |A_ij| > 1 in every chunk, where the fp16 pairs' range would overflow: those chunks
    take the tf32x3 substitution ("subst"), bit for bit, S ~1e-4 (the product form's fallback before
    it lost T to cancellation: S 6e-2, NOTES.md v66)."""
    from gdn.ops.triton import triton_forward
    K = 32
    q, k, v, g, beta, S0 = parallel_key_inputs(beta_max, device=DEVICE, K=K)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    o, S = triton_forward(q, k, v, g, beta, scale=K ** -0.5, initial_state=S0, output_final_state=True,
                          use_qk_l2norm=True, chunk_size=64, num_segments=1,
                          **dict(SPLIT, factors=factors, inverse=inverse, wy_split=None))
    if inverse == "blocks_f16":         # which inverse the chunks took: tf32x3's results, or others
        o_wide, S_wide = triton_forward(q, k, v, g, beta, scale=K ** -0.5, initial_state=S0, output_final_state=True,
                                        use_qk_l2norm=True, chunk_size=64, num_segments=1,
                                        **dict(SPLIT, factors=factors, inverse="subst", wy_split=None))
        assert torch.equal(S, S_wide) == (beta_max > 1)
    assert_close(o, o_ref, rtol=2e-2, name="o")
    assert_close(S, S_ref, rtol=1e-3, name="S")


@pytest.mark.parametrize("dtype, o_rtol, s_rtol", [(torch.float32, 1e-4, 1e-4), (torch.bfloat16, 1e-2, 1e-2)])
def test_triton_reflections_on_parallel_keys(dtype, o_rtol, s_rtol):
    """The defaults with beta near 2 on nearly parallel keys (reflections, within the documented
    beta |k|^2 <= 2): the problem is well conditioned (the chunk backend's fp32 S ~2e-5), and so must
    the Triton forward be. Every chunk has |A_ij| > 1: bf16's fp16 inverse falls back to tf32x3, fp32
    takes it; both were the product form, whose cancellation left o 5-26% off (NOTES.md v66). bf16:
    S within the fp16 walk's rounding, which these reflections carry along instead of erasing."""
    from gdn.ops.triton import triton_forward
    K = 32
    q, k, v, g, beta, S0 = parallel_key_inputs(2.0, device=DEVICE, K=K)
    q, k, v = (x.to(dtype) for x in (q, k, v))
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    o, S = triton_forward(q, k, v, g, beta, scale=K ** -0.5, initial_state=S0, output_final_state=True,
                          use_qk_l2norm=True, chunk_size=64)
    assert_close(o, o_ref, rtol=o_rtol, name="o")
    assert_close(S, S_ref, rtol=s_rtol, name="S")


@pytest.mark.parametrize("beta", [1.9, 1.99])
@pytest.mark.parametrize("heads, knobs", [((1, 2), {}), ((1, 1), {}), ((1, 2), dict(num_segments=2, maps="f16"))])
def test_triton_reflections_on_repeated_keys(beta, heads, knobs):
    """bf16's default (the fp16 walk) with beta near 2 on one repeated key and nothing forgetting:
    T diag(beta)'s fp16 rounding, the same in every chunk, grew into o 7e-2 and S 1.7e-1 off at beta
    1.9 (3.5e-2 / 6.6e-2 at 1.99). The WY pass now stores its low parts in the tile's free triangle
    where some |A_ij| > 1 and flags the chunk, and the walk adds them (walk_f16.low_part_fix): o and
    S within the bf16 output's rounding (the interpreter rounds to bf16 by truncation). Two value heads
    a WY program (the fallback after the heads), one (the inverse's own fallback inline), and the
    fp16 segment maps, which take the walk's step."""
    from gdn.ops.triton import triton_forward
    H, HV = heads
    q, k, v, g, b = repeated_key_inputs(beta, device=DEVICE, H=H, HV=HV)
    o_ref, S_ref = reference_gdn(q, k, v, g, b, use_qk_l2norm=True)
    o, S = triton_forward(q, k, v, g, b, scale=32 ** -0.5, output_final_state=True, use_qk_l2norm=True, **knobs)
    assert_close(o, o_ref, rtol=6e-3, name="o")
    assert_close(S, S_ref, rtol=6e-3, name="S")


@pytest.mark.parametrize("factors, longest_first, walk_tma",
                         [("t", False, False), ("wu", False, False), ("t", True, False), ("t", True, True)])
@pytest.mark.parametrize("attention", ["walk", "stored"])
def test_triton_bf16_varlen_with_empty_sequences(attention, factors, longest_first, walk_tma):
    """Packed sequences on the split path: a chunk that runs past its sequence reads zeros, not the
    next sequence (block pointers bounded by the sequence length). longest_first: the walk takes the
    sequences in another order (lengths 0, 17, 47, 0, 86, 0 -> 86, 47, 17, 0, 0, 0); each still gets its
    own state. The last sequence is empty too: the WY pass's slots past the last chunk must not land
    on it. walk_tma: the fused walk (32 columns) by TMA, whose descriptors are bounded by each
    sequence's length likewise."""
    cu = torch.tensor([0, 0, 17, 64, 64, 150, 150], dtype=torch.int32, device=DEVICE)
    q, k, v, g, beta, S0 = random_inputs(1, 150, 2, 4, 32, 32, dtype=torch.bfloat16, initial_state=True,
                                         N=6, seed=5, device=DEVICE)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, cu_seqlens=cu.cpu(), use_qk_l2norm=True)
    from gdn.ops.triton import triton_forward
    o, S = triton_forward(q, k, v, g, beta, scale=32 ** -0.5, initial_state=S0, output_final_state=True,
                          cu_seqlens=cu, use_qk_l2norm=True, chunk_size=32,
                          **dict(SPLIT, attention=attention, factors=factors, longest_first=longest_first,
                                 **(dict(walk_tma=True, block_v=32) if walk_tma else {})))
    assert_close(o, o_ref, rtol=1e-2, name="o")
    assert_close(S, S_ref, rtol=1e-4, name="S")
    assert torch.equal(S[0], S0[0]) and torch.equal(S[3], S0[3]) and torch.equal(S[5], S0[5])


def test_triton_tma_needs_16_byte_starts_and_rows():
    """The walk's tiles move by TMA only where the hardware can (addresses in 16-byte multiples);
    elsewhere the same walk runs through block pointers, here into an output that starts 2 bytes in."""
    from gdn.ops.triton import triton_forward
    from gdn.ops.triton.plan import _tma_ready
    q, k, v, g, beta, _ = random_inputs(1, 70, 1, 2, 32, 32, dtype=torch.bfloat16, seed=3, device=DEVICE)
    shifted = torch.empty(v.numel() + 1, dtype=v.dtype, device=DEVICE)[1:].view(v.shape)
    assert _tma_ready(q, k, v) and not _tma_ready(q, k, v, shifted)
    assert not _tma_ready(torch.zeros(4, 1, 4, dtype=torch.bfloat16, device=DEVICE))     # 8-byte rows
    o, _ = triton_forward(q, k, v, g, beta, scale=32 ** -0.5, use_qk_l2norm=True, chunk_size=32, out=shifted)
    assert o.data_ptr() == shifted.data_ptr()
    assert_close(o, reference_gdn(q, k, v, g, beta, use_qk_l2norm=True)[0], rtol=1e-2, name="o")


@pytest.mark.parametrize("operands, s_rtol", [("bf16_parts", 1e-4), ("fp16", 1e-3)])
def test_triton_tma_tiles_past_the_head_dims(operands, s_rtol, monkeypatch):
    """K = 48 and V = 40 (tiles of 64 and 32 columns, the second value block partial) on the TMA walk:
    the columns past the head read as zeros and are not stored (fp16 operands: the value maximum that
    scales a block sees only its own columns)."""
    import gdn.ops.triton.forward as forward
    tma = []
    spy_launches(monkeypatch, "_chunk_fwd_kernel", lambda grid, args, kw: tma.append(kw["TMA"]))
    q, k, v, g, beta, S0 = random_inputs(1, 75, 1, 2, 48, 40, dtype=torch.bfloat16, initial_state=True, seed=2,
                                         device=DEVICE)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    o, S = forward.triton_forward(q, k, v, g, beta, scale=48 ** -0.5, initial_state=S0, output_final_state=True,
                                  use_qk_l2norm=True, chunk_size=32, operands=operands)
    assert tma == [True]
    assert_close(o, o_ref, rtol=1e-2, name="o")
    assert_close(S, S_ref, rtol=s_rtol, name="S")


def test_triton_without_initial_or_final_state():
    q, k, v, g, beta, _ = random_inputs(1, 40, 1, 1, 16, 16, dtype=torch.float32, device=DEVICE)
    o_ref, _ = reference_gdn(q, k, v, g, beta)
    o, S = gdn.gated_delta_rule(q, k, v, g, beta, backend="triton", chunk_size=16)
    assert S is None
    assert_close(o, o_ref, rtol=1e-3, name="o")


def test_triton_takes_q_and_k_in_the_wider_dtype():
    """A bf16 q beside an fp32 k computes as both fp32 (as the torch backends take the widest input's
    dtype): bit for bit the call with q given as fp32, where k once went to q's bf16 (1e-3 off)."""
    q, k, v, g, beta, _ = random_inputs(1, 40, 1, 2, 16, 16, dtype=torch.float32, device=DEVICE)
    q16 = q.bfloat16()
    o_mixed, S_mixed = gdn.gated_delta_rule(q16, k, v, g, beta, backend="triton", output_final_state=True,
                                            use_qk_l2norm=True, chunk_size=16)
    o, S = gdn.gated_delta_rule(q16.float(), k, v, g, beta, backend="triton", output_final_state=True,
                                use_qk_l2norm=True, chunk_size=16)
    assert torch.equal(o_mixed, o) and torch.equal(S_mixed, S)
    o_ref, S_ref = reference_gdn(q16.double(), k, v, g, beta, use_qk_l2norm=True)
    assert_close(S_mixed, S_ref, rtol=1e-5, name="S")


@pytest.mark.parametrize("dtype, o_rtol, s_rtol", [(torch.float32, 1e-4, 2e-4), (torch.bfloat16, 1e-2, 2e-3)])
def test_triton_resets_inside_chunks(dtype, o_rtol, s_rtol):
    """g = -inf (a hard reset) or -1e3 every 13 tokens, so mid-chunk: the kernels floor g at -128
    (decay.G_FLOOR; e^-128 is 0 in float32) as they load it, so -inf - -inf never makes NaN, and the
    float32 cumulative sums stay small enough to keep the later decays (fp32: S 6e-5 here, where the
    floor's absence cost -1e3 resets 1.2e-4 and -inf everything); a NaN in g still reaches o."""
    q, k, v, g, beta, S0 = random_inputs(1, 130, 2, 4, 32, 32, dtype=dtype, initial_state=True, seed=3, device=DEVICE)
    for reset in (float("-inf"), -1e3):
        g_r = g.clone()
        g_r[:, 10::13] = reset
        o_ref, S_ref = reference_gdn(*(x.double() for x in (q, k, v, g_r, beta)), initial_state=S0.double(),
                                     use_qk_l2norm=True)
        o, S = gdn.gated_delta_rule(q, k, v, g_r, beta, initial_state=S0, output_final_state=True,
                                    use_qk_l2norm=True, backend="triton")
        assert_close(o, o_ref, rtol=o_rtol, name=f"o, resets {reset}")
        assert_close(S, S_ref, rtol=s_rtol, name=f"S, resets {reset}")
    g_r = g.clone()
    g_r[:, 70] = float("nan")
    o, _ = gdn.gated_delta_rule(q, k, v, g_r, beta, initial_state=S0, use_qk_l2norm=True, backend="triton")
    assert o[:, 70:].isnan().any() and not o[:, :64].isnan().any()


def test_triton_falls_back_to_chunk_for_gradients():
    q, k, v, g, beta, _ = random_inputs(1, 20, 1, 1, 16, 16, dtype=torch.float32, device=DEVICE)
    q.requires_grad_(True)
    o, _ = gdn.gated_delta_rule(q, k, v, g, beta, backend="triton")
    o.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_triton_rejects_unsupported_chunk_size():
    q, k, v, g, beta, _ = random_inputs(1, 20, 1, 1, 16, 16, dtype=torch.float32, device=DEVICE)
    from gdn.ops.triton import triton_forward
    with pytest.raises(ValueError, match="attention must be"):
        triton_forward(q, k, v, g, beta, scale=0.25, attention="fast")
    with pytest.raises(ValueError, match="walk_loads must be"):
        triton_forward(q, k, v, g, beta, scale=0.25, walk_loads="some")
    for C in (8, 128):
        with pytest.raises(ValueError, match="chunk_size 16, 32 or 64"):
            gdn.gated_delta_rule(q, k, v, g, beta, backend="triton", chunk_size=C)

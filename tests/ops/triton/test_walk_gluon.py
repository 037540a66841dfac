"""The fp16 walk in Gluon (gdn.ops.triton.walk_gluon, walk="gluon"; and walk_gluon_t's on the transposed
state, walk="gluon_t", where it takes the same call): on a GPU against the float64 reference and the
Triton walk; everywhere, the calls it refuses. Gluon kernels have no
interpreter, so on a CPU machine only the refusals run here (and the kernel's sm_90 compile in
test_compiled.py)."""
import pytest
import torch

from tests.ops.triton.launches import spy_launches
from tests.reference import MAGNITUDES, assert_any_magnitude, magnitude_inputs, magnitude_reference, random_inputs, \
    reference_gdn
from tests.tolerances import assert_close, assert_fp16_walk_close

pytest.importorskip("triton")


WALKS = ["gluon", "gluon_t"]
BLOCKS = {"gluon": (32, 64), "gluon_t": (64,)}       # state columns a program
SHAPE = {"gluon": {}, "gluon_t": dict(block_v=64, walk_stages=1)}     # where the defaults pick other shapes


def _walk(name, shape=True):
    """A WALKS entry as triton_forward's keywords: the walk and (shape) the shape it takes."""
    return dict(walk=name, **(SHAPE[name] if shape else {}))


def _kernels():
    import gdn.ops.triton.walk_gluon as walk_gluon
    import gdn.ops.triton.walk_gluon_t as walk_gluon_t
    return {"gluon": (walk_gluon, "walk_gluon_kernel"), "gluon_t": (walk_gluon_t, "walk_t_kernel")}


HOPPER = torch.cuda.is_available() and torch.version.hip is None and torch.cuda.get_device_capability()[0] == 9


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
@pytest.mark.parametrize("walk", WALKS)
@pytest.mark.parametrize("B, T, stages, dim", [(1, 300, 3, 64), (2, 256, 2, 64), (2, 128, 1, 64),
                                              (2, 200, 2, 128)])
def test_gluon_walk_matches_reference_and_triton_walk(B, T, stages, dim, walk):
    """Partial last chunk at B = 1 (rows past the end read as zeros), whole chunks at B = 2, one to
    three stages (one only at 64 columns, as the launcher allows), 32 and 64 state columns, K = V = 64
    and 128 (two or more programs a head), with and without an initial state: o within bf16's
    rounding of the reference, S within fp16's, and both close to the Triton walk's (the same
    products, summed in another order)."""
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = random_inputs(B, T, 2, 4, dim, dim, dtype=torch.bfloat16, initial_state=True,
                                         seed=T, device="cuda")
    for h0 in (S0, None):
        for block_v in BLOCKS[_walk(walk)["walk"]]:
            if walk.startswith("gluon_t"):
                stages = 1             # two programs an SM: one stage's rings
            call = dict(scale=dim ** -0.5, initial_state=h0, output_final_state=True, use_qk_l2norm=True,
                        pieces=1, block_v=block_v,
                        walk_stages=stages if block_v == 64 else max(stages, 2))   # refused: bf16 walk's v5 crash
            o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=h0, use_qk_l2norm=True)
            o, S = triton_forward(q, k, v, g, beta, out=torch.full_like(v, float("nan")), **call,
                                  **_walk(walk, shape=False))
            o_t, S_t = triton_forward(q, k, v, g, beta, **call)
            assert_fp16_walk_close(o, S, o_ref, S_ref, o_t, S_t)


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
@pytest.mark.parametrize("walk", WALKS)
@pytest.mark.parametrize("case", ["varlen", "varlen in launch order", "partial chunks at B = 3",
                                  "a louder next sequence"])
def test_gluon_walk_rows_of_the_next_sequence(case, walk):
    """Where a sequence's last chunk reads rows of the next (MASK_ROWS): packed sequences with empty
    ones, one of a single token, lengths that end mid-chunk and one that ends on a chunk's edge,
    walked longest first or in launch order; B = 3 with T = 200; and a next sequence whose values are
    1e6 times the last chunk's own (they must be zeroed, not merely left out of the scales). Each
    sequence gets its own outputs and state (against the reference and the Triton walk), the empty
    ones keep theirs, and no output row is left unwritten (NaN-poisoned)."""
    from gdn.ops.triton import triton_forward
    if case == "partial chunks at B = 3":
        cu, B, T, N = None, 3, 200, 3
    elif case == "a louder next sequence":
        cu = torch.tensor([0, 100, 300], dtype=torch.int32, device="cuda")
        B, T, N = 1, 300, 2
    else:
        cu = torch.tensor([0, 0, 17, 18, 146, 146, 275, 400], dtype=torch.int32, device="cuda")
        B, T, N = 1, 400, 7
    q, k, v, g, beta, S0 = random_inputs(B, T, 2, 4, 64, 64, dtype=torch.bfloat16, initial_state=True, N=N,
                                         seed=7, device="cuda")
    if case == "a louder next sequence":
        # The first sequence's last chunk reads the second's rows, 1e6 larger than its own values:
        # scaled by the first's tau they pass fp16's range (their zeros must be exact).
        v[:, 100:] *= 1e6
        S0[1] *= 1e6
    call = dict(scale=64 ** -0.5, initial_state=S0, output_final_state=True, use_qk_l2norm=True, cu_seqlens=cu,
                longest_first=case != "varlen in launch order")
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True,
                                 cu_seqlens=None if cu is None else cu.cpu())
    o, S = triton_forward(q, k, v, g, beta, out=torch.full_like(v, float("nan")), **call, **_walk(walk))
    o_t, S_t = triton_forward(q, k, v, g, beta, walk="triton", **call)
    if case == "a louder next sequence":
        for n, (a, b) in enumerate([(0, 100), (100, 300)]):      # each at its own scale
            assert_fp16_walk_close(o[:, a:b], S[n], o_ref[:, a:b], S_ref[n], o_t[:, a:b], S_t[n])
        return
    assert_fp16_walk_close(o, S, o_ref, S_ref, o_t, S_t)
    if cu is not None:
        assert torch.equal(S[0], S0[0]) and torch.equal(S[4], S0[4])    # the empty sequences


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
@pytest.mark.parametrize("walk", WALKS)
@pytest.mark.parametrize("T", [4096, 8195])
def test_gluon_walk_beside_the_wy_pass(T, walk, monkeypatch):
    """At B = 1 with few heads, walk="gluon" runs beside the WY pass and waits on its counts (WAIT,
    overlap="flags"; T = 8195 ends in a partial chunk): the same results as the Triton walk, which does
    the same, and as the reference; no output row left unwritten (NaN-poisoned)."""
    from gdn.ops.triton import triton_forward
    module, kernel = _kernels()[_walk(walk)["walk"]]
    waits = []
    spy_launches(monkeypatch, kernel, lambda grid, args, kw: waits.append(kw["WAIT"]), module=module)
    q, k, v, g, beta, S0 = random_inputs(1, T, 2, 4, 64, 64, dtype=torch.bfloat16, initial_state=True, seed=T,
                                         device="cuda")
    # One segment: at so few heads the bf16 defaults would split the sequence instead (no fp16 walk).
    call = dict(scale=64 ** -0.5, initial_state=S0, output_final_state=True, use_qk_l2norm=True, num_segments=1)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    o, S = triton_forward(q, k, v, g, beta, out=torch.full_like(v, float("nan")), **call, **_walk(walk))
    o_t, S_t = triton_forward(q, k, v, g, beta, walk="triton", **call)
    assert waits == [True]
    assert_fp16_walk_close(o, S, o_ref, S_ref, o_t, S_t)


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
@pytest.mark.parametrize("walk", WALKS)
@pytest.mark.parametrize("beta", [1.9, 1.99])
def test_gluon_walk_adds_the_low_parts_on_repeated_keys(beta, walk):
    """One repeated key with beta near 2 and nothing forgetting (every chunk flagged by the WY pass:
    its T diag(beta) carries its low parts, walk_gluon.low_parts forms the correction tile): o and S
    within the bf16 output's rounding of float64, as the Triton walk's (test_chunk_fwd's
    test_triton_reflections_on_repeated_keys). On an H100 (v67, B1 x T4k, K = 128) walk_gluon gave
    3.1e-3 / 3.5e-3 at beta 1.9; walk_gluon_t, with its transposed tile's diagonal of the wrong sign,
    3.2e-2 / 5.0e-2 (without the low parts ~1e-1)."""
    from gdn.ops.triton import triton_forward
    from tests.reference import repeated_key_inputs
    q, k, v, g, b = repeated_key_inputs(beta, device="cuda", T=1024, K=64, V=64, H=2, HV=4)
    o_ref, S_ref = reference_gdn(q, k, v, g, b, use_qk_l2norm=True)
    o, S = triton_forward(q, k, v, g, b, scale=64 ** -0.5, output_final_state=True, use_qk_l2norm=True,
                          num_segments=1, out=torch.full_like(v, float("nan")), **_walk(walk))
    assert_close(o, o_ref, rtol=6e-3, name="o")
    assert_close(S, S_ref, rtol=6e-3, name="S")


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
@pytest.mark.parametrize("walk", WALKS)
@pytest.mark.parametrize("B, T", [(2, 1000), (1, 4096)])
def test_gluon_walk_without_l2norm(B, T, walk):
    """Without l2norm the Gluon walks read q and k as given (fp16 copies: queries of norm ~8 here, keys
    ~1), by themselves (B = 2) and beside the WY pass (B = 1): within the fp16 walk's tolerances of the
    reference and of the Triton walk, every output row written (NaN-poisoned)."""
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = random_inputs(B, T, 2, 4, 64, 64, dtype=torch.bfloat16, initial_state=True, seed=T + 1,
                                         device="cuda")
    call = dict(scale=64 ** -0.5, initial_state=S0, output_final_state=True, num_segments=1)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0)
    o, S = triton_forward(q, k, v, g, beta, out=torch.full_like(v, float("nan")), **call, **_walk(walk))
    o_t, S_t = triton_forward(q, k, v, g, beta, walk="triton", **call)
    assert_fp16_walk_close(o, S, o_ref, S_ref, o_t, S_t)


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
@pytest.mark.parametrize("walk", WALKS)
@pytest.mark.parametrize("B, T, packed", [(1, 4096, False), (3, 200, False), (1, 400, True)])
def test_gluon_walk_descriptors_made_in_the_kernel(B, T, packed, walk):
    """walk_descriptors="kernel": each program makes its TMA descriptors from the tensors (Triton's
    scratch for them) instead of the host's TensorDescriptors; bit for bit the host descriptors'
    results, beside the WY pass at B = 1, with rows of the next sequence (partial chunks at B = 3,
    packed sequences: the descriptors' row bounds), every output row written (NaN-poisoned)."""
    from gdn.ops.triton import triton_forward
    cu = torch.tensor([0, 17, 146, 275, 400], dtype=torch.int32, device="cuda") if packed else None
    q, k, v, g, beta, S0 = random_inputs(B, T, 2, 4, 64, 64, dtype=torch.bfloat16, initial_state=True,
                                         N=4 if packed else None, seed=T + B, device="cuda")
    call = dict(scale=64 ** -0.5, initial_state=S0, output_final_state=True, use_qk_l2norm=True, cu_seqlens=cu,
                num_segments=1, **_walk(walk))
    o, S = triton_forward(q, k, v, g, beta, out=torch.full_like(v, float("nan")), walk_descriptors="kernel",
                          **call)
    o_h, S_h = triton_forward(q, k, v, g, beta, **call)
    assert torch.equal(o, o_h) and torch.equal(S, S_h)


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
@pytest.mark.parametrize("walk", WALKS)
@pytest.mark.parametrize("case", list(MAGNITUDES))
def test_gluon_walk_scales_any_magnitude(case, walk):
    """tests.reference's magnitudes far outside fp16's range (test_walk_f16 runs them on the Triton
    walk): finite and as exact as at unit scale (a state erased within a chunk: relative to the state
    the chunk started from, assert_any_magnitude)."""
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = inputs = magnitude_inputs(case, 64, "cuda")
    reference = magnitude_reference(inputs, 64)
    o, S = triton_forward(q, k, v, g, beta, scale=64 ** -0.5, initial_state=S0, output_final_state=True,
                          use_qk_l2norm=True, num_segments=1, out=torch.full_like(v, float("nan")), **_walk(walk))
    assert_any_magnitude(case, o, S, reference)


def test_gluon_walk_refusals(monkeypatch):
    """Outside what the kernel does, a ValueError that says what it needs: K outside 64/128/256, the
    bf16-parts walk, pieces, chunks other than 64 rows, other than 4 warps, more shared memory than an
    SM has; and no interpreter. Meta tensors: the refusals come before any launch."""
    import gdn.ops.triton.forward as forward
    import gdn.ops.triton.plan as planning

    def call(B=1, T=128, K=64, device="meta", **kw):
        q = torch.empty(B, T, 1, K, dtype=torch.bfloat16, device=device)
        v = torch.empty(B, T, 2, 64, dtype=torch.bfloat16, device=device)
        g = torch.zeros(B, T, 2, device=device)
        return forward.triton_forward(q, q, v, g, g, scale=0.125, use_qk_l2norm=True, walk="gluon", **kw)
    q = torch.empty(1, 64, 1, 64, dtype=torch.bfloat16, device="meta")
    g = torch.zeros(1, 64, 1, device="meta")
    with pytest.raises(ValueError, match="walk must be None, 'triton', 'gluon' or 'gluon_t'"):
        forward.triton_forward(q, q, q, g, g, scale=0.125, use_qk_l2norm=True, walk="cuda")
    monkeypatch.setattr(planning, "triton_interpreting", lambda: False)
    monkeypatch.setattr(planning, "_tma_ready", lambda *tensors: True)     # as torch allocates them on sm_90
    for kw in (dict(K=32), dict(pieces=2, overlap="pieces"), dict(operands="bf16_parts"), dict(chunk_size=32),
               dict(walk_warps=8), dict(K=256, block_v=32, walk_stages=3)):
        with pytest.raises(ValueError, match="walk='gluon' needs the fp16 walk"):
            call(**kw)
    monkeypatch.setattr(planning, "triton_interpreting", lambda: True)
    with pytest.raises(ValueError, match="needs an sm_90 CUDA GPU"):
        call()


def test_descriptors_made_in_the_kernel_are_routed(monkeypatch):
    """walk_descriptors="kernel": the Gluon walks are given the tensors in the descriptors' places, the
    token rows and DESCS_IN_KERNEL (the wide walk, dense and packed; the ordered walk at B = 1), except
    the split's walk (B1 x T32k's automatic split: its segments keep the host's descriptors, which do
    not take its registers); "host" (the default) gives descriptors everywhere. Recorded, not run."""
    import gdn.ops.triton.forward as forward
    import gdn.ops.triton.plan as planning
    import gdn.ops.triton.walk_gluon as walk_gluon
    import gdn.ops.triton.walk_gluon_t as walk_gluon_t
    from gdn.ops.triton import split_walk
    from gdn.ops.triton.launch import TensorDescriptor
    monkeypatch.setattr(planning, "triton_interpreting", lambda: False)
    monkeypatch.setattr(planning, "_tma_ready", lambda *tensors: True)
    monkeypatch.setattr(planning, "num_sms", lambda device: 132)
    seen = []
    for module, name in ((walk_gluon, "walk_gluon_kernel"), (walk_gluon_t, "walk_t_kernel")):
        descs = 6 if name == "walk_t_kernel" else 5                   # (the leading descriptors)
        rows = getattr(module, name).arg_names.index("rows")
        spy_launches(monkeypatch, name, lambda grid, args, kw, name=name, descs=descs, rows=rows: seen.append((
            name, kw.get("SPLIT", 0), kw["DESCS_IN_KERNEL"], [type(a) for a in args[:descs]], args[rows])),
            run=False, module=module)
    spy_launches(monkeypatch, "wy_kernel", lambda grid, args, kw: None, run=False)
    spy_launches(monkeypatch, "_forgetting_kernel", lambda grid, args, kw: None, run=False, module=split_walk)

    def walks(B, T, **kw):
        q = torch.empty(B, T, 16, 128, dtype=torch.bfloat16, device="meta")
        v = torch.empty(B, T, 32, 128, dtype=torch.bfloat16, device="meta")
        g = torch.empty(B, T, 32, device="meta")
        seen.clear()
        forward.triton_forward(q, q, v, g, g, scale=0.125, use_qk_l2norm=True, output_final_state=True, **kw)
        return list(seen)
    tensors, descriptors = [torch.Tensor] * 6, [TensorDescriptor] * 6
    assert walks(8, 4000, walk_descriptors="kernel") == [("walk_t_kernel", 0, True, tensors, 8 * 4000)]
    assert walks(8, 4000) == [("walk_t_kernel", 0, False, descriptors, 8 * 4000)]
    cu = torch.empty(65, dtype=torch.int32, device="meta")
    assert walks(1, 4096, cu_seqlens=cu, walk_descriptors="kernel") == [("walk_t_kernel", 0, True, tensors, 4096)]
    assert walks(1, 16384, walk_descriptors="kernel", split_walk=False) == [
        ("walk_gluon_kernel", 0, True, tensors[:5], 16384)]
    assert walks(1, 32768, walk_descriptors="kernel") == [("walk_gluon_kernel", 0, True, tensors[:5], 32768),
                                                          ("walk_t_kernel", 5, False, descriptors, 32768)]
    assert walks(1, 16384, split_walk=False) == [("walk_gluon_kernel", 0, False, descriptors[:5], 16384)]


def test_gluon_walk_is_the_wide_default(monkeypatch):
    """walk=None takes a Gluon walk at K = 128 on a GPU: walk_gluon_t's where the defaults choose the
    wide walk (64 columns, one stage: batches x heads fill the SMs twice), dense or packed, whole
    chunks or not (rows of the next sequence masked), and walk_gluon's at B = 1 from 256 chunks on,
    beside the WY pass (waiting on its counts); the Triton walk elsewhere: shorter sequences at B = 1,
    one piece or CUDA graphs' pieces there, block_v or walk_stages given, other chunk sizes or K.
    Recorded, not run (meta tensors, as on an sm_90 GPU with 132 SMs)."""
    import gdn.ops.triton.forward as forward
    import gdn.ops.triton.plan as planning
    import gdn.ops.triton.walk_gluon as walk_gluon
    import gdn.ops.triton.walk_gluon_t as walk_gluon_t
    monkeypatch.setattr(planning, "triton_interpreting", lambda: False)
    monkeypatch.setattr(planning, "_tma_ready", lambda *tensors: True)
    monkeypatch.setattr(planning, "num_sms", lambda device: 132)
    walks = []
    spy_launches(monkeypatch, "_chunk_fwd_kernel", lambda grid, args, kw: walks.append("triton"), run=False)
    flags = []
    spy_launches(monkeypatch, "walk_gluon_kernel", lambda grid, args, kw: (
        walks.append(("gluon", grid)),
        flags.append((kw["IS_VARLEN"], kw["LONGEST_FIRST"], kw["MASK_ROWS"], kw["WAIT"]))),
        run=False, module=walk_gluon)
    spy_launches(monkeypatch, "walk_t_kernel", lambda grid, args, kw: (
        walks.append(("gluon_t", grid)),
        flags.append((kw["IS_VARLEN"], kw["LONGEST_FIRST"], kw["MASK_ROWS"], kw["WAIT"]))),
        run=False, module=walk_gluon_t)
    signals = []
    spy_launches(monkeypatch, "wy_kernel", lambda grid, args, kw: signals.append(kw["SIGNAL"]), run=False)

    def walk(B, T, K=128, H=16, HV=32, **kw):
        q = torch.empty(B, T, H, K, dtype=torch.bfloat16, device="meta")
        v = torch.empty(B, T, HV, 128, dtype=torch.bfloat16, device="meta")
        g = torch.empty(B, T, HV, device="meta")
        walks.clear()
        forward.triton_forward(q, q, v, g, g, scale=K ** -0.5, use_qk_l2norm=True, output_final_state=True, **kw)
        return walks
    assert walk(8, 4096) == [("gluon_t", (2 * 8 * 32,))]         # 64 columns: 2 programs a head
    assert walk(32, 256) == [("gluon_t", (2 * 32 * 32,))]
    assert walk(8, 4096, K=64) == ["triton"]                        # only the measured K = 128 by default
    assert walk(8, 4096, K=64, walk="gluon") == [("gluon", (2 * 8 * 32,))]
    assert walk(1, 8192) == ["triton"]                              # B = 1 below 256 chunks
    assert walk(1, 16320) == ["triton"]                             # 255 chunks
    assert walk(1, 16384, pieces=1) == ["triton"]                   # the WY pass first: Gluon's 8% slower
    assert walk(1, 16384, walk_stages=2) == ["triton"]              # not the measured shape
    assert walk(8, 4096, block_v=64) == ["triton"]                  # the shape asked for
    assert walk(8, 4096, walk="triton") == ["triton"]
    assert walk(8, 4096, chunk_size=32) == ["triton"]                # the kernel's tiles are 64 rows
    assert walk(1, 8192, walk="gluon", pieces=1) == [("gluon", (4 * 32,))]     # 32 columns, asked for
    cu = torch.empty(65, dtype=torch.int32, device="meta")        # 64 sequences: the wide walk
    flags.clear()
    assert walk(1, 4096, cu_seqlens=cu) == [("gluon_t", (2 * 64 * 32,))]
    assert walk(1, 4096, cu_seqlens=cu, longest_first=False) == [("gluon_t", (2 * 64 * 32,))]
    assert walk(8, 4000) == [("gluon_t", (2 * 8 * 32,))]          # a partial chunk at B > 1
    assert walk(8, 4096) == [("gluon_t", (2 * 8 * 32,))]
    assert walk(8, 4096, walk="gluon") == [("gluon", (2 * 8 * 32,))]    # walk_gluon's, asked for
    signals.clear()
    assert walk(1, 16384, split_walk=False) == [("gluon", (4 * 32,))]   # beside the WY pass: its counts
    # (from split_walk.AUTO_MIN_CHUNKS chunks on the default adds the automatic split: test_split_walk.py)
    assert walk(1, 65536, split_walk=False) == [("gluon", (4 * 32,))]
    assert walk(1, 8192, walk="gluon", pieces=4) == [("gluon", (4 * 32,))]
    assert flags == [(True, True, True, False), (True, False, True, False), (False, False, True, False),
                     (False, False, False, False), (False, False, False, False), (False, False, False, True),
                     (False, False, False, True), (False, False, False, True)]
    assert signals == [True, True, True]
    with pytest.raises(ValueError, match="walk='gluon' needs"):
        walk(1, 8192, walk="gluon", pieces=4, overlap="pieces")     # the pieces overlap: not Gluon's
    # Not beside the WY pass where a chunk reads the next sequence's rows, nor at K = 256 (no room):
    # pieces (which turn the flags on) are refused there.
    for kw in (dict(B=2, T=8195, H=2, HV=4), dict(B=1, T=8192, K=256)):
        with pytest.raises(ValueError, match="walk='gluon' needs"):
            walk(walk="gluon", pieces=4, **kw)
    flags.clear()
    assert walk(2, 8192, H=2, HV=4, walk="gluon", pieces=4) == [("gluon", (4 * 2 * 4,))]
    assert flags == [(False, False, False, True)]


@pytest.mark.parametrize("shape, block, dtype", [((1, 192, 16, 128), [64, 128], torch.float16),
                                                 ((2, 64, 32, 64), [64, 64], torch.float16),
                                                 ((1, 128, 32, 128), [64, 32], torch.bfloat16)])
def test_rows_descriptor_is_triton_s(shape, block, dtype):
    """walk_gluon._rows sets a descriptor's fields itself (no checks, no reshape): Triton must see it
    as the descriptor its own constructor makes of the 2-D view, in the fields its launcher reads and
    in the kernel's specialisation."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from gdn.ops.triton.walk_gluon import _rows, _tile_layout
    x = torch.empty(shape, dtype=dtype)
    ours = _rows(x, block)
    theirs = TensorDescriptor.from_tensor(x.reshape(shape[0] * shape[1], -1), block, _tile_layout(tuple(block), dtype))
    assert (list(ours.shape), list(ours.strides)) == (list(theirs.shape), list(theirs.strides))
    assert (ours.block_shape, ours.layout, ours.padding) == (theirs.block_shape, theirs.layout, theirs.padding)
    assert ours.base.data_ptr() == theirs.base.data_ptr() and ours.base.dtype == theirs.base.dtype
    backend = make_backend(GPUTarget("cuda", 90, 32))
    assert native_specialize_impl(backend, ours, False, True, True) == \
        native_specialize_impl(backend, theirs, False, True, True)


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
@pytest.mark.parametrize("knob", [dict(decays_layout="tokens")], ids=["decays"])
@pytest.mark.parametrize("B, T, H, HV, cu, kw", [
    (2, 300, 2, 4, None, _walk("gluon_t")),              # the wide walk, a partial last chunk (MASK_ROWS)
    (1, 20000, 16, 32, None, dict(walk="gluon")),        # the ordered walk beside the WY pass (its counts)
    (1, 600, 2, 4, [0, 70, 71, 600], _walk("gluon_t")),  # packed sequences
    (1, 32768, 16, 32, None, {}),                        # the default at B = 1: ordered walk and split
    (1, 8192, 16, 32, None, dict(_walk("gluon_t"), operands="fp16", split_walk=True, split_check="bounds")),
])                                                       # (the split's warm-up and segments in two launches)
def test_layout_knobs_give_the_same_bits(B, T, H, HV, cu, kw, knob):
    """Knobs that move data, not arithmetic, against the default, bit for bit in o and S, every output
    row written (NaN-poisoned): decays_layout="tokens" (the WY pass stores G [tokens, HV]; the
    default with the Gluon walks, "heads", stores [HV, tokens]). At B = 1 the
    walks are Gluon's with Qwen3-Next's heads (16 q/k, 32 value; with 4 heads the Triton walk's
    segments would take B = 1, which "heads" refuses)."""
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = random_inputs(B, T, H, HV, 128, 128, dtype=torch.bfloat16, initial_state=cu is None,
                                         seed=T, device="cuda")
    call = dict(scale=128 ** -0.5, initial_state=S0, output_final_state=True, use_qk_l2norm=True, **kw,
                cu_seqlens=None if cu is None else torch.tensor(cu, dtype=torch.int32, device="cuda"))
    o, S = triton_forward(q, k, v, g, beta, out=torch.full_like(v, float("nan")), **call)
    o_k, S_k = triton_forward(q, k, v, g, beta, out=torch.full_like(v, float("nan")), **knob, **call)
    assert not torch.isnan(o).any() and not torch.isnan(o_k).any()
    assert torch.equal(o, o_k) and torch.equal(S, S_k)

"""The certified split (gdn.ops.triton.split_walk, walk_gluon_t's SPLIT): its bounds against a
token-by-token recurrence and against the states they bound (CPU, float64 reference); the segments'
choice; the calls it refuses; on an sm_90 GPU the split walk against the reference, certified
(decaying gates) and handed over (long memory)."""
import pytest
import torch

from tests.reference import random_inputs, reference_gdn
from tests.tolerances import assert_fp16_walk_close

pytest.importorskip("triton")

from gdn.ops.common import triton_interpreting  # noqa: E402
from gdn.ops.triton import split_walk  # noqa: E402
from tests.ops.triton.test_walk_gluon import HOPPER  # noqa: E402  (the Gluon walks' GPU)

BT = 8                                  # small chunks keep the reference's token loops short on a CPU
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"          # the bounds' kernels: the interpreter's on a CPU


def _problem(gate, T=160, HV=2, V=8, seed=0):
    q, k, v, g, beta, S0 = random_inputs(1, T, 1, HV, 8, V, gate=gate, initial_state=True, seed=seed)
    return q, k, v, g, beta, S0


def _errors(v, g, beta, S0, *segments):
    """split_walk.segment_errors on DEVICE, back on the CPU."""
    on = lambda x: None if x is None else x.to(DEVICE)
    return split_walk.segment_errors(on(v), on(g), on(beta), on(S0), BT, *segments).cpu()


def _token_bound(v, g, beta, S0, tokens):
    """B after `tokens` tokens by its recurrence, token by token, in float64 [HV]."""
    B = torch.linalg.vector_norm(S0[0].double(), dim=1).amax(-1)
    for t in range(tokens):
        B = torch.exp(g[0, t].double()) * B + beta[0, t].double().abs() * v[0, t].double().abs().amax(-1)
    return B


@pytest.mark.parametrize("gate", ["normal", "strong", "zero"])
@pytest.mark.parametrize("T, P, L, W, h0", [(160, 4, 5, 2, True),      # warm-ups from chunks 3, 8, 13
                                            (2400, 3, 100, 7, True),   # 200 chunks: two blocks of the scan
                                            (160, 5, 4, 7, False)])    # warm-ups longer than segments
def test_segment_errors_follow_the_recurrence(gate, T, P, L, W, h0):
    """Each segment's bound equals e^{G_win} B, B from the token-by-token recurrence (float64), to
    fp32's rounding and the bound's 2^-10 margin; 0 for segment 0 and where the warm-up starts at the
    sequence's start."""
    q, k, v, g, beta, S0 = _problem(gate, T=T)
    S0 = S0 if h0 else None
    err = _errors(v, g, beta, S0, P, L, W)
    assert err.shape == (P, 2) and err.dtype == torch.float32
    assert torch.equal(err[0], torch.zeros(2))
    for p in range(1, P):
        start = p * L - W
        if start <= 0:
            assert torch.equal(err[p], torch.zeros(2))
            continue
        win = g[0, start * BT:p * L * BT].double().sum(0)
        B = _token_bound(v, g, beta, torch.zeros(1, 2, 8, 8) if S0 is None else S0, start * BT)
        expected = torch.exp(win) * B * (1 + 2.0 ** -10)
        torch.testing.assert_close(err[p].double(), expected, rtol=1e-4, atol=1e-30)
    assert torch.equal(_errors(v, g, beta, S0, 4, 5, 5)[1], torch.zeros(2))


def test_segment_errors_bound_the_warm_up():
    """What the bound promises: the true state at a segment's start and the state its warm-up walks
    from zeros differ, in every column's 2-norm, by at most the segment's bound (float64 reference;
    random gates and values, beta in [0, 2])."""
    q, k, v, g, beta, S0 = _problem("normal", seed=3)
    beta = beta * 2
    P, L, W = 3, 6, 2
    err = _errors(v, g, beta, S0, P, L, W)
    for p in range(1, P):
        start, end = (p * L - W) * BT, p * L * BT
        _, S_true = reference_gdn(q[:, :end], k[:, :end], v[:, :end], g[:, :end], beta[:, :end], initial_state=S0,
                                  use_qk_l2norm=True)
        _, S_warm = reference_gdn(q[:, start:end], k[:, start:end], v[:, start:end], g[:, start:end],
                                  beta[:, start:end], use_qk_l2norm=True)
        gap = torch.linalg.vector_norm(S_true[0] - S_warm[0], dim=1).amax(-1)      # [HV]
        assert (gap > 0).all() and (gap <= err[p].double()).all(), (p, gap, err[p])


def test_segment_errors_refuse_growing_maps():
    """A beta outside [0, 2] makes a token's map grow the state, which the bound does not cover: that
    head's segments never certify (an infinite bound), the others keep theirs."""
    q, k, v, g, beta, S0 = _problem("normal")
    beta[0, 5, 1] = 2.5
    err = _errors(v, g, beta, S0, 4, 5, 2)
    assert torch.isinf(err[1:, 1]).all() and torch.isfinite(err[1:, 0]).all()
    beta[0, 5, 1] = -0.1
    assert torch.isinf(_errors(v, g, beta, S0, 4, 5, 2)[1:, 1]).all()


def test_split_segments():
    """Segments fill the resident programs and stay at least twice their warm-up; none where that
    leaves one."""
    assert split_walk.split_segments(512, 64, 264) == (4, 128)        # B1 x T32k, 64 programs
    assert split_walk.split_segments(2048, 64, 264) == (4, 512)
    assert split_walk.split_segments(128, 64, 264) == (2, 64)         # T8k: two segments of 64 chunks
    assert split_walk.split_segments(64, 64, 264) == (1, 64)          # too short to warm up twice
    assert split_walk.split_segments(40, 64, 264, warmup=4) == (4, 10)
    assert split_walk.split_segments(512, 512, 264) == (1, 512)       # wide already


def test_beside_segments():
    """Beside the WY pass: fewer walk programs than SMs (one SM always free for a WY program), each
    segment at least twice its warm-up, the flag group dividing the warm-up and the segments."""
    assert split_walk.beside_segments(512, 64, 132, 8) == (2, 256, 8)      # B1 x T32k: 128 of 132 SMs
    assert split_walk.beside_segments(2048, 64, 132, 16) == (2, 1024, 8)   # 16 does not divide 24
    assert split_walk.beside_segments(512, 32, 132, 8) == (4, 128, 8)      # 16 value heads
    assert split_walk.beside_segments(500, 32, 132, 8) == (4, 128, 8)      # a short last segment
    assert split_walk.beside_segments(64, 64, 132, 8) == (1, 64, 8)        # too short to warm up twice
    assert split_walk.beside_segments(512, 66, 132, 8) == (1, 512, 8)      # two segments would fill every SM
    assert split_walk.aligned_group(16, 24) == 8 and split_walk.aligned_group(8, 8, 4) == 4
    assert split_walk.aligned_group(8, 3) == 1


def test_plan_places_the_split():
    """split_walk.plan: True beside the WY pass where allowed (two segments at B1 x HV 32, the group
    aligned to the warm-up), else after it (four, two programs an SM); an int that many segments,
    beside only while they leave an SM free; P < 2 where the sequence is too short."""
    assert split_walk.plan(True, None, 512, 64, 132, 8, True) == (2, 256, 24, 8, True)
    assert split_walk.plan(True, None, 512, 64, 132, 8, False) == (4, 128, 24, 8, False)
    assert split_walk.plan(True, None, 2048, 64, 132, 16, False) == (4, 512, 24, 16, False)
    assert split_walk.plan(4, 4, 32, 4, 132, 8, True) == (4, 8, 4, 4, True)
    assert split_walk.plan(4, 4, 32, 64, 132, 8, True)[4] is False        # 256 programs: after the WY pass
    assert split_walk.plan(True, None, 64, 64, 132, 8, True)[0] == 1


def test_feed_order_follows_the_segments():
    """The reference order: a permutation of the chunks, the warm-ups' windows first (step by step,
    one chunk of every later segment a step), then every segment's chunks a step at a time."""
    assert split_walk.feed_order(20, 3, 8, 3) == [5, 13, 6, 14, 7, 15, 0, 8, 16, 1, 9, 17, 2, 10, 18, 3, 11, 19,
                                                   4, 12]
    assert split_walk.feed_order(10, 1, 10, 3) == list(range(10))
    assert split_walk.feed_order(10, 4, 3, 4) == list(range(10))          # warm-ups longer than segments
    for NT, P, L, W in [(512, 2, 256, 24), (23, 3, 8, 7), (17, 2, 16, 2), (40, 5, 8, 8)]:
        assert sorted(split_walk.feed_order(NT, P, L, W)) == list(range(NT))


@pytest.mark.parametrize("NT, L, W", [(20, 8, 3), (23, 8, 7), (24, 8, 8), (17, 16, 2), (512, 256, 24),
                                      (500, 128, 24), (512, 128, 24), (10, 10, 3), (10, 3, 4), (33, 4, 1)])
def test_feed_chunk_is_feed_order(NT, L, W):
    """The WY pass's closed form (split_walk.feed_chunk, in Triton) gives the reference order slot by
    slot: every chunk formed once (the walk waits for each), short and long last segments alike."""
    import triton
    import triton.language as tl

    @triton.jit
    def order_kernel(out, NT, P, L, W, BLOCK: tl.constexpr):
        j = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + j, split_walk.feed_chunk(j, NT, P, L, W), mask=j < NT)

    P = -(-NT // L)
    out = torch.full((NT,), -1, dtype=torch.int32, device=DEVICE)
    order_kernel[(triton.cdiv(NT, 64),)](out, NT, P, L, W, BLOCK=64)
    assert out.cpu().tolist() == split_walk.feed_order(NT, P, L, W)


def _forgetting_reference(g, beta, P, L, W, L0=None, forget_log2=split_walk.FORGET_LOG2, BT=BT, k=None):
    """forgetting_heads in Python: a head is chosen where every later segment's warm-up (before
    s_p = L0 + (p - 1) L, chunks of BT tokens) starts at the sequence's start, or sums its log-decays
    (float64) to at most forget_log2 ln 2 with every beta in [0, 2] (and, given keys k [B, T, H, K],
    every beta |k|^2 at most 2)."""
    import math
    B, _, HV = g.shape
    L0 = L if L0 is None else L0
    if k is not None:           # each value head's keys' squared norms: beta |k|^2 <= 2 as a bound on beta
        sq = k.double().pow(2).sum(-1).repeat_interleave(HV // k.shape[2], dim=2)
        beta = torch.where(beta * sq > 2, torch.full_like(beta, 3.0), beta)
    chosen = torch.ones(B * HV, dtype=torch.int32)
    for n in range(B):
        for h in range(HV):
            for p in range(1, P):
                s = L0 + (p - 1) * L
                first = max(s - W, 0)
                window = g[n, first * BT:s * BT, h].double().sum().item()
                b = beta[n, first * BT:s * BT, h]
                in_range = bool(((b >= 0) & (b <= 2)).all())
                if first > 0 and not (window <= forget_log2 * math.log(2) and in_range):
                    chosen[n * HV + h] = 0
    return chosen


def test_forgetting_heads_choose_the_heads_that_forget():
    """forgetting_heads against its reference: per (sequence, head), at the threshold's two sides
    (a warm-up of 16 tokens: g = -2 sums to -32, below -44 ln 2 = -30.5; g = -1.9 to -30.4, above
    it), long memory (g = 0), one warm-up that does not forget among several that do, a beta past 2
    in one warm-up (outside it: no matter), and warm-ups that reach the sequence's start (exact,
    whatever the gates); the posterior check's layout (segment 0 longer: L0) and its betas-only
    test (forget_log2 = inf)."""
    P, L, W = 4, 4, 2
    T = P * L * BT
    g = torch.full((2, T, 6), -2.0)
    g[:, :, 1] = -1.9
    g[:, :, 2] = 0.0
    g[1, 2 * L * BT - 1, 3] = 10.0              # the second warm-up of sequence 1, head 3 no longer forgets
    g[:, :, 4] = -0.5 + 0.4 * torch.randn(2, T)
    beta = torch.rand(2, T, 6) * 2
    beta[0, 3 * L * BT - 3, 5] = 2.5             # in segment 3's warm-up
    beta[1, 3 * L * BT - 3 * BT, 5] = -0.5       # before it: read by no warm-up
    heads = split_walk.forgetting_heads(g.to(DEVICE), beta.to(DEVICE), BT, P, L, W).cpu()
    assert heads.tolist() == _forgetting_reference(g, beta, P, L, W).tolist()
    assert heads.view(2, 6)[:, :3].tolist() == [[1, 0, 0], [1, 0, 0]] and heads.view(2, 6)[:, 3].tolist() == [1, 0]
    assert heads.view(2, 6)[:, 5].tolist() == [0, 1]
    for L0, forget in ((6, split_walk.FORGET_LOG2), (5, float("inf"))):
        heads = split_walk.forgetting_heads(g.to(DEVICE), beta.to(DEVICE), BT, 3, L, W, L0, forget).cpu()
        assert heads.tolist() == _forgetting_reference(g, beta, 3, L, W, L0, forget).tolist()
    betas_only = split_walk.forgetting_heads(g.to(DEVICE), beta.to(DEVICE), BT, 3, L, W, 5, float("inf"))
    assert betas_only.view(2, 6)[:, :5].all()
    # Warm-ups longer than the segments before them start at the sequence's start: every head chosen.
    zeros = torch.zeros(1, 3 * BT, 2, device=DEVICE)
    assert split_walk.forgetting_heads(zeros, zeros, BT, 3, 1, 4).cpu().tolist() == [1, 1]


@pytest.mark.parametrize("keys_block", [128, 4])
def test_forgetting_heads_with_keys_that_are_not_normalised(keys_block):
    """Without l2norm (forgetting_heads given the keys), a head whose warm-up holds a token with
    beta |k|^2 above 2 is not chosen (its map may grow the state), keys of any norm elsewhere do not
    matter, and a key read by two value heads counts against each by its own beta; unit keys choose
    what no keys do. Against the reference, for segments of equal length and the posterior check's;
    with each warm-up's keys in one program, and in four (_keys_grow_kernel's blocks of 4 tokens)."""
    P, L, W, H, K = 4, 4, 2, 2, 16
    T = P * L * BT
    g = torch.full((2, T, 4), -2.0)
    beta = torch.full((2, T, 4), 0.5)
    k = torch.nn.functional.normalize(torch.randn(2, T, H, K), dim=-1)
    on = lambda x: x.to(DEVICE)
    heads = lambda *args, keys: split_walk.forgetting_heads(on(g), on(beta), BT, *args, k=on(keys),
                                                            keys_block=keys_block).cpu().tolist()
    assert heads(P, L, W, keys=k.bfloat16()) == [1] * 8
    k[0, 2 * L * BT - 5, 0] *= 2.5              # in segment 2's warm-up: beta |k|^2 = 3.1 for heads 0 and 1
    beta[0, 2 * L * BT - 5, 1] = 0.3            # ... 1.9 for head 1
    k[1, 2 * L * BT - 3 * BT, 1] *= 10.0        # before that warm-up: read by none
    k[1, 3 * L * BT - 1, 1] *= 1.5              # segment 3's warm-up's last token, heads 2 and 3: 1.125
    for L0, forget in ((None, split_walk.FORGET_LOG2), (6, float("inf"))):
        P_ = P if L0 is None else 3
        expected = _forgetting_reference(g, beta, P_, L, W, L0, forget, k=k.bfloat16())
        assert heads(P_, L, W, L0, forget, keys=k.bfloat16()) == expected.tolist()
    assert heads(P, L, W, keys=k.bfloat16()) == [0, 1, 1, 1, 1, 1, 1, 1]


@pytest.mark.skipif(not triton_interpreting(), reason="runs the recorded WY launch in Triton's interpreter on CPU "
                    "tensors, in its order of programs (on a GPU: test_automatic_split_on_mixed_heads)")
@pytest.mark.parametrize("wy_heads", [2, 1])
def test_wy_pass_marks_the_split_heads(monkeypatch, wy_heads):
    """split_heads_in="wy": the WY pass's chunk-0 programs mark the automatic split's heads (wy_kernel's
    FORGET) as forgetting_heads would, past the first group of chunks counts none of a q/k head whose
    value heads are all marked, and stores the rest as without them.
    On a CPU: the call's launches recorded on meta tensors for an sm_90 GPU (with no launch of
    _forgetting_kernel, and the ordered walk reading the heads late: SKIP = 2), then its WY launch run
    by the interpreter on these inputs, with the heads and without. Heads: three that forget, one
    whose last warm-up holds a beta past 2 (q/k head 0's value heads marked 1, 0: still counted);
    a WY program takes a q/k head's two value heads, or one (its count then one of two)."""
    import gdn.ops.triton.forward as forward
    import gdn.ops.triton.plan as planning
    import gdn.ops.triton.walk_gluon as walk_gluon
    import gdn.ops.triton.walk_gluon_t as walk_gluon_t
    from tests.ops.triton.launches import spy_launches
    monkeypatch.setattr(planning, "triton_interpreting", lambda: False)
    monkeypatch.setattr(planning, "_tma_ready", lambda *tensors: True)
    monkeypatch.setattr(planning, "num_sms", lambda device: 132)           # an H200's: the walk beside the WY pass
    # (Where the walks take the heads, by name: read before the spies stand in for the kernels.)
    skip = walk_gluon.walk_gluon_kernel.arg_names.index("skip")
    chosen = walk_gluon_t.walk_t_kernel.arg_names.index("seg_heads")
    seen = []
    for module, name in ((forward, "wy_kernel"), (walk_gluon, "walk_gluon_kernel"), (walk_gluon_t, "walk_t_kernel"),
                         (forward, "_chunk_fwd_kernel"),
                         (split_walk, "_forgetting_kernel")):
        spy_launches(monkeypatch, name, lambda grid, args, kw, name=name: seen.append((name, grid, args, kw)),
                     run=False, module=module)
    B, T, H, HV, K, V, bt = 1, 18 * 64, 2, 4, 128, 64, 64
    meta = dict(q=torch.empty(B, T, H, K, dtype=torch.bfloat16, device="meta"),
                v=torch.empty(B, T, HV, V, dtype=torch.bfloat16, device="meta"),
                g=torch.empty(B, T, HV, device="meta"), beta=torch.empty(B, T, HV, device="meta"))

    def record(t):
        """The call's launches (into seen) on meta tensors t, the heads asked of the WY pass."""
        forward.triton_forward(t["q"], t["q"], t["v"], t["g"], t["beta"], scale=K ** -0.5, use_qk_l2norm=True,
                               output_final_state=True, operands="fp16", split_walk="auto", split_warmup=2,
                               split_heads_in="wy", walk="gluon", pieces=2,      # (as from 256 chunks on)
                               wy_heads=wy_heads)
    record(meta)
    assert [name for name, *_ in seen] == ["wy_kernel", "walk_gluon_kernel", "walk_t_kernel"]
    _, grid, args, kw = seen[0]
    assert kw["FORGET"] and seen[1][3]["SKIP"] == 2 and seen[2][3]["CHOSEN"]
    from gdn.ops.triton.wy import wy_kernel
    params = wy_kernel.arg_names
    at = {name: args[i] for i, name in enumerate(params[:len(args)])}
    P, L, W, L0 = (at[name] for name in ("FORGET_P", "FORGET_L", "FORGET_W", "FORGET_L0"))
    assert P >= 3 and W == 2 and at["heads"] is seen[1][2][skip] and at["heads"] is seen[2][2][chosen]

    torch.manual_seed(0)
    g = torch.full((B, T, HV), -2.0)
    beta = torch.rand(B, T, HV) * 2
    beta[0, (L0 + (P - 2) * L) * bt - 5, 1] = 2.5              # in the last warm-up: not chosen
    real = {id(meta["q"]): torch.randn(B, T, H, K).bfloat16(), id(meta["v"]): torch.randn(B, T, HV, V).bfloat16(),
            id(meta["g"]): g, id(meta["beta"]): beta}

    def run(forget):
        made = [real.get(id(a), torch.zeros(a.shape, dtype=a.dtype)) if isinstance(a, torch.Tensor) else a
                for a in args]
        # Poisoned (the launcher zeroes them): the interpreter runs the chunk-0 programs, which mark
        # the heads, before any other, so no later program reads the poison.
        made[params.index("heads")] = torch.full((B * HV,), -1, dtype=torch.int32)
        wy_kernel[grid](*made, **dict(kw, FORGET=forget))
        return made

    marked, plain = run(True), run(False)
    heads = marked[params.index("heads")]
    assert heads.tolist() == _forgetting_reference(g, beta, P, L, W, L0, BT=bt).tolist() == [1, 0, 1, 1]
    # The counts (at each q/k head's first value head): past the first group of chunks none for q/k
    # head 1, whose value heads are both marked (the ordered walk returns for them after that group).
    counts = plain[params.index("done")].clone()
    assert counts[:, :, 2].min() > 0 and counts.shape[1] > 1
    counts[:, 1:, 2] = 0
    assert torch.equal(marked[params.index("done")], counts)
    for name, a, b in zip(params, marked, plain):
        if isinstance(a, torch.Tensor) and name not in ("heads", "done"):
            assert torch.equal(a, b), name
    # Two sequences: the heads from their own kernel (a later sequence's walk programs would wait for
    # its first counts beside the first sequence's WY programs).
    seen.clear()
    record({name: torch.empty((2, *t.shape[1:]), dtype=t.dtype, device="meta") for name, t in meta.items()})
    assert [name for name, *_ in seen] == ["wy_kernel", "_forgetting_kernel", "walk_gluon_kernel", "walk_t_kernel"]
    assert not seen[0][3]["FORGET"] and seen[2][3]["SKIP"] == 1


def test_posterior_segments():
    """The posterior check's segments: at most P, segment 0 longer than the others by about
    POSTERIOR_LEAD warm-ups, every chunk in one segment, each at least a warm-up long; fewer where
    P do not fit, none where two do not."""
    assert split_walk.posterior_segments(512, 4) == (4, 140, 124)            # B1 x T32k: 140 + 3 x 124
    assert split_walk.posterior_segments(2048, 4) == (4, 524, 508)
    for NT, P, W in [(512, 4, 24), (33, 4, 4), (100, 8, 12), (70, 2, 24), (30, 5, 3), (60, 8, 12)]:
        P_s, L0, L = split_walk.posterior_segments(NT, P, W)
        lead = round(split_walk.POSTERIOR_LEAD * W)
        assert 1 < P_s <= P and L0 + (P_s - 1) * L == NT and L >= W and L0 >= W
        assert lead - P_s < L0 - L <= lead
    assert split_walk.posterior_segments(60, 8, 12)[0] == 4              # 8 segments would be shorter than W
    assert split_walk.posterior_segments(40, 4, 24) == (1, 40, 40)
    with pytest.raises(ValueError, match="at least one chunk"):
        split_walk.posterior_segments(100, 4, 0)


def test_bounds_check_refuses_a_segment_past_the_end():
    """split_walk.certified (what walk_gluon_t's SPLIT 1 and 2 trust): a segment that starts past the
    sequence's last chunk, or no segments: a ValueError before anything is formed."""
    v = torch.zeros(1, 10 * BT, 2, 8, device=DEVICE)
    g = beta = torch.zeros(1, 10 * BT, 2, device=DEVICE)
    assert split_walk.certified(4, 3, 2, v, g, beta, None, 8, BT, 8).P == 4       # the last from chunk 9 of 10
    for P, L in [(4, 4), (11, 1), (0, 4), (2, 0)]:
        with pytest.raises(ValueError, match="the bounds' check needs"):
            split_walk.certified(P, L, 2, v, g, beta, None, 8, BT, 8)


def test_posterior_refuses_other_geometries():
    """split_walk.posterior (what walk_gluon_t's SPLIT 3 and 4 trust): segments that do not tile the
    sequence, a segment shorter than its warm-up, one segment, or a warm-up past the margin's
    POSTERIOR_MAX_WARMUP: a ValueError before anything is allocated."""
    g = beta = torch.zeros(1, 40 * BT, 2, device=DEVICE)
    split_walk.posterior(4, 13, 9, 4, g, beta, 8, 8, BT, 8)                # 13 + 3 x 9 = 40 chunks
    for P, L0, L, W in [(4, 13, 9, 0), (4, 12, 9, 4), (4, 13, 9, 10), (4, 4, 12, 5), (1, 40, 40, 4),
                        (2, 45, 45, 41)]:
        with pytest.raises(ValueError, match="the posterior check needs"):
            split_walk.posterior(P, L0, L, W, g, beta, 8, 8, BT, 8)


def _record_walks(monkeypatch, T, l2norm=True, **kw):
    """The kernels one call of the launcher's defaults would launch at B = 1, 1 x 1 heads of 128 x 64
    (recorded, not run: meta tensors, the interpreter's 4 SMs), as [(kernel, constexprs)]. With
    operands="fp16", which a GPU's 132 SMs choose at 32 value heads, and 4 SMs at one would not."""
    import gdn.ops.triton.forward as forward
    import gdn.ops.triton.plan as planning
    import gdn.ops.triton.walk_gluon as walk_gluon
    import gdn.ops.triton.walk_gluon_t as walk_gluon_t
    from tests.ops.triton.launches import spy_launches
    monkeypatch.setattr(planning, "triton_interpreting", lambda: False)
    monkeypatch.setattr(planning, "_tma_ready", lambda *tensors: True)     # as torch allocates them on sm_90
    seen = []
    for module, name in ((forward, "wy_kernel"), (walk_gluon, "walk_gluon_kernel"), (walk_gluon_t, "walk_t_kernel"),
                         (forward, "_chunk_fwd_kernel"),
                         (split_walk, "_forgetting_kernel"), (split_walk, "_keys_grow_kernel"),
                         (split_walk, "_chunk_growth_kernel"),
                         (split_walk, "_segment_bounds_kernel")):
        spy_launches(monkeypatch, name, lambda grid, args, kw, name=name: seen.append((name, kw)), run=False,
                     module=module)
    q = torch.empty(1, T, 1, 128, dtype=torch.bfloat16, device="meta")
    v = torch.empty(1, T, 1, 64, dtype=torch.bfloat16, device="meta")
    g = torch.zeros(1, T, 1, device="meta")
    forward.triton_forward(q, q, v, g, g, scale=0.125, use_qk_l2norm=l2norm, output_final_state=True,
                           operands="fp16", **kw)
    return seen


def test_automatic_split_routing(monkeypatch):
    """The defaults at B = 1 from AUTO_MIN_CHUNKS chunks on: the WY pass with its counts, the heads'
    choice, the ordered walk beside it skipping the chosen heads, and the split for the chosen heads
    only: its walk and posterior check in one launch (SPLIT 5) below ONE_LAUNCH_BELOW chunks, else
    (or with split_launches=2) the walk, then the check (SPLIT 3, 4). With split_check="bounds"
    the bounds' two kernels come after the ordered walk (whose programs they would crowd out), then
    the warm-ups and the segments (SPLIT 1, 2). The forced split (every head) takes the posterior
    check too. Shorter sequences and split_walk=False keep the ordered walk alone, "auto" splits
    them too. Without l2norm the heads' choice also reads the warm-ups' keys (the certificate's
    contraction needs beta |k|^2 <= 2: _keys_grow_kernel first), with the posterior check only: with
    split_check="bounds" (its bound takes unit keys) every head walks in order."""
    T = split_walk.AUTO_MIN_CHUNKS * 64
    names = lambda seen: [name for name, _ in seen]
    seen = _record_walks(monkeypatch, T, split_launches=2)
    assert names(seen) == ["wy_kernel", "_forgetting_kernel", "walk_gluon_kernel", "walk_t_kernel", "walk_t_kernel"]
    kws = dict(seen)
    assert kws["wy_kernel"]["SIGNAL"] and kws["walk_gluon_kernel"]["SKIP"] and kws["walk_gluon_kernel"]["WAIT"]
    assert [kw["SPLIT"] for name, kw in seen if name == "walk_t_kernel"] == [3, 4]
    assert all(kw["CHOSEN"] and not kw["WAIT"] for name, kw in seen if name == "walk_t_kernel")
    bounds = _record_walks(monkeypatch, T, split_check="bounds")
    assert names(bounds) == ["wy_kernel", "_forgetting_kernel", "walk_gluon_kernel", "_chunk_growth_kernel",
                             "_segment_bounds_kernel", "walk_t_kernel", "walk_t_kernel"]
    assert [kw["SPLIT"] for name, kw in bounds if name == "walk_t_kernel"] == [1, 2]
    assert all(kw["CHOSEN"] and not kw["WAIT"] for name, kw in bounds if name == "walk_t_kernel")
    forced = _record_walks(monkeypatch, T, split_walk=True, walk="gluon_t", block_v=64, walk_stages=1,
                           split_launches=2)
    assert names(forced) == ["wy_kernel", "_forgetting_kernel", "walk_t_kernel", "walk_t_kernel"]
    assert [kw["SPLIT"] for name, kw in forced if name == "walk_t_kernel"] == [3, 4]
    assert not any(kw["CHOSEN"] for name, kw in forced if name == "walk_t_kernel")
    one = _record_walks(monkeypatch, T)                   # the default below ONE_LAUNCH_BELOW chunks: one launch
    assert names(one) == names(seen)[:-1] and [kw["SPLIT"] for name, kw in one if name == "walk_t_kernel"] == [5]
    for chunks, launches in ((split_walk.ONE_LAUNCH_BELOW - 1, [5]), (split_walk.ONE_LAUNCH_BELOW, [3, 4])):
        longer = _record_walks(monkeypatch, chunks * 64)
        assert [kw["SPLIT"] for name, kw in longer if name == "walk_t_kernel"] == launches, chunks
    for unsplit in (_record_walks(monkeypatch, T, split_walk=False), _record_walks(monkeypatch, T, split_walk=0)):
        assert names(unsplit) == ["wy_kernel", "walk_gluon_kernel"] and not dict(unsplit)["walk_gluon_kernel"]["SKIP"]
    # Shorter sequences take the Triton walk (the Gluon one from 256 chunks: plan_forward's walk), unsplit;
    # "auto" splits wherever the Gluon walk runs.
    assert names(_record_walks(monkeypatch, T - 64)) == ["wy_kernel", "_chunk_fwd_kernel"]
    assert names(_record_walks(monkeypatch, T - 64, split_walk="auto")) == ["wy_kernel", "_chunk_fwd_kernel"]
    assert names(_record_walks(monkeypatch, T // 2, split_walk="auto", walk="gluon")) == names(one)
    unnormalised = _record_walks(monkeypatch, T, l2norm=False)
    assert names(unnormalised) == ["wy_kernel", "_keys_grow_kernel", "_forgetting_kernel", "walk_gluon_kernel",
                                   "walk_t_kernel"]
    assert dict(unnormalised)["_forgetting_kernel"]["KEYS"] and not dict(one)["_forgetting_kernel"]["KEYS"]
    for ordered in (_record_walks(monkeypatch, T, l2norm=False, split_check="bounds"),
                    _record_walks(monkeypatch, T, l2norm=False, split_heads_in="wy")):
        assert names(ordered) == ["wy_kernel", "walk_gluon_kernel"]
        assert dict(ordered)["walk_gluon_kernel"]["WAIT"] and not dict(ordered)["walk_gluon_kernel"]["SKIP"]


def test_automatic_split_routing_under_graph_capture(monkeypatch):
    """While a CUDA graph is being captured no walk waits on the WY pass's counts (a graph may start
    two streams' kernels in either order): the WY pass without them, then the heads' choice, the
    ordered walk skipping the chosen heads at once (SKIP 1) and the chosen heads' segments, both
    after it. Without the split (split_walk=False, packed sequences), the Gluon walk alone after the
    WY pass."""
    import gdn.ops.triton.plan as planning
    monkeypatch.setattr(planning, "stream_capturing", lambda q: True)
    T = split_walk.AUTO_MIN_CHUNKS * 64
    captured = _record_walks(monkeypatch, T)
    assert [name for name, _ in captured] == ["wy_kernel", "_forgetting_kernel", "walk_gluon_kernel", "walk_t_kernel"]
    kws = dict(captured)
    assert not kws["wy_kernel"]["SIGNAL"] and kws["walk_gluon_kernel"]["SKIP"] == 1
    assert not kws["walk_gluon_kernel"]["WAIT"] and kws["walk_t_kernel"]["CHOSEN"]
    unsplit = _record_walks(monkeypatch, T, split_walk=False)
    assert [name for name, _ in unsplit] == ["wy_kernel", "walk_gluon_kernel"]
    assert not dict(unsplit)["walk_gluon_kernel"]["WAIT"] and not dict(unsplit)["walk_gluon_kernel"]["SKIP"]
    monkeypatch.setattr(planning, "num_sms", lambda device: 132)         # (two sequences' walk programs: flags fit)
    packed = _record_walks(monkeypatch, T, cu_seqlens=torch.empty(3, dtype=torch.int32, device="meta"))
    assert [name for name, _ in packed] == ["wy_kernel", "walk_gluon_kernel"]       # (the split is a dense one's)
    assert not dict(packed)["walk_gluon_kernel"]["SKIP"]


def test_split_walk_refusals(monkeypatch):
    """split_walk outside what it does: a ValueError that names it (meta tensors: before any launch):
    another walk, packed sequences, a dense batch whose chunks read the next sequence's rows, bad
    segment or warm-up counts, no l2norm (the certificate takes unit keys)."""
    import gdn.ops.triton.forward as forward
    import gdn.ops.triton.plan as planning
    monkeypatch.setattr(planning, "triton_interpreting", lambda: False)
    monkeypatch.setattr(planning, "_tma_ready", lambda *tensors: True)     # as torch allocates them on sm_90

    def call(B=2, T=128, l2norm=True, **kw):
        q = torch.empty(B, T, 1, 64, dtype=torch.bfloat16, device="meta")
        v = torch.empty(B, T, 2, 64, dtype=torch.bfloat16, device="meta")
        g = torch.zeros(B, T, 2, device="meta")
        return forward.triton_forward(q, q, v, g, g, scale=0.125, use_qk_l2norm=l2norm, **kw)
    gluon_t = dict(walk="gluon_t", operands="fp16", block_v=64, walk_stages=1)
    with pytest.raises(ValueError, match="split_walk .* takes walk='gluon_t'"):
        call(walk="triton", split_walk=True)
    for split in (True, 2):
        with pytest.raises(ValueError, match="split_walk .* needs use_qk_l2norm=True"):
            call(split_walk=split, l2norm=False, **gluon_t)
    with pytest.raises(ValueError, match="split_walk .* cu_seqlens"):
        call(B=1, cu_seqlens=torch.tensor([0, 50, 128], device="meta"), split_walk=2, **gluon_t)
    with pytest.raises(ValueError, match="split_walk .* B=2, T=100"):
        call(T=100, split_walk=2, **gluon_t)
    for bad in (-1, "on", 2.5):
        with pytest.raises(ValueError, match="split_walk must be None or 'auto'"):
            call(split_walk=bad, **gluon_t)
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match="split_warmup must be an int of at least 1"):
            call(split_walk=2, split_warmup=bad, **gluon_t)
    with pytest.raises(ValueError, match="split_beside=True needs split_walk"):
        call(split_beside=True, **gluon_t)
    for bad in (None, True, -1.5):
        with pytest.raises(ValueError, match="bounds_priority must be an int"):
            call(bounds_priority=bad, **gluon_t)
    with pytest.raises(ValueError, match="split_check must be None, 'bounds' or 'posterior', got 'prior'"):
        call(split_check="prior", **gluon_t)
    with pytest.raises(ValueError, match="split_beside=True takes split_check='bounds'"):
        call(split_walk=2, split_beside=True, split_check="posterior", **gluon_t)
    with pytest.raises(ValueError, match="split_warmup must be at most 40 chunks with split_check='posterior'"):
        call(split_walk=2, split_warmup=41, **gluon_t)


def _split_call(gate, T, seed, B=1, V=64, h0=True, long_heads=0, big_beta=None, edit=None, **kw):
    """The split walk against the float64 reference and the Triton walk (4 value heads; the first
    long_heads with g = 0; big_beta (token, head): that beta 2.5; edit(v, g, beta, S0) changes the
    inputs in place): the fp16 walk's comparisons' inputs, and the certificates' outcomes."""
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = random_inputs(B, T, 2, 4, 64, V, dtype=torch.bfloat16, gate=gate, initial_state=h0,
                                         seed=seed, device="cuda")
    g[:, :, :long_heads] = 0.0
    if big_beta is not None:
        beta[:, big_beta[0], big_beta[1]] = 2.5
    if edit is not None:
        edit(v, g, beta, S0)
    call = dict(scale=64 ** -0.5, initial_state=S0, output_final_state=True, use_qk_l2norm=True)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    o, S = triton_forward(q, k, v, g, beta, out=torch.full_like(v, float("nan")), walk="gluon_t", block_v=64,
                          walk_stages=1, operands="fp16", **call, **kw)
    ok = split_walk.last_outcome                       # (read before the next call resets it)
    o_t, S_t = triton_forward(q, k, v, g, beta, walk="triton", num_segments=1, **call)
    return (o, S, o_ref, S_ref, o_t, S_t), ok


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
@pytest.mark.parametrize("beside", [False, True])                         # after the WY pass, or beside it
@pytest.mark.parametrize("B, T, V, h0", [(1, 2048, 64, True), (1, 2085, 64, True), (1, 2048, 128, False),
                                         (2, 2048, 64, True)])
def test_split_walk_certified(B, T, V, h0, beside):
    """Gates that forget within a few chunks (mean g ~ -0.17, so -43 over a warm-up of four chunks):
    every later segment certifies its warm-up (seg_ok 1), and the whole call matches the reference
    and the Triton walk as the sequential walk does; no output row left unwritten (NaN-poisoned).
    T = 2085 ends in a partial chunk; V = 128 has two programs a head; without h0 segment 0 starts
    from zeros; B = 2 has two sequences' segments. After the WY pass and beside it (split_beside: the
    segments' chunks formed in the feed order, the walk waiting on their counts)."""
    results, ok = _split_call("normal", T, seed=T + V, B=B, V=V, h0=h0, split_walk=4, split_warmup=4,
                              split_beside=beside, split_check="bounds")
    assert_fp16_walk_close(*results)
    assert ok.shape == (4, B * 4, V // 64) and (ok[1:] == 1).all() and (ok[0] == 0).all()


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
def test_split_walk_hands_over():
    """Long memory (g = 0): no warm-up certifies (seg_ok 0), each segment waits for the one before's
    final state, and the result is still the reference's; heads of both kinds in one launch; and a
    warm-up that reaches the sequence's start starts from h0 (seg_ok 2)."""
    results, ok = _split_call("zero", 1024, seed=5, split_walk=4, split_warmup=2, split_check="bounds")
    assert_fp16_walk_close(*results)
    assert (ok[1:] == 0).all()
    results, ok = _split_call("normal", 2048, seed=7, long_heads=2, split_walk=4, split_warmup=4, split_check="bounds")
    assert_fp16_walk_close(*results)
    assert (ok[1:, :2] == 0).all() and (ok[1:, 2:] == 1).all()
    results, ok = _split_call("zero", 1024, seed=6, split_walk=4, split_warmup=8,      # warm-ups of 8, segments of 4
                              split_check="bounds")
    assert_fp16_walk_close(*results)
    assert (ok[1:3] == 2).all() and (ok[3] == 0).all()
    results, ok = _split_call("zero", 1024, seed=8, split_walk=4, split_warmup=2, split_beside=True)   # beside WY
    assert_fp16_walk_close(*results)
    assert (ok[1:] == 0).all()


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
@pytest.mark.parametrize("launches", [2, 1])
@pytest.mark.parametrize("B, T, V, h0", [(1, 2048, 64, True), (1, 2085, 64, True), (1, 2048, 128, False),
                                         (2, 2048, 64, True)])
def test_posterior_split_certified(B, T, V, h0, launches):
    """The posterior check (split_check="posterior", SPLIT 3 then 4, or both in one launch: 5) with
    gates that forget within a few chunks: every later segment's warm-up certified against the segment
    before's checkpoint (seg_ok 1; segment 0 exact, 2), the reference's and the Triton walk's result,
    every output row written (NaN-poisoned). The shapes of test_split_walk_certified (segments 8 + 3 x 8
    chunks)."""
    results, ok = _split_call("normal", T, seed=T + V + 1, B=B, V=V, h0=h0, split_walk=4, split_warmup=4,
                              split_check="posterior", split_launches=launches)
    assert_fp16_walk_close(*results)
    assert ok.shape == (4, B * 4, V // 64) and (ok[1:] == 1).all() and (ok[0] == 2).all()


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
@pytest.mark.parametrize("launches", [2, 1])
def test_posterior_split_walks_again(launches):
    """Where the posterior check fails, the segment is walked again from the one before's final state
    (seg_ok 0), in order, and the result is still the reference's: long memory (g = 0) on every
    head; two long-memory heads beside two that forget; a beta of 2.5 in one warm-up (head 3: its
    map may grow the state, so that head certifies nothing)."""
    results, ok = _split_call("zero", 1024, seed=5, split_walk=4, split_warmup=2, split_check="posterior",
                              split_launches=launches)
    assert_fp16_walk_close(*results)
    assert (ok[1:] == 0).all() and (ok[0] == 2).all()
    results, ok = _split_call("normal", 2048, seed=7, long_heads=2, split_walk=4, split_warmup=4,
                              split_check="posterior", split_launches=launches)
    assert_fp16_walk_close(*results)
    assert (ok[1:, :2] == 0).all() and (ok[1:, 2:] == 1).all()
    results, ok = _split_call("normal", 2048, seed=9, big_beta=(13 * 64 + 5, 3), split_walk=4, split_warmup=4,
                              split_check="posterior", split_launches=launches)   # segment 2's warm-up: chunks 12 .. 15
    assert_fp16_walk_close(*results)
    assert (ok[1:, 3] == 0).all() and (ok[1:, :3] == 1).all()


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
def test_posterior_split_checks_each_head_against_its_own_segment():
    """Heads of very different scales side by side: head 0's values are zero (its states, and so its
    checkpoints' norms, are zero), head 1 has long memory (g = 0) and values of order 1, heads 2
    and 3 forget. Each segment must be checked against its own head's previous segment: head 1's
    then fail (walked again, seg_ok 0) and the result is the reference's. (A check that read a
    neighbouring record would certify head 1 against head 0's zeros: an error of order one.) B = 2
    puts the heads of two sequences side by side as well."""
    def edit(v, g, beta, S0):
        v[:, :, 0] = 0.0
        g[:, :, 1] = 0.0
        if S0 is not None:
            S0[:, 0] = 0.0
    results, ok = _split_call("normal", 2048, seed=13, B=2, edit=edit, split_walk=4, split_warmup=4,
                              split_check="posterior")
    assert_fp16_walk_close(*results)
    ok = ok.view(4, 2, 4, -1)                      # [segments, sequences, heads, column blocks]
    assert (ok[1:, :, 1] == 0).all() and (ok[1:, :, 2:] == 1).all() and (ok[0] == 2).all()


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
@pytest.mark.parametrize("gate", ["normal", "zero"])
def test_split_walk_beside_segments_from_the_sm_count(gate):
    """split_walk=True, split_beside=True: the segments from the SM count (beside_segments: 32 value
    heads of 64 columns, two segments of 48 chunks at 96 chunks, warm-ups of 24), the flag group
    aligned to them; certified or handed over, the reference's result."""
    from gdn.ops.triton import triton_forward
    q, k, v, g, beta, S0 = random_inputs(1, 96 * 64, 16, 32, 64, 64, dtype=torch.bfloat16, gate=gate,
                                         initial_state=True, seed=11, device="cuda")
    call = dict(scale=64 ** -0.5, initial_state=S0, output_final_state=True, use_qk_l2norm=True)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    o, S = triton_forward(q, k, v, g, beta, out=torch.full_like(v, float("nan")), walk="gluon_t", block_v=64,
                          walk_stages=1, operands="fp16", split_walk=True, split_beside=True, **call)
    ok = split_walk.last_outcome                       # (read before the next call resets it)
    o_t, S_t = triton_forward(q, k, v, g, beta, walk="triton", **call)
    assert_fp16_walk_close(o, S, o_ref, S_ref, o_t, S_t)
    assert ok.shape == (2, 32, 1) and (ok[1] == (1 if gate == "normal" else 0)).all()


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
@pytest.mark.parametrize("check, heads_in", [("bounds", "kernel"), ("posterior", "kernel"), ("posterior", "wy")])
@pytest.mark.parametrize("h0", [True, False])
def test_automatic_split_on_mixed_heads(h0, check, heads_in):
    """The automatic split (split_walk="auto": at any length; the default's from AUTO_MIN_CHUNKS
    chunks on) at 256 chunks plus 37 tokens (a partial last chunk), 4 value heads of 128 x 128, the
    first two with long memory (g = 0): those walk in order beside the WY pass, the others in
    certified segments after it (5 segments of 52 chunks); the reference's result and the Triton
    walk's, every output row written (NaN-poisoned). operands="fp16": at 4 value heads the defaults
    would take the segment maps' walk instead (at 32 heads, the bench's, fp16). With the posterior
    check: segments of 65 + 4 x 48 chunks, segment 0 exact (seg_ok 2). With the heads marked by the WY
    pass (split_heads_in="wy"), bit for bit the result of their own kernel's (gates far from the
    threshold, where the two kernels' sums of a warm-up's log-decays might round apart)."""
    from gdn.ops.triton import triton_forward
    T = 256 * 64 + 37
    q, k, v, g, beta, S0 = random_inputs(1, T, 2, 4, 128, 128, dtype=torch.bfloat16, gate="normal",
                                         initial_state=h0, seed=31, device="cuda")
    g[:, :, :2] = 0.0
    call = dict(scale=128 ** -0.5, initial_state=S0, output_final_state=True, use_qk_l2norm=True)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0, use_qk_l2norm=True)
    split_walk.last_heads = None
    o, S = triton_forward(q, k, v, g, beta, out=torch.full_like(v, float("nan")), operands="fp16", split_walk="auto",
                          split_check=check, split_heads_in=heads_in, **call)
    heads, ok = split_walk.last_heads, split_walk.last_outcome     # (the next call resets them)
    if heads_in == "wy":
        o_k, S_k = triton_forward(q, k, v, g, beta, operands="fp16", split_walk="auto", split_check=check, **call)
        assert torch.equal(o, o_k) and torch.equal(S, S_k)
    o_t, S_t = triton_forward(q, k, v, g, beta, walk="triton", num_segments=1, **call)
    assert_fp16_walk_close(o, S, o_ref, S_ref, o_t, S_t)
    assert heads.tolist() == [0, 0, 1, 1]
    assert ok.shape == (5, 4, 2) and (ok[1:, 2:] == 1).all()
    assert (ok[:, :2] == 0).all()                 # the long-memory heads' programs returned at once (CHOSEN)
    if check == "posterior":
        assert (ok[0, 2:] == 2).all()


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
def test_automatic_split_without_l2norm():
    """Without l2norm the automatic split reads the warm-ups' keys too: as test_automatic_split_on_mixed_heads
    (heads 0 and 1 long memory, posterior check), with q and k as given (keys of norm ~1) and one key
    of segment 1's warm-up (chunk 50) made 3 times longer, where value head 2 reads it with beta 0.1
    (beta |k|^2 ~0.9: still chosen) and head 3 with beta 0.9 (~8: its map may grow the state, so it
    walks in order). The reference's result and the Triton walk's, every output row written."""
    from gdn.ops.triton import triton_forward
    T = 256 * 64 + 37
    q, k, v, g, beta, S0 = random_inputs(1, T, 2, 4, 128, 128, dtype=torch.bfloat16, gate="normal",
                                         initial_state=True, seed=33, device="cuda")
    g[:, :, :2] = 0.0
    k[0, 50 * 64 + 5, 1] *= 3
    beta[0, 50 * 64 + 5, 2:] = torch.tensor([0.1, 0.9])
    call = dict(scale=128 ** -0.5, initial_state=S0, output_final_state=True)
    o_ref, S_ref = reference_gdn(q, k, v, g, beta, initial_state=S0)
    split_walk.last_heads = None
    o, S = triton_forward(q, k, v, g, beta, out=torch.full_like(v, float("nan")), operands="fp16", split_walk="auto",
                          **call)
    heads, ok = split_walk.last_heads, split_walk.last_outcome
    o_t, S_t = triton_forward(q, k, v, g, beta, walk="triton", num_segments=1, **call)
    assert_fp16_walk_close(o, S, o_ref, S_ref, o_t, S_t)
    assert heads.tolist() == [0, 0, 1, 0]
    assert (ok[1:, 2] == 1).all() and (ok[:, 3] == 0).all()


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
@pytest.mark.parametrize("check", ["bounds", "posterior"])
def test_split_walk_replays_from_a_cuda_graph(check):
    """The split captured in a CUDA graph (its bounds then in order on the caller's stream, not on a
    side stream) and replayed on fresh inputs: bit for bit the eager call's outputs, every row written."""
    from gdn.ops.triton import triton_forward
    inputs = random_inputs(1, 2048, 2, 4, 64, 64, dtype=torch.bfloat16, gate="normal", initial_state=True, seed=21,
                           device="cuda")
    fresh = random_inputs(1, 2048, 2, 4, 64, 64, dtype=torch.bfloat16, gate="normal", initial_state=True, seed=22,
                          device="cuda")
    static = [x.clone() for x in inputs]
    out = torch.empty_like(static[2])
    kw = dict(scale=64 ** -0.5, output_final_state=True, use_qk_l2norm=True, walk="gluon_t", block_v=64,
              walk_stages=1, operands="fp16", split_walk=4, split_warmup=4, split_check=check, out=out)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        triton_forward(*static[:5], initial_state=static[5], **kw)          # compiles outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o_g, S_g = triton_forward(*static[:5], initial_state=static[5], **kw)
    for x, y in zip(static, fresh):
        x.copy_(y)
    out.fill_(float("nan"))
    graph.replay()
    o_e, S_e = triton_forward(*fresh[:5], initial_state=fresh[5], **{**kw, "out": None})
    assert (split_walk.last_outcome[1:] == 1).all()
    assert torch.equal(o_g, o_e) and torch.equal(S_g, S_e)


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the kernel's wgmma; Gluon has no interpreter)")
@pytest.mark.parametrize("check", ["bounds", "posterior"])
def test_automatic_split_replays_from_a_cuda_graph(check):
    """The automatic split captured in a CUDA graph (plan_forward's graph_safe: the WY pass first,
    then the ordered walk of the long-memory heads on a side stream beside the chosen heads' segments)
    and replayed on fresh inputs: bit for bit the eager call's outputs (whose ordered walk runs
    beside the WY pass, waiting on its counts), every row written; value heads 0 and 1 (g = 0) walk
    in order, 2 and 3 in segments. 256 chunks plus 37 tokens, as test_automatic_split_on_mixed_heads."""
    from gdn.ops.triton import triton_forward

    def inputs(seed):
        made = random_inputs(1, 256 * 64 + 37, 2, 4, 128, 128, dtype=torch.bfloat16, gate="normal",
                             initial_state=True, seed=seed, device="cuda")
        made[3][:, :, :2] = 0.0
        return made
    static, fresh = inputs(41), inputs(42)
    out = torch.empty_like(static[2])
    kw = dict(scale=128 ** -0.5, output_final_state=True, use_qk_l2norm=True, operands="fp16", split_walk="auto",
              split_check=check, out=out)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        triton_forward(*static[:5], initial_state=static[5], **kw)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    split_walk.last_heads = None
    with torch.cuda.graph(graph):
        o_g, S_g = triton_forward(*static[:5], initial_state=static[5], **kw)
    heads = split_walk.last_heads                     # (graph_safe's branch: the heads, filled at replay)
    assert heads is not None
    for x, y in zip(static, fresh):
        x.copy_(y)
    out.fill_(float("nan"))
    S_g.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert heads.tolist() == [0, 0, 1, 1]
    o_e, S_e = triton_forward(*fresh[:5], initial_state=fresh[5], **{**kw, "out": None})
    assert torch.equal(o_g, o_e) and torch.equal(S_g, S_e)

"""GPU correctness of backend="triton" against a float64 reference, the registers and spills of every
launched kernel, and a timing table of the launcher's configurations (old and new side by side).

Every check draws fresh random inputs, poisons the output buffer with NaN before the kernel runs,
copies the results on the caller's stream before synchronizing (so a missing stream dependency
shows as NaN), and compares with the float64 chunk algorithm on the same (rounded) inputs (itself checked against the
plain recurrence by the test suite). Run on the GPU machine:
    python benchmarks/gpu_check.py [correct] [kernels] [time] [profile] [once] [host] [stages]   (default: all)
Environment (names of gdn/ops/triton/configs.py, ";"-separated; in the time, once, host and profile
sections also "ab:NAME" or "ab:NAME/<config>", an earlier revision's code beside ours:
benchmarks/snapshots.py, scripts/ab_snapshot.sh):
    GDN_CONFIGS          the configs of the kernels, time and once sections
    GDN_CHECK_CONFIGS    the configs checked at B2 x T300 first in the correct section
    GDN_CHECK_BASE       one config under every check of the correct section
    GDN_CHECK_ONLY       only the checks whose name contains one of these "|"-separated texts
    GDN_TIME_SHAPES      "BxT;varlenT/N" of the time section (GDN_TIME_DTYPE the timing sections'
                         input dtype, default bfloat16; GDN_TIME_ROUNDS its rounds, each config's
                         fastest and slowest printed: an A/B in one run); GDN_HOST_SHAPE "BxT" of
                         the host section;
                         GDN_PROFILE_SHAPES / _CONFIGS of the profile section ("peer:fla",
                         "peer:flashqla" profile a peer), GDN_TIMELINE=1 adds each kernel's start
                         and end in one call; GDN_ONCE the once section's shape; GDN_TIME_HEADS
                         "H,HV" the timing sections' heads (default 16,32)
    GDN_HANG_S           after this many seconds, every thread's Python stack printed and the
                         process ended (hang_guard; benchmarks/gpu_run.sh sets it below its timeout)
"""
from __future__ import annotations

import faulthandler
import os
import sys
import time

import torch
import triton.testing

from gdn import gated_delta_rule
from gdn.cli.bench import parse_shapes, random_cu_seqlens
from gdn.cli.timing import host_ms, random_problem
from gdn.ops.triton import triton_forward
from gdn.ops.triton.configs import CONFIGS, config
from snapshots import resolve                       # (this script's folder is on sys.path)

H, HV, K, V = 16, 32, 128, 128
failures = []


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def reference(q, k, v, g, beta, S0, cu, l2norm=True):
    return gated_delta_rule(q.double(), k.double(), v.double(), g.double(), beta.double(),
                            initial_state=None if S0 is None else S0.double(), output_final_state=True,
                            cu_seqlens=cu, use_qk_l2norm=l2norm, backend="chunk")


# GDN_CHECK_BASE: a config (configs.py) under every check of the correct section, which then checks
# that config's kernels at every shape; a check's own knobs override it.
BASE = config(os.environ["GDN_CHECK_BASE"]) if os.environ.get("GDN_CHECK_BASE") else {}


def check(name, B, T, dtype, *, gates="decaying", cu=None, bound=5e-3, heads=None, graph=False,
          dims=(H, HV, K, V), l2norm=True, resets=None, **kw):
    """One call against the float64 reference. graph: the call is captured in a CUDA graph (after a
    warm-up outside it), the inputs refilled with other random values, the output poisoned, and the
    graph replayed: what is checked is the replay. dims: the problem's H, HV, K, V. l2norm=False:
    unit-norm q and k, called without use_qk_l2norm. resets: g of every 13th token set to this value
    (-inf: a hard reset), so inside chunks and segments (the kernels floor g as they load it, v59)."""
    if not any(text in name for text in os.environ.get("GDN_CHECK_ONLY", "").split("|")):   # GDN_CHECK_ONLY
        return None
    H, HV, K, V = dims
    start = time.perf_counter()                               # (printed: compiles show as seconds)
    seed = int(time.time() * 1e3) % 100000                    # fresh inputs every run

    def problem(seed):
        q, k, v, g, beta = random_problem(B, T, H, HV, K, V, device="cuda", dtype=dtype, gates=gates, seed=seed,
                                          unit_keys=not l2norm)
        if resets is not None:
            g[:, 12::13] = resets
        return q, k, v, g, beta
    q, k, v, g, beta = problem(seed)
    N = B if cu is None else len(cu) - 1
    S0 = torch.randn(N, HV, K, V, device="cuda") * 0.1
    kw = {**BASE, **kw}
    o = torch.full_like(v, float("nan"))

    def call():
        return triton_forward(q, k, v, g, beta, scale=K ** -0.5, initial_state=S0, output_final_state=True,
                              cu_seqlens=cu, use_qk_l2norm=l2norm, out=o, **kw)
    if graph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            call()                                            # compiles and allocates outside the capture
        torch.cuda.current_stream().wait_stream(side)
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            o, S = call()
        for static, new in zip((q, k, v, g, beta), problem(seed + 1)):
            static.copy_(new)
        o.fill_(float("nan"))
        captured.replay()
    else:
        try:
            o, S = call()
        except ValueError as e:        # a knob of GDN_CHECK_BASE that this check's arguments refuse
            if not BASE:
                raise
            print(f"{name:<44} n/a with GDN_CHECK_BASE: {e}", flush=True)
            return None
    # Copied on the caller's stream before any device-wide sync: work queued after the call must see
    # the results (the walk may run on a side stream), or the NaN poison shows up here.
    o, S = o.clone(), S.clone()
    torch.cuda.synchronize()
    finite = bool(torch.isfinite(o).all()) and bool(torch.isfinite(S).all())
    if heads is not None:                                     # long sequences: check a few heads
        sel_qk = torch.tensor(sorted({h // (HV // H) for h in heads}), device="cuda")
        sel_v = torch.tensor(heads, device="cuda")
        q, k = q[:, :, sel_qk], k[:, :, sel_qk]
        v, g, beta, S0 = v[:, :, sel_v], g[:, :, sel_v], beta[:, :, sel_v], S0[:, sel_v]
        o, S = o[:, :, sel_v], S[:, sel_v]
    o_ref, S_ref = reference(q, k, v, g, beta, S0, cu, l2norm)
    eo, es = rel(o, o_ref), rel(S, S_ref)
    ok = finite and eo <= bound and es <= bound
    if not ok:
        failures.append(name)
    print(f"{name:<44} rel err o {eo:.2e}  S {es:.2e}  finite {finite}  {'ok' if ok else 'FAIL'}"
          f"  {time.perf_counter() - start:5.1f} s", flush=True)
    return eo, es


class _Spy:
    """Stands in for a JITFunction and records (name, grid, compiled kernel) of every launch."""

    def __init__(self, fn, log):
        self.fn, self.log = fn, log

    def __getitem__(self, grid):
        launch = self.fn[grid]

        def call(*args, **kw):
            kernel = launch(*args, **kw)
            self.log.append((self.fn.__name__, tuple(grid), kernel))
            return kernel
        return call


def launched_kernels(fn):
    """Run fn() once and return what each Triton kernel it launched was compiled to."""
    import gdn.ops.triton.forward as forward
    names = ("wy_kernel", "_segment_maps_kernel", "_segment_maps_f16_kernel", "_chunk_fwd_kernel")
    saved, log = {n: getattr(forward, n) for n in names}, []
    try:
        for n in names:
            setattr(forward, n, _Spy(saved[n], log))
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    finally:
        for n, f in saved.items():
            setattr(forward, n, f)
    return log


def kernel_line(name, grid, kernel):
    """Registers, spills, shared memory and how many programs of it one SM holds (65536 registers,
    228 KiB of shared memory, 1 KiB of it reserved per program)."""
    regs, warps, smem = kernel.n_regs, kernel.metadata.num_warps, kernel.metadata.shared
    fit = min(65536 // (max(regs, 1) * 32 * warps), (228 * 1024) // (smem + 1024), 32 // warps)
    return (f"    {name:<22}{str(grid):<16} regs {regs:>3}  spills {kernel.n_spills:>4}  smem {smem:>6}"
            f"  warps {warps}  programs/SM {fit}")


def correctness() -> None:
    cu16 = torch.tensor([0, 1000, 1001, 5000, 5000, 12345, 20000, 32768], device="cuda", dtype=torch.int32)
    for vname in os.environ.get("GDN_CHECK_CONFIGS", "default;bf16 parts;bf16 parts&bv64 st1;v4;v3;v2;wy3;bv64 st1;bv32 st2;wy3 + v2 walk;attention walk").split(";"):
        check(f"[{vname}] bf16 B2 T300", 2, 300, torch.bfloat16, **config(vname))
    check("bf16 B2 T300 chunk 16", 2, 300, torch.bfloat16, chunk_size=16)
    check("bf16 B1 T4099 forced 7 segments", 1, 4099, torch.bfloat16, num_segments=7)
    check("bf16 B1 T4099 forced 7 segments, wide blocks", 1, 4099, torch.bfloat16, num_segments=7,
          **CONFIGS["bv64 st1"])
    check("bf16 B1 T32k decaying", 1, 32768, torch.bfloat16)
    check("bf16 B1 T32k long memory", 1, 32768, torch.bfloat16, gates="long")
    check("[split bounds] bf16 B1 T32k decaying", 1, 32768, torch.bfloat16, **CONFIGS["split bounds"])
    # The automatic split (from split_walk.AUTO_MIN_CHUNKS on) at B = 2 and at K = 64 (walk="gluon").
    check("bf16 B2 T32k heads 8/16 decaying (automatic split)", 2, 32768, torch.bfloat16, dims=(8, 16, 128, 128))
    check("bf16 B1 T32k K64 decaying (walk gluon, automatic split)", 1, 32768, torch.bfloat16, walk="gluon",
          dims=(16, 32, 64, 128))
    check("bf16 B8 T4k (wide blocks)", 8, 4096, torch.bfloat16)
    check("fp32 B1 T4099 forced 7 segments", 1, 4099, torch.float32, bound=1e-3, num_segments=7)
    check("fp16 B2 T300", 2, 300, torch.float16)
    check("fp16 B1 T32k long memory", 1, 32768, torch.float16, gates="long")
    check("fp16 B8 T4k (wide blocks)", 8, 4096, torch.float16)
    check("fp16 B2 T300 without the fp16 walk (tf32)", 2, 300, torch.float16, **CONFIGS["v2"])
    check("bf16 varlen 32k in 7 pieces (one empty)", 1, 32768, torch.bfloat16, cu=cu16)
    # Four sequences leave the walk narrow (fused, TMA): descriptors of an empty and a 1-token sequence.
    cu4 = torch.tensor([0, 0, 3000, 3001, 8192], device="cuda", dtype=torch.int32)
    check("bf16 varlen 8k in 4 pieces (one empty, one token), TMA walk", 1, 8192, torch.bfloat16, cu=cu4)
    # The Gluon walk where a sequence's last chunk reads the next sequence's rows (its MASK_ROWS).
    check("[gluon walk] bf16 varlen 32k in 7 pieces (one empty)", 1, 32768, torch.bfloat16, cu=cu16, walk="gluon")
    check("[gluon walk] bf16 B8 T4000 (partial chunks)", 8, 4000, torch.bfloat16, walk="gluon")
    check("bf16 B1 T=2^20 (the default: windows of 2^18), heads 0,1,30,31", 1, 1 << 20, torch.bfloat16,
          heads=[0, 1, 30, 31])
    check("[no windows] bf16 B1 T=2^20, heads 0,1,30,31", 1, 1 << 20, torch.bfloat16, heads=[0, 1, 30, 31],
          **config("no windows"))
    check("bf16 B1 T4099 in 16 pieces (WY beside the walk)", 1, 4099, torch.bfloat16, pieces=16)
    check("bf16 B1 T8192 replayed from a CUDA graph", 1, 8192, torch.bfloat16, graph=True)
    check("bf16 B8 T4k replayed from a CUDA graph (the wide walk: Gluon's)", 8, 4096, torch.bfloat16, graph=True)
    # The graph-safe schedule (v53): the automatic split's two walks after the WY pass, beside each other.
    check("bf16 B1 T32k decaying replayed from a CUDA graph (the split)", 1, 32768, torch.bfloat16, graph=True)
    check("bf16 B1 T32k long memory replayed from a CUDA graph (the ordered walk)", 1, 32768, torch.bfloat16,
          gates="long", graph=True)
    # Two packed sequences x 4 value heads fit the flags' condition: captured, the Gluon walk after the
    # WY pass without the split (a dense sequence's).
    check("bf16 varlen 32k in 2 pieces, 4 value heads, replayed from a CUDA graph", 1, 32768, torch.bfloat16,
          cu=torch.tensor([0, 20000, 32768], device="cuda", dtype=torch.int32), graph=True, dims=(2, 4, K, V))
    check("bf16 B1 T16k replayed from a CUDA graph (Gluon's ordered walk, descriptors made in it)", 1, 16384,
          torch.bfloat16, graph=True, walk_descriptors="kernel", split_walk=False)
    # The automatic split from 256 chunks on (v62), both gates, without l2norm (the keys' kernel) too.
    for gates in ("decaying", "long"):
        check(f"bf16 B1 T16k {gates} (the split from 256 chunks)", 1, 16384, torch.bfloat16, gates=gates)
    check("bf16 B1 T16k decaying, no l2norm (the split from 256 chunks)", 1, 16384, torch.bfloat16, l2norm=False)
    check("bf16 B8 T4k replayed from a CUDA graph (the wide walk, descriptors made in it)", 8, 4096,
          torch.bfloat16, graph=True, walk_descriptors="kernel")
    # Few value heads at B = 1: one segment (the fp16 walk, flags, automatic split) or segments joined
    # by maps, by default on the fp16 walk's operands below 16 sequences x value heads (v57:
    # schedule.walks_one_segment); each also where asked for, and the maps on bf16 parts.
    for gates in ("decaying", "long"):
        check(f"bf16 B1 T32k few heads 4/8 {gates} (one segment)", 1, 32768, torch.bfloat16, gates=gates,
              dims=(4, 8, K, V), num_segments=1)
    check("bf16 B1 T32k few heads 2/4 replayed from a CUDA graph (one segment)", 1, 32768, torch.bfloat16,
          graph=True, dims=(2, 4, K, V), num_segments=1)
    check("bf16 B1 T32k few heads 4/8 long memory, maps P=4 (bf16 parts)", 1, 32768, torch.bfloat16, gates="long",
          dims=(4, 8, K, V), num_segments=4, maps="bf16_parts")
    check("bf16 B1 T32k few heads 1/2 long memory (the maps by default)", 1, 32768, torch.bfloat16, gates="long",
          dims=(1, 2, K, V))
    check("bf16 B1 T16k few heads 2/4 replayed from a CUDA graph (the maps by default)", 1, 16384, torch.bfloat16,
          graph=True, dims=(2, 4, K, V))
    # The segment maps on the fp16 walk's operands (maps="f16", v57): A in two bf16 parts, B in fp32,
    # folded by the fp16 walk; both gates, a CUDA graph, no l2norm, K != V.
    for gates in ("decaying", "long"):
        check(f"bf16 B1 T32k few heads 1/2 {gates}, f16 maps P=16", 1, 32768, torch.bfloat16, gates=gates,
              dims=(1, 2, K, V), num_segments=16, maps="f16")
    check("bf16 B1 T32k few heads 4/8 long memory, f16 maps P=8", 1, 32768, torch.bfloat16, gates="long",
          dims=(4, 8, K, V), num_segments=8, maps="f16")
    check("bf16 B1 T16k few heads 2/4 f16 maps P=8 replayed from a CUDA graph", 1, 16384, torch.bfloat16,
          graph=True, dims=(2, 4, K, V), num_segments=8, maps="f16")
    check("bf16 B1 T32k few heads 1/2 decaying, no l2norm, f16 maps P=16", 1, 32768, torch.bfloat16,
          l2norm=False, dims=(1, 2, K, V), num_segments=16, maps="f16")
    check("bf16 B2 T4099 K64 V128 f16 maps P=4", 2, 4099, torch.bfloat16, dims=(2, 4, 64, 128), num_segments=4,
          maps="f16")
    check("bf16 B1 T32k few heads 1/2 long memory, f16 maps bv64 P=16 ms1", 1, 32768, torch.bfloat16, gates="long",
          dims=(1, 2, K, V), num_segments=16, maps="f16", block_v=64, maps_stages=1)
    with torch.cuda.stream(torch.cuda.Stream()):            # the caller on a stream of its own
        check("bf16 B1 T4099 in 16 pieces, caller's own stream", 1, 4099, torch.bfloat16, pieces=16)
    check("[attention walk] bf16 B1 T32k long memory", 1, 32768, torch.bfloat16, gates="long",
          **CONFIGS["attention walk"])
    check("[v3] bf16 B1 T32k decaying", 1, 32768, torch.bfloat16, **CONFIGS["v3"])
    # Small heads at chunk 64, w as two bf16 parts: where Triton 3.6's ptxas miscompiled the WY
    # pass's u and w products (NOTES.md v14); dims H, HV, K, V.
    for k_dim, v_dim in ((16, 16), (32, 32), (48, 32)):
        check(f"bf16 B1 T4099 K{k_dim} V{v_dim} 2 segments", 1, 4099, torch.bfloat16, num_segments=2,
              dims=(2, 4, k_dim, v_dim))
    check("bf16 B2 T300 K32 V48 factors wu", 2, 300, torch.bfloat16, factors="wu", dims=(2, 4, 32, 48))
    # Without l2norm (unit q and k given): the fp16 walks read them as given, and at B1 x T32k the
    # automatic split checks the warm-ups' keys too (v50).
    check("bf16 B1 T32k decaying, no l2norm", 1, 32768, torch.bfloat16, l2norm=False)
    check("bf16 B8 T4k (wide blocks), no l2norm", 8, 4096, torch.bfloat16, l2norm=False)
    check("bf16 varlen 32k in 7 pieces (one empty), no l2norm", 1, 32768, torch.bfloat16, cu=cu16, l2norm=False)
    check("bf16 B1 T8192 (Triton walk), no l2norm", 1, 8192, torch.bfloat16, l2norm=False)
    check("fp16 B8 T4k (wide blocks), no l2norm", 8, 4096, torch.float16, l2norm=False)
    # fp16 inputs without l2norm are the walks' q and k, no copies (v51): the split and packed sequences too.
    check("fp16 B1 T32k decaying, no l2norm", 1, 32768, torch.float16, l2norm=False)
    check("fp16 varlen 32k in 7 pieces (one empty), no l2norm", 1, 32768, torch.float16, cu=cu16, l2norm=False)
    # g = -inf or -1e3 every 13 tokens: the floor at -128 in every kernel that loads g (v59), on the
    # paths that read it differently: the WY pass and the split's bounds and forgetting kernels, the
    # one-segment walk, the maps (fp16 and bf16 parts), fp32 inputs, a CUDA graph.
    for value in (float("-inf"), -1e3):
        check(f"resets {value:g}: bf16 B1 T32k long memory (the split)", 1, 32768, torch.bfloat16, gates="long",
              resets=value)
        check(f"resets {value:g}: bf16 B1 T32k few heads 1/2 long memory (the maps)", 1, 32768, torch.bfloat16,
              gates="long", dims=(1, 2, K, V), resets=value)
    check("resets -inf: bf16 B1 T32k few heads 4/8, maps P=4 (bf16 parts)", 1, 32768, torch.bfloat16, gates="long",
          dims=(4, 8, K, V), num_segments=4, maps="bf16_parts", resets=float("-inf"))
    check("resets -inf: bf16 B1 T32k few heads 4/8 (one segment)", 1, 32768, torch.bfloat16, gates="long",
          dims=(4, 8, K, V), num_segments=1, resets=float("-inf"))
    check("resets -inf: fp32 B1 T4099 forced 7 segments", 1, 4099, torch.float32, bound=1e-3, num_segments=7,
          resets=float("-inf"))
    check("resets -inf: [bf16 parts] bf16 B2 T300", 2, 300, torch.bfloat16, resets=float("-inf"),
          **config("bf16 parts"))
    check("resets -inf: bf16 B8 T4k (wide blocks), replayed from a CUDA graph", 8, 4096, torch.bfloat16,
          graph=True, resets=float("-inf"))
    check("resets -inf: bf16 varlen 32k in 7 pieces (one empty)", 1, 32768, torch.bfloat16, cu=cu16,
          resets=float("-inf"))


SHAPES = [(1, 32768), (8, 4096)]


def env_shapes(name: str, default: str):
    """[(B, T)] from an environment variable "BxT;BxT" (gdn bench's shape parser, dense shapes)."""
    return [(B, T) for _, B, T, _ in parse_shapes(os.environ.get(name, default).replace(";", ","))]


def selected_configs():
    """{name: (triton_forward, knobs)} of GDN_CONFIGS (default: every config of configs.py)."""
    names = os.environ.get("GDN_CONFIGS")
    return {n: resolve(n) for n in (names.split(";") if names else CONFIGS)}


TIME_DTYPE = os.environ.get("GDN_TIME_DTYPE", "bfloat16")
TIME_L2NORM = os.environ.get("GDN_TIME_L2NORM", "on") == "on"
TIME_HEADS = tuple(int(x) for x in os.environ.get("GDN_TIME_HEADS", f"{H},{HV}").split(","))


def timing_problem(B, T):
    """q, k, v, g, beta of the timing sections: TIME_DTYPE inputs (bf16 unless GDN_TIME_DTYPE says
    otherwise, e.g. float16) at H, HV, K, V of this script; the gates of GDN_TIME_GATES ("decaying",
    the default, or "long": gdn.cli.timing.random_problem's); GDN_TIME_L2NORM=off: unit-norm q and k,
    timed without use_qk_l2norm (`gdn bench --l2norm off`'s regime); GDN_TIME_HEADS "H,HV" the heads
    (default 16,32)."""
    return random_problem(B, T, *TIME_HEADS, K, V, device="cuda", dtype=getattr(torch, TIME_DTYPE),
                          gates=os.environ.get("GDN_TIME_GATES", "decaying"), unit_keys=not TIME_L2NORM)


def forward_call(inputs, variant, cu=None):
    """One forward as the timing sections run it (l2norm unless GDN_TIME_L2NORM=off, final state):
    variant = (triton_forward, knobs) of a config name (snapshots.resolve: ours, or an earlier
    revision's)."""
    q, k, v, g, beta = inputs
    forward, knobs = variant
    return lambda: forward(q, k, v, g, beta, scale=K ** -0.5, output_final_state=True,
                           use_qk_l2norm=TIME_L2NORM, cu_seqlens=cu, **knobs)


def kernels() -> None:
    shapes = SHAPES
    print("\ncompiled kernels (n_regs, n_spills from the driver; programs/SM from registers and shared memory)")
    for cname, variant in selected_configs().items():
        for B, T in shapes:
            if "P=" in cname and B > 1:
                continue
            log = launched_kernels(forward_call(timing_problem(B, T), variant))
            print(f"  {cname} B{B}xT{T}")
            for name, grid, kernel in log:
                print(kernel_line(name, grid, kernel))


def round_orders(names, rounds):
    """The order the configs are timed in each of the time section's rounds: as given, then reversed,
    and so on (A B, B A, A B, ...), so that no config always runs first or right after another's."""
    return [list(names) if r % 2 == 0 else list(reversed(names)) for r in range(rounds)]


def timing() -> None:
    """Median ms of the configs (GDN_CONFIGS) at GDN_TIME_SHAPES ("BxT;BxT", default B1 x T32k and B8 x T4k),
    and after "/" the host's ms a call (Python and launches, measured while the GPU is busy): when it
    nears the first, the launches, not the kernels, set the pace. GDN_TIME_ROUNDS=R (default 1): at
    each shape every config runs on the same inputs, compiled first, then is timed in R rounds in
    alternating orders (round_orders), and printed as "fastest-slowest/host" ms (an A/B in one run:
    NOTES.md v42 had single timings 20-50% off at B1 x T32k, either config, either order)."""
    spec = os.environ.get("GDN_TIME_SHAPES", ";".join(f"{B}x{T}" for B, T in SHAPES))
    shapes = parse_shapes(spec.replace(";", ","))
    rounds = int(os.environ.get("GDN_TIME_ROUNDS", "1"))
    configs = selected_configs()
    print(f"\nconfig timing (fwd, {TIME_DTYPE}, {'l2norm' if TIME_L2NORM else 'unit q, k, no l2norm'}, final state; "
          "median ms of do_bench"
          + (f", the fastest and the slowest of {rounds} rounds" if rounds > 1 else "") + ")")
    cells = {cname: [] for cname in configs}
    for label, B, T, pieces in shapes:
        cu = None if pieces is None else random_cu_seqlens(T, pieces, "cuda")
        inputs = timing_problem(B, T) if rounds > 1 else None        # (one round: each config its own draw)
        ready = {}
        for cname, variant in configs.items():
            if "P=" in cname and (B > 1 or pieces is not None):
                cells[cname].append("-")
                continue
            fn = forward_call(inputs or timing_problem(B, T), variant, cu)
            try:
                fn()
            except ValueError as e:                # a knob this shape refuses (e.g. pieces with varlen)
                print(f"  {cname} at {label}: {e}", flush=True)
                cells[cname].append("n/a")
                continue
            if rounds > 1:
                ready[cname] = fn
            else:
                ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                cells[cname].append(f"{ms:.3f}/{host_ms(fn, 'cuda'):.2f}")
        times = {cname: [] for cname in ready}
        for order in round_orders(list(ready), rounds if ready else 0):
            for cname in order:
                times[cname].append(triton.testing.do_bench(ready[cname], warmup=25, rep=100, return_mode="median"))
        for cname, ms in times.items():
            cells[cname].append(f"{min(ms):.3f}-{max(ms):.3f}/{host_ms(ready[cname], 'cuda'):.2f}")
        for cname in configs:
            print(f"  {label:>14} {cname:<22} {cells[cname][-1]}", flush=True)     # (a run cut short keeps it)
    width = max([15] + [len(c) + 2 for row in cells.values() for c in row])
    print(f"{'config':<22}" + "".join(f"{label:>{width}}" for label, *_ in shapes))
    for cname, row in cells.items():
        print(f"{cname:<22}" + "".join(f"{c:>{width}}" for c in row), flush=True)


def host() -> None:
    """Where the host's time of a call goes (cProfile over 20 calls of each config in GDN_CONFIGS,
    default "default", at GDN_HOST_SHAPE, default 1x32768), measured while the GPU is busy; sorted by
    each of GDN_HOST_SORT's pstats keys (","-separated, default "tottime"), GDN_HOST_LINES lines each."""
    import cProfile
    import pstats
    (B, T), = env_shapes("GDN_HOST_SHAPE", "1x32768")
    inputs = timing_problem(B, T)
    names = os.environ.get("GDN_CONFIGS", "default").split(";")
    for cname in names:
        fn = forward_call(inputs, resolve(cname))
        fn()
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(20):
            fn()
        prof.disable()
        torch.cuda.synchronize()
        print(f"\nhost profile, {cname}, B{B}xT{T}: 20 calls (tottime, cumtime in s)")
        for key in os.environ.get("GDN_HOST_SORT", "tottime").split(","):
            pstats.Stats(prof).sort_stats(key).print_stats(int(os.environ.get("GDN_HOST_LINES", "18")))


def stages() -> None:
    """The host's us a call in each stage of the launcher (perf_counter around the split's and the
    walks' host functions and around every Triton launch; the rest is the launcher's own Python and
    allocations), 20 calls of each config in GDN_CONFIGS at GDN_HOST_SHAPE while the GPU is busy."""
    import gdn.ops.triton.split_walk as split_walk
    import gdn.ops.triton.walk_gluon as walk_gluon
    import gdn.ops.triton.walk_gluon_t as walk_gluon_t
    from compile_report import kernels_swapped          # (this script's folder is on sys.path)
    from gdn.ops.triton.launch import launch
    spent = {}

    def timed(name, fn):
        def run(*args, **kw):
            start = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - start
        return run

    class TimedKernel:
        def __init__(self, name, kernel):
            self.name, self.kernel = name, kernel

        def __getitem__(self, grid):          # (through launch(): direct where the call's knobs say so)
            return timed(f"launch {self.name}", lambda *args, **kw: launch(self.kernel, grid, *args, **kw))

    saved = []
    for m, n in ((split_walk, "forgetting_heads"), (split_walk, "certified"), (split_walk, "posterior"),
                 (walk_gluon, "walk_gluon"),
                 (walk_gluon_t, "walk_gluon_t"), (walk_gluon, "shared_descriptors")):
        saved.append((m, n, getattr(m, n)))
        setattr(m, n, timed(n, getattr(m, n)))
    try:
        (B, T), = env_shapes("GDN_HOST_SHAPE", "1x32768")
        inputs = timing_problem(B, T)
        for cname in os.environ.get("GDN_CONFIGS", "default").split(";"):
            fn = forward_call(inputs, resolve(cname))
            fn()
            torch.cuda.synchronize()
            before = torch.cuda.memory_stats()
            with kernels_swapped(TimedKernel):
                spent.clear()
                start = time.perf_counter()
                for _ in range(20):
                    fn()
                total = time.perf_counter() - start
            torch.cuda.synchronize()
            # (cudaMalloc and the allocator's waits for other streams' events are host time a stage
            # does not show: counted here.)
            grew = {key: torch.cuda.memory_stats()[key] - before[key]
                    for key in ("num_device_alloc", "num_device_free", "num_sync_all_streams")}
            print(f"\nhost stages, {cname}, B{B}xT{T}: {total / 20 * 1e6:.0f} us a call; allocator over the 20"
                  f" calls: {grew}; 10 / 40 calls {host_ms(fn, 'cuda'):.2f} / {host_ms(fn, 'cuda', calls=40):.2f} ms a call")
            for name, t in sorted(spent.items(), key=lambda kv: -kv[1]):
                print(f"  {name:<32} {t / 20 * 1e6:8.1f} us")
    finally:
        for m, n, orig in saved:
            setattr(m, n, orig)


def profile() -> None:
    """Per-kernel CUDA time of the configs in GDN_PROFILE_CONFIGS (default "default") at the shapes in
    GDN_PROFILE_SHAPES (default "1x32768"; "BxT" or "varlenT/pieces" each, gdn bench's varlen lengths);
    a name "peer:fla" or "peer:flashqla" profiles that peer instead (needs scripts/unpack_peers.sh).
    GDN_TIME_L2NORM=off: unit-norm q and k without use_qk_l2norm, for ours and the peers alike."""
    from gdn.cli.peers import available_peers
    for label, B, T, pieces in parse_shapes(os.environ.get("GDN_PROFILE_SHAPES", "1x32768").replace(";", ",")):
        inputs = timing_problem(B, T)
        cu = None if pieces is None else random_cu_seqlens(T, pieces, "cuda")
        for cname in os.environ.get("GDN_PROFILE_CONFIGS", "default").split(";"):
            if cname.startswith("peer:"):
                peer = available_peers("cuda")[cname[5:]]
                fn = lambda: peer(*inputs, scale=K ** -0.5, output_final_state=True, use_qk_l2norm=TIME_L2NORM,
                                  cu_seqlens=cu)
            else:
                fn = forward_call(inputs, resolve(cname), cu)
            fn()
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    fn()
                torch.cuda.synchronize()
            ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
            print(f"\nper-kernel CUDA time, {cname}, {label} (5 calls; one call {ms:.3f} ms end to end)")
            for e in sorted(prof.key_averages(), key=lambda e: -e.device_time_total):
                if e.device_time_total > 0:
                    print(f"  {e.key[:60]:<60} {e.device_time_total / 5e3:8.3f} ms a call  x{e.count // 5}")
            if os.environ.get("GDN_TIMELINE"):
                print_timeline(fn)


def print_timeline(fn) -> None:
    """Start and end (us from the first kernel) and stream of every kernel of one call: how the
    pieces, streams and waits of the launcher overlap on the device."""
    import json
    import tempfile
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        with open(f.name) as trace:
            events = [e for e in json.load(trace)["traceEvents"] if e.get("cat") == "kernel"]
    if not events:
        print("  timeline of one call: no kernels traced")
        return
    events.sort(key=lambda e: e["ts"])
    t0 = events[0]["ts"]
    print("  timeline of one call: kernel, stream, start us, end us")
    for e in events:
        print(f"    {e['name'][:28]:<28} s{e['args'].get('stream', '?'):<4} {e['ts'] - t0:9.1f} {e['ts'] + e['dur'] - t0:9.1f}")


def once() -> None:
    """One call of each config in GDN_CONFIGS at GDN_ONCE ("BxT", default 1x4096), after one call to
    compile it: for ncu, which profiles the kernels of the second call (--launch-skip), and for
    compute-sanitizer."""
    (B, T), = env_shapes("GDN_ONCE", "1x4096")
    inputs = timing_problem(B, T)
    for cname, variant in selected_configs().items():
        fn = forward_call(inputs, variant)
        for _ in range(2):
            fn()
        torch.cuda.synchronize()
        print(f"once: {cname} B{B} x T{T} ran", flush=True)


def hang_guard(seconds: float) -> None:
    """From now on, after `seconds` (none if 0): every thread's Python stack to stderr, then the
    process's end. A kernel that never ends (a barrier wait that nothing fills: NOTES.md v45) blocks
    the next synchronization with no output, and a long compile looks the same from outside; the
    stack tells them apart and names the call, and the run's later sections keep their time."""
    if seconds > 0:
        faulthandler.dump_traceback_later(seconds, exit=True)


def main() -> int:
    hang_guard(float(os.environ.get("GDN_HANG_S", "0")))
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
    sections = dict(correct=correctness, kernels=kernels, time=timing, profile=profile, once=once, host=host,
                    stages=stages)
    for name in sys.argv[1:] or sections:
        sections[name]()
    print("\nFAILED: " + ", ".join(failures) if failures else "\nall GPU checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

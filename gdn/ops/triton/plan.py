"""What one call of the Triton forward runs, decided before any buffer is made or kernel launched.

``plan_forward`` takes the call's shapes, dtypes and keyword knobs, refuses what does not apply (a
ValueError naming the knob and what it needs) and resolves every default into a ``Plan``: the tiles
(chunk, key and value blocks), the segments, what the WY pass stores for the walk and how (split
products, fp16 operands, the inverse, heads a program, registers), which walk runs, and how the two
passes share the GPU (pieces, flags, the automatic split). The defaults are the configuration
measured correct and fastest on an H200 (benchmarks/NOTES.md; named alternatives in
gdn.ops.triton.configs). gdn.ops.triton.forward makes the buffers and launches the kernels from it.

The device probes that the plan and the launcher read (num_sms, _tma_ready, triton_interpreting,
gluon_available) are this module's names, so that tests and benchmarks/compile_report.py stand in
for a GPU by replacing them here.
"""
from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass

import torch
import triton.language as tl

from ..common import triton_interpreting
from . import split_walk as splits
from .schedule import (MAPS_SPLIT_CHUNKS, cdiv, choose_flag_group, choose_pieces, choose_segments, cuda_major,
                       next_pow2, num_sms, walks_one_segment)

SUBBLOCK = 16            # diagonal-block size of the in-chunk triangular inverse
MAPS = "f16"             # the segment maps' operands by default (plan_forward's maps; v57)
INVERSES = ("subst", "blocks", "blocks_parts", "blocks_f16", "blocks_f16_subst", "f16_subst", "f16_subst_t",
            "product", "substitution")   # inverse.unit_lower_inverse

# The fp16 walk stores P = scale q k^T D in fp16 unscaled: past 256 it would overflow, and below
# 2^-10 its entries (|q . k| <= 1 with l2norm) fall to fp16's subnormals, o losing bits (a helper's
# fuzz, NOTES.md v66: bf16 o 2.5e-2 at scale 1e-5, 2.0e-1 at 1e-6; the bf16-parts walk 3.3e-3).
F16_SCALES = (2.0 ** -10, 256.0)

_TL_DTYPES = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


def _tma_ready(*tensors) -> bool:
    """Whether the walk's tiles of these [tokens, heads, dim] tensors can move by TMA (sm_90 or later,
    or the interpreter): starts and rows in 16-byte multiples."""
    if not all(t.data_ptr() % 16 == 0 and t.shape[-1] * t.element_size() % 16 == 0 for t in tensors):
        return False
    if triton_interpreting():
        return True
    return tensors[0].is_cuda and cuda_major(tensors[0].device) >= 9


def stream_capturing(q) -> bool:
    """Whether q's call is being captured into a CUDA graph (its current stream is capturing)."""
    return q.is_cuda and torch.cuda.is_current_stream_capturing()


@functools.cache
def gluon_available() -> bool:
    """Whether this Triton has Gluon's Hopper language (Triton 3.6 does; walk_gluon is written for it)."""
    try:
        import triton.experimental.gluon.language.nvidia.hopper  # noqa: F401
    except ImportError:
        return False
    return True


def _is_int(value, low: int) -> bool:
    """Whether a knob is an int (not a bool) of at least low."""
    return not isinstance(value, bool) and isinstance(value, numbers.Integral) and value >= low


@dataclass(frozen=True)
class Plan:
    """One call's resolved configuration (plan_forward's docstring says what each knob does); frozen:
    planned() hands the same one to every call of its key.
    Upper-case names are the kernels' sizes: B sequences (dense) of T tokens, or N packed ones; H q/k
    heads of K, HV value heads of V; chunks of BT tokens, NT of them a sequence; key blocks of BK; BV
    state columns a walk program, NV programs a head; BLOCK the inverse's diagonal blocks; P segments
    of L chunks a sequence."""
    B: int
    T: int
    H: int
    K: int
    HV: int
    V: int
    N: int
    BT: int
    BK: int
    BV: int
    NV: int
    NT: int
    BLOCK: int
    P: int
    L: int
    # The dtypes the kernels compute in.
    precision: str
    dot_dtype: object             # tl dtype of the 16-bit products (fp32 in the interpreter)
    f16_dot: object               # the fp16 operands' tl dtype (fp32 in the interpreter)
    wy_dtype: torch.dtype
    # What the WY pass stores for the walk, and how it forms it.
    wy_split: int
    state_split: int
    inverse: str
    attn_in: bool                 # the output attention and G stored by the WY pass
    t_in: bool                    # T diag(beta) stored (the walk forms the writes U)
    f16: bool                     # the walk on fp16 operands (walk_f16 and the Gluon walks)
    qk_copies: bool               # ... reading the WY pass's fp16 copies of q and k (else q and k themselves)
    wy_heads: int
    wy_fallback: str
    wy_maxnreg: int | None
    num_warps: int
    num_stages: int
    # The walk.
    walk: str
    walk_stages: int
    walk_warps: int | None
    walk_maxnreg: int | None
    fused: bool
    walk_loads: str
    walk_tma: bool | None
    q_late: bool
    fast_dots: bool
    longest_first: bool
    # How the two passes share the GPU.
    pieces: int
    flags: bool                   # the WY pass counts its chunks; the walk beside it waits on the counts
    capturing: bool               # a CUDA graph is being captured on the caller's stream (stream_capturing)
    graph_safe: bool              # a graph being captured where flags would apply: the Gluon walks after the WY pass
    beside: bool                  # a WY program fits beside each walk program
    flag_group: int
    overlap: str
    auto_split: bool
    forced_split: object          # split_walk where given (False: never; True or a segment count)
    split_walk: object
    split_warmup: int | None
    split_check: str
    split_beside: bool
    bounds_priority: int
    walk_priority: int            # the walk's side stream beside the WY pass (flags)
    split_launches: int           # the posterior check's launches: 2 (walk, check) or 1 (both)
    split_heads_in: str           # the automatic split's heads: "kernel" (their own launch) or "wy"
    walk_descriptors: str         # the Gluon walks' TMA descriptors: "host" or "kernel"
    decays_by_head: bool          # G stored [HV, tokens] (decays_layout="heads")
    maps_stages: int              # the fp16 segment maps' pipeline stages (walk_stages unless given)
    common: dict                  # the constexprs and launch options every kernel takes


MAX_PLANS = 1024                 # past this many keys the table starts again
_PLANS: dict = {}


def plan_key(q, v, cu_seqlens, scale, use_qk_l2norm, chunk_size, knobs: dict) -> tuple:
    """Everything plan_forward reads of a call: q's and v's shapes and dtypes, the device, whether v
    is 16-byte aligned (_tma_ready), the number of packed sequences, scale, l2norm, the chunk size, the
    knobs with their types (split_walk=True is not split_walk=1, though True == 1), whether a CUDA
    graph is being captured, and the device probes themselves (tests and compile_report replace them:
    a replaced probe is another key). Raises TypeError for an unhashable knob."""
    capturing = stream_capturing(q)
    key = (q.shape, q.dtype, q.device, v.shape, v.dtype, v.data_ptr() % 16,
           None if cu_seqlens is None else cu_seqlens.numel(), float(scale), bool(use_qk_l2norm), chunk_size,
           tuple((name, type(value), value) for name, value in knobs.items()), capturing, num_sms, _tma_ready,
           cuda_major)
    hash(key)
    return key


def planned(q, v, cu_seqlens, *, scale, use_qk_l2norm, chunk_size=64, **knobs) -> Plan | None:
    """plan_forward's Plan for this call, made once per plan_key on a CUDA device (~17 us of Python a
    call on this project's CPU VM, which the GPU machine's slower host pays again at B = 1, where the
    host sets the pace: NOTES.md v37). Elsewhere (CPU tensors in the interpreter, meta tensors) and for
    unhashable knobs, plan_forward at every call. Refusals are never kept: they raise every time."""
    key = None
    if q.device.type == "cuda" and not triton_interpreting():
        try:
            key = plan_key(q, v, cu_seqlens, scale, use_qk_l2norm, chunk_size, knobs)
        except TypeError:
            pass
    plan = None if key is None else _PLANS.get(key)
    if plan is None:
        plan = plan_forward(q, v, cu_seqlens, scale=scale, use_qk_l2norm=use_qk_l2norm, chunk_size=chunk_size,
                            **knobs)
        if key is not None:
            if len(_PLANS) >= MAX_PLANS:
                _PLANS.clear()
            _PLANS[key] = plan
    return plan


def check_chunk_size(chunk_size) -> None:
    """The Triton forward's chunk sizes, or an error that names the argument."""
    if isinstance(chunk_size, bool) or chunk_size not in (16, 32, 64):
        raise ValueError(f"backend='triton' supports chunk_size 16, 32 or 64, got {chunk_size!r} (128 needs more "
                         f"shared memory than an SM has; backend='chunk' takes any power of two)")


def plan_forward(q, v, cu_seqlens, *, scale, use_qk_l2norm, chunk_size=64, num_segments=None,
                 fast_dots=False, precision=None, wy_dtype=torch.float32, inverse=None, wy_split=None,
                 state_split=2, block_v=None, walk_stages=None, programs_per_sm=None, num_warps=4,
                 num_stages=1, wy_maxnreg=None, walk_maxnreg=None, wy_heads=None, wy_fallback=None, walk_warps=None,
                 attention="stored", factors=None, longest_first=True,
                 pieces=None, fused=True, overlap="flags", flag_group=None, walk_loads="dots", walk_tma=None,
                 q_late=False, operands=None, walk=None, split_walk=None, split_warmup=None, split_beside=False,
                 split_check=None, bounds_priority=-1, walk_priority=-2,
                 split_launches=None, split_heads_in="kernel", walk_descriptors="host",
                 decays_layout=None, qk_copies=None, maps=None, maps_stages=None) -> Plan | None:
    """The Plan of one call of triton_forward: q [B, T, H, K] as the kernels read it (fp32, bf16 or
    fp16, contiguous), v [B, T, HV, V] (contiguous), cu_seqlens [N + 1] int32 or None, scale and
    use_qk_l2norm as the op's. None where T = 0 (nothing to launch), after the checks that need no
    length. A knob that does not apply raises a ValueError naming it.

    The knobs (triton_forward's keywords; benchmarks and tests): ``num_segments`` forces the
    per-sequence split into segments joined by their affine maps (dense batches only; default one
    segment wherever the fp16 walk can run and schedule.walks_one_segment says so (v57: from 16
    sequences x value heads, and from schedule.MAPS_SPLIT_CHUNKS chunks where heads^2 x chunks passes
    schedule.MAPS_BUDGET; fp16 inputs always), else chosen from the SM count and ``programs_per_sm``,
    the state-walk programs one SM holds: default 1 with ``walk_stages`` > 1, whose shared memory
    fills an SM, else 2); ``inverse`` how the in-chunk triangular inverse is formed (one of INVERSES:
    gdn.ops.triton.inverse.unit_lower_inverse).

    The defaults are the configuration measured correct and fastest on an H200 (benchmarks/NOTES.md,
    v5 to v14; gdn/ops/triton/configs.py). bf16 inputs take the split paths (the walk on fp16
    operands: ``operands``; fp16 inputs take that walk too, v14; without l2norm since v50), where every
    product runs on bf16 matrix units with each computed fp32 operand cut into bf16 parts (gdn.ops.triton.split_dot):
    ``wy_split`` parts for the WY pass (default 2, 16 bits, as the split walk keeps the state; 3,
    exact as fp32, when the walk is not split and so keeps fp32),
    ``state_split`` (2: 16 bits of the state, where tf32 keeps 11) for the state walk and the
    segment maps; 0 turns a split path off. ``attention="stored"`` (the default; split paths only)
    has the WY pass form each chunk's output attention and store it for the walk; "walk" forms it in
    the walk (v3). ``factors`` (split path with stored attention, one segment): "t" (the default
    there) has the WY pass store T diag(beta) (16 KB a chunk-head in two bf16 parts) and the walk
    form U = T diag(beta) (v - diag(r_k e^G) k S) itself (T in two parts, 16 bits, whatever
    ``wy_split``); "wu" has it store w and u (64 KB) for
    U = u - w S (v4; the segment maps always read w and u). ``longest_first`` (varlen; default on)
    walks the longest sequences first, so that no long walk starts in the last wave (the lengths sorted
    on the device, no host sync). The split walk uses ``block_v`` columns of the state per program and
    ``walk_stages`` pipeline stages (loads go straight to shared memory): by default 64 columns and 1
    stage when sequences x heads x V/64 fill two programs per SM, else 32 columns and 2 stages (one
    program per SM, its loads prefetched; the fp16 walk there takes 3 stages, its loads two chunks
    ahead, where they fit 160 KB: v12; on the bf16-split walk 3 stages take q through registers so that
    a WY program still fits beside: slower, benchmarks/NOTES.md v9-v10).
    ``fused`` (default on; the walk with
    factors "t", at most 32 columns) runs each product of bf16 parts as one matrix product
    (gdn.ops.triton.split_dot.dot_cat): 5 waits for the matrix units a chunk instead of 12.
    ``pieces`` (dense batches in one segment; default
    on a GPU when the walk takes at most one program per SM: see schedule.choose_pieces) runs the WY
    pass beside the walk. How (``overlap``): "flags" (the default, with factors "t" and fewer walk
    programs than SMs, unless a CUDA graph is being captured) launches the WY pass once over all
    chunks in order and the walk beside it, which waits for each group of ``flag_group`` chunks
    (default: schedule.choose_flag_group, 8 or 16) to be counted done; "pieces" cuts the chunks into
    that many pieces, the WY pass of piece i + 1 beside the walk of piece i, ordered by events.
    While a CUDA graph is being captured, where the flags would apply, the Gluon walk runs after the
    WY pass instead (Plan.graph_safe: a graph may start two streams' kernels in either order, so no
    kernel may wait on one it is not ordered after), the Triton walk in pieces.
    ``inverse`` defaults to "f16_subst" with the fp16 walk (v19: on plain fp16 products where a chunk's
    |A_ij| <= 1, tf32x3 elsewhere; v18's "blocks_f16_subst" formed the diagonal blocks from pairs of
    fp16 parts), "f16_subst_t" there where a WY program takes two heads (the same on the transposes,
    v36), "subst" otherwise (block substitution at tf32x3, also every fp16 form's fallback: v9's
    "blocks_parts" and v2's "product", the product forms, lost T to cancellation where keys are near
    parallel and beta exceeds 1, o 5-26% off there; NOTES.md v66).
    ``walk_loads`` which loads of the walk's loop are pipelined: "dots" (Triton's num_stages: those
    that feed products) or "all" (tl.range's: the output scaling r_q too). ``walk_tma``: the walk's
    tiles move by TMA (sm_90 on, rows in 16-byte multiples): None (default) in the fused walk (v10:
    5-7% faster at B = 1), True wherever the walk forms the writes from T diag(beta), False nowhere.
    ``q_late`` loads q in the walk on bf16 parts right before its product (not yet measured on a
    GPU; refused on the other walks).
    ``operands`` the walk's matrix operands where it forms the writes from T diag(beta) (bf16 inputs,
    one segment): "bf16_parts" (each computed operand as two bf16 parts, 16 bits; bf16 inputs only)
    or "fp16" (one fp16 operand, 11 bits, the state and values scaled by powers of two:
    gdn.ops.triton.walk_f16; needs 2^-10 <= |scale| <= 256, F16_SCALES; bf16 or fp16 inputs). None
    (default): "fp16" wherever it applies (v11; fp16 inputs v14, in one segment: 6x faster than
    their tf32 walk on an H200).
    ``walk="gluon"`` (fp16 walk only, CUDA only: Gluon has no interpreter) runs the state walk as
    gdn.ops.triton.walk_gluon's kernel, whose matrix products run asynchronously: dense or packed
    sequences of any length, one segment, after the WY pass (or beside it, waiting on its counts, where
    ``overlap="flags"`` applies: few sequences x heads; overlap="pieces" is refused), chunk_size 64,
    K of 64, 128 or 256, 4 warps, an sm_90 GPU. ``walk="gluon_t"``: gdn.ops.triton.walk_gluon_t's
    kernel, the same walk on the transposed state (every product on the state's chain takes its left
    operand from registers; per-column scales), as "gluon" with block_v 64 (the matrix units' 64 rows)
    and K of 64 or 128; beside the WY pass at one stage. None (default), at K = 128: "gluon_t" where
    the defaults take the wide walk (64 columns, one stage: sequences x heads fill the SMs twice),
    dense or packed, whole chunks or not, 11-14% faster there than "gluon" on an H200 (v22), itself
    22-23% faster than "triton" (v18; packed 17%, v19); "gluon" where it runs beside the WY pass
    (flags: few sequences x heads, 32 columns, three stages) from 256 chunks a sequence on, 3-4%
    faster there (v19-v20, correct at 2^20 tokens); "triton" elsewhere (shorter sequences at B = 1,
    where the Gluon launch's host time showed; the interpreter). Every walk takes its decays by exp2,
    which flushes results below 2^-126 to zero (walk_f16.exp_ftz; 4.5% faster on walk_gluon_t, v23).
    ``split_walk`` None (the default): the automatic split where the default takes the Gluon walk
    beside the WY pass (one or a few dense sequences x heads, V a multiple of 64, K of 64 or 128)
    from split_walk.AUTO_MIN_CHUNKS chunks on ("auto": at any length): a
    small kernel over g marks the heads whose warm-ups forget (split_walk.forgetting_heads; without
    l2norm also over the warm-ups' keys, and only with the posterior check); the
    others walk in order beside the WY pass as without it, the marked ones in certified segments
    after it (walk_gluon_t, 64 columns, one stage). Under graph capture both walks run after the WY
    pass, beside each other on two streams (graph_safe). False (or 0): never.
    True or an int (walk="gluon_t", dense sequences whose chunks read no other sequence's rows,
    use_qk_l2norm; opt-in): the certified split of gdn.ops.triton.split_walk for every head, after the WY pass. On
    an H200 (v25, B1, bf16) 24-27% faster than the ordered walk from 32k tokens on with gates that
    forget, 29-33% slower with long memory (every segment then waits, and the WY pass no longer runs
    beside the walk): the automatic split chooses per head instead. True takes
    segments from the SM count (split_walk.split_segments: all programs resident, each segment at
    least twice its warm-up), an int that many segments; ``split_warmup`` the chunks each segment
    walks before its own (default split_walk.WARMUP_CHUNKS; at most POSTERIOR_MAX_WARMUP with the
    posterior check). Exact either way: a segment whose warm-up does not certify is walked from the
    segment before's final state (``split_check`` below). With split_check="bounds" the
    certificates' bounds run on a side stream beside the WY pass (in order under graph capture).
    ``split_beside`` (with
    overlap="flags", outside graph capture) runs the segments beside the WY pass instead, which
    forms the chunks in the order they need them (wy_kernel's FEED) while they wait on its counts;
    True segments then leave an SM free (split_walk.beside_segments: 2 at B1 x HV 32). On an H200
    no faster than after it (v25: a walk program takes ~3.3 us a chunk, alone on its SM or two an
    SM, so four segments after the WY pass beat two beside it).
    ``split_check`` how a segment's warm-up is certified: "posterior" (the default, None, after the
    WY pass) after the segments' walk, against the column norms the segment before walked to where
    the warm-up starts, in a second launch that walks again, from the segment before's final state,
    any segment that fails (walk_t_kernel's SPLIT 3 and 4: no pass over v; segment 0, which has no
    warm-up, longer by 0.75 of one, split_walk.posterior_segments); "bounds" (the default with split_beside)
    against a bound on the state formed from v, g and beta by two kernels beside the WY pass
    (split_walk.segment_errors), before the segment starts. On an H200 (NOTES.md v30) the posterior
    check took B1 x T128k with decaying gates from 3.50 to 3.29 ms: the WY pass no longer shares
    the GPU with the bounds' pass over v.
    ``bounds_priority`` (the automatic split, split_check="bounds"): the CUDA stream priority of the
    side stream that forms the certificates' bounds beside the WY pass (lower is higher; default -1,
    above the caller's 0, below the ordered walk's -2). On an H200 (NOTES.md v30) 0 took 5-11% off
    the WY pass at B = 1 but made the walk wait as long for the bounds after it: no faster end to end.
    ``walk_priority`` (flags: the walk beside the WY pass, and the automatic split's ordered walk): the
    CUDA stream priority of the walk's side stream (default -2, above the WY pass's 0, so that its
    programs are placed as soon as an SM has room and the walk never queues behind the WY pass). A
    reading of v32's B = 1 timeline: while the ordered walk's programs (192 KB of shared memory each)
    wait to be placed at -2 the GPU places none of the WY pass's. Measured (NOTES.md v36): 0 took
    little off the WY pass with decaying gates, and with long memory the call took longer (the walk's
    programs then placed after the WY pass's, no longer beside it).
    ``split_launches`` (the posterior check): 2 launches walk_gluon_t's walk (SPLIT 3) and then its
    check (SPLIT 4); 1 runs both in each program of one launch (SPLIT 5: one Gluon launch less, a walk
    ~10% longer: its kernel spills). None (default): 1 below split_walk.ONE_LAUNCH_BELOW chunks a
    sequence (where the host sets the pace at B = 1), else 2 (NOTES.md v37).
    ``split_heads_in`` (the automatic split with the posterior check, one sequence): where the heads it
    splits are chosen: "kernel" (default) split_walk.forgetting_heads' own launch on the ordered
    walk's side stream, which the segments wait for by an event; "wy" the WY pass's chunk-0 programs
    (wy_kernel's FORGET), the ordered walk reading them once its first chunks are counted
    (walk_gluon_kernel's SKIP = 2): one launch and one event less on the host, and past the first
    group of chunks the WY pass counts no chunk of a q/k head whose value heads all split. Timed on an
    H100 (NOTES.md v39-v40): bit for bit the heads' kernel's results (test_automatic_split_on_mixed_heads),
    and the WY pass 5% longer at B1 x T128k; at B1 x T32k it took the host's time a call from
    0.57-0.90 to 0.54-0.91 ms and the call from 0.851-0.854 to 0.893-0.900 ms (three runs), since
    with direct launches the kernels, not the host, set the pace there. So "kernel" stays the default.
    ``walk_descriptors`` (the Gluon walks): where their TMA descriptors are made: "host" (default,
    TensorDescriptor objects that Triton's launcher encodes at every launch, in Python per
    argument) or "kernel" (each program makes its own from the tensors' pointers in a scratch
    buffer Triton allocates at launch; the launch then passes pointers only: less host time for each
    Gluon launch). The split's walk keeps the host's (walk_gluon_t: in the kernel they spill it).
    On an H100 (NOTES.md v39) "kernel" passed the GPU tests bit for bit, took 25-35 us of host off
    each Gluon launch at B1 x T32k (its call's total within that host's noise) and made the wide
    walks 1-4% longer. In v41 it replayed correctly from CUDA graphs (the ordered and the wide walk),
    and an A/B in both orders gave equal calls at B1 x T8k and T32k (0.332-0.335, 0.852-0.858 ms: the
    host's time is below the GPU's there now) and no difference beyond the order's 3-5% at B8 x T4k.
    No gain anywhere, so "host" stays the default.

    Otherwise (other dtypes, ``state_split=0``, ``fast_dots`` or a ``wy_dtype`` other than fp32):
    ``fast_dots`` runs the state products with operands in the input dtype (FLA's choice: faster,
    less exact); ``precision`` the fp32 products' Triton ``input_precision`` otherwise ("tf32",
    "tf32x3" or "ieee"; default "tf32x3" for fp32 inputs, "tf32" for 16-bit ones); ``wy_dtype`` the
    dtype w and u are kept in between the two passes; ``block_v`` defaults to 64 and ``walk_stages``
    to 1. ``num_warps`` applies to every kernel (``walk_warps``, when given, to the state walk and
    the segment maps instead), ``num_stages`` to the WY pass; ``wy_maxnreg`` caps the WY kernel's
    registers a thread (0: no cap). Default: 168, three programs an SM instead of two, on the WY
    pass of bf16 parts wherever it does not store the output attention (attention="walk", the tf32
    walk), and on the fp16 walk's WY pass of one head a program where it runs alone, before the walk
    in one piece (the wide shapes, varlen, short sequences); no cap beside the walk, in pieces, nor
    with two heads a program. ``walk_maxnreg``
    likewise caps the state walk's (default None: no cap; not yet measured on a GPU). ``wy_heads``
    value heads a WY program (split path; a power of two dividing HV / H, so that they share a q/k
    head): q and k loaded and k k^T, q k^T formed once for all. Default: 2 on the fp16 walk where HV / H
    is even (v16 on an H200: 1-2% off the wide shapes and varlen, 4-6% off B = 1 from 32k tokens on),
    else 1. ``wy_fallback``: "inline", each head's fp16 inverse behind its range test, its tf32x3
    fallback right after it; "after" (the fp16 walk's pass with inverse "f16_subst" only), every
    head's fp16 inverse unconditionally, the fallback for the heads that need it after all of them,
    so that no branch parts the heads' products (gdn.ops.triton.wy.wy_split_factors' FALLBACK_AFTER).
    Default: "after" where it applies with two heads or more a program (v28 on an H200: the WY pass
    1.4-1.8% faster), else "inline". ``decays_layout``: how the WY pass stores the cumulative
    log-decays G, "tokens" ([tokens, HV]) or "heads" ([HV, tokens]: a chunk's 64 values of one head
    in 256 contiguous bytes instead of 64 cache lines, whose loads the split walk waited out each
    chunk; the Gluon walks only). Default: "heads" where a Gluon walk runs (v44 on an H100: the split
    walk 6.6% faster under ncu, 495.7 -> 463.0 us, B1 x T32k ~3%), else "tokens". ``qk_copies``
    (the fp16 walk): whether the WY pass writes fp16 copies of q and k for the walk to read (True) or
    the walk reads q and k themselves (False: fp16 inputs without l2norm only, which equal their copies
    bit for bit; triton_forward still copies inputs whose start is not 16-byte aligned, for TMA).
    Default: copies only where they differ from the inputs.
    ``maps`` (segments, P > 1): the operands of the segment maps and of the walk that folds them.
    "f16" (the default, MAPS, for bf16 inputs where the fp16 walk can run; v57): the WY pass stores
    what one segment's fp16 walk reads (T diag(beta), P, G, fp16 copies of q and k), each map [A | B]
    is walked by that walk's step (chunk_fwd._segment_maps_f16_kernel, A as two bf16 parts, B fp32)
    and the fp16 walk folds them on bf16 parts: on an H100 2.0-2.3x faster than "bf16_parts" (v3's:
    the WY pass stores w and u, the maps, chunk_fwd._segment_maps_kernel, and the walk run on bf16
    parts, 16 bits of the state where fp16 keeps 11). ``maps_stages`` the f16 maps' pipeline stages
    (default walk_stages; 1 holds three of its programs an SM instead of two: slower, v57).
    """
    if walk_loads not in ("dots", "all"):
        raise ValueError(f"walk_loads must be 'dots' or 'all', got {walk_loads!r}")
    if decays_layout not in (None, "tokens", "heads"):
        raise ValueError(f"decays_layout must be None, 'tokens' or 'heads', got {decays_layout!r}")
    if walk not in (None, "triton", "gluon", "gluon_t"):
        raise ValueError(f"walk must be None, 'triton', 'gluon' or 'gluon_t', got {walk!r}")
    check_chunk_size(chunk_size)
    # The split paths (bf16 inputs only; fp16 parts would underflow, fp32 inputs are not bf16 values).
    # On an H200 3 state parts gave wrong results, though right in the interpreter (NOTES.md, v3).
    if state_split not in (0, 2):
        raise ValueError(f"state_split must be 0 or 2, got {state_split}")
    for name, value in (("wy_maxnreg", wy_maxnreg), ("walk_maxnreg", walk_maxnreg)):
        if value is not None and not _is_int(value, 0):
            raise ValueError(f"{name} must be None or an int >= 0 (0: no cap), got {value!r}")
    if wy_split not in (None, 0, 2, 3):
        raise ValueError(f"wy_split must be 0, 2 or 3 (bf16 parts of the WY pass's products), got {wy_split!r}")
    if pieces is not None and pieces > 1 and cu_seqlens is not None:
        raise ValueError("pieces > 1 needs a dense batch (no cu_seqlens)")
    if pieces is not None and pieces > 1 and num_segments is not None and num_segments > 1:
        raise ValueError("pieces > 1 needs the sequences walked in one segment (num_segments=1)")
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if K > 256 or V > 256:
        raise ValueError(f"backend='triton' supports head dims K, V <= 256, got K={K}, V={V}")
    if wy_heads is not None and (not _is_int(wy_heads, 1) or wy_heads & (wy_heads - 1) or (HV // H) % wy_heads):
        raise ValueError(f"wy_heads must be a power of two dividing HV // H = {HV // H}, got {wy_heads!r}")
    if T == 0:
        return None
    N = B if cu_seqlens is None else cu_seqlens.numel() - 1
    if precision is None:
        precision = "tf32x3" if q.dtype == torch.float32 else "tf32"
    BK = max(16, next_pow2(K))
    BT = chunk_size
    if operands == "bf16_parts" and q.dtype != torch.bfloat16:
        raise ValueError(f"operands='bf16_parts' needs bf16 inputs, got {q.dtype}")
    # fp16 inputs take the split machinery only into the fp16 walk, which reads q and k normalised to
    # fp16 and v as it is (their values are not sums of bf16 parts, which the bf16-split walk needs).
    f16_inputs = (q.dtype == torch.float16 and operands in (None, "fp16") and _f16_scale(scale)
                  and attention == "stored" and factors != "wu" and wy_split != 0
                  and num_segments in (None, 1) and state_split == 2 and not fast_dots and wy_dtype == torch.float32)
    split_inputs = q.dtype == torch.bfloat16 or f16_inputs
    state_split = state_split if split_inputs and not fast_dots and wy_dtype == torch.float32 else 0
    if wy_split is None:
        wy_split = 2 if state_split > 0 else 3     # w and u as exact as the walk that reads them
    wy_split = wy_split if split_inputs else 0
    if wy_heads is not None and wy_heads > 1 and wy_split == 0:
        raise ValueError("wy_heads > 1 needs the split WY pass: bf16 inputs with wy_split unset, 2 or 3, or "
                         "fp16 inputs on the fp16 walk (2^-10 <= |scale| <= 256, one segment, state_split=2, "
                         "fast_dots=False, wy_dtype=torch.float32)")
    if attention not in ("walk", "stored"):
        raise ValueError(f"attention must be 'walk' or 'stored', got {attention!r}")
    attn_in = attention == "stored" and wy_split > 0 and state_split > 0    # elsewhere the walk forms it
    if inverse not in (None, *INVERSES):
        raise ValueError(f"inverse must be one of {', '.join(map(repr, INVERSES))}, got {inverse!r}")
    inverse_given = inverse is not None
    if inverse is None:
        inverse = "subst"
    stages_given = walk_stages is not None
    wide_default = False          # the wide walk by the defaults below (where walk=None takes Gluon's)
    if block_v is None:
        # Wide blocks when the walk fills the GPU twice over without them; else narrow blocks, which
        # double the programs and keep their pipelined buffers within one SM (v3, benchmarks/NOTES.md).
        wide = N * HV * cdiv(V, 64) >= 2 * num_sms(q.device)
        block_v = 64 if wide or state_split == 0 else 32
        wide_default = wide and walk_stages is None
        if walk_stages is None and state_split > 0:
            walk_stages = 1 if wide else 2
    if walk_stages is None:
        # Two stages double the q, k and w-part buffers (BT x BK bf16 each): keep them to 128 KiB.
        walk_stages = 2 if state_split > 0 and 2 * BT * BK * 2 * (2 + state_split) <= 128 * 1024 else 1
    BV = max(16, min(block_v, next_pow2(V)))
    if q.is_cuda and not triton_interpreting() and attn_in and BV <= 32 and walk_stages == 1:
        # Triton 3.6's sm_90 code for this walk addresses shared memory out of range (compute-sanitizer,
        # benchmarks/NOTES.md v5; 16 columns and the fused walk too, v7): an error here instead of an
        # illegal memory access in the kernel, and two stages where the defaults chose one (V <= 32).
        if stages_given:
            raise ValueError(f"block_v={BV} with walk_stages=1 on the split walk with stored attention crashes "
                             "on sm_90 with Triton 3.6; use walk_stages=2 or block_v=64")
        walk_stages = 2
    if programs_per_sm is None:
        programs_per_sm = 1 if walk_stages > 1 else 2
    NV = cdiv(V, BV)
    BLOCK = min(SUBBLOCK, BT)
    NT = cdiv(T, BT)
    # Triton's CPU interpreter multiplies 16-bit tiles wrongly (it reads their raw bits): upcast there.
    dot_dtype = tl.float32 if triton_interpreting() else _TL_DTYPES[q.dtype]
    f16_dot = tl.float32 if triton_interpreting() else tl.float16      # the fp16 operands' dtype, likewise
    common = dict(H=H, HV=HV, K=K, V=V, BT=BT, BK=BK, USE_L2NORM=use_qk_l2norm, PRECISION=precision,
                  DOT_DTYPE=dot_dtype, num_warps=num_warps, num_stages=num_stages)

    # Segments (dense batches that cannot fill the GPU), joined by their affine maps.
    if operands not in (None, "bf16_parts", "fp16"):
        raise ValueError(f"operands must be 'bf16_parts' or 'fp16', got {operands!r}")
    f16 = operands == "fp16" or f16_inputs   # asked for (fp16 inputs: their only split walk); else where it applies
    # Where the fp16 walk can run, one segment unless so few sequences x value heads share the GPU
    # that segments joined by maps on its operands lose less (schedule.walks_one_segment).
    f16_walkable = attn_in and factors != "wu" and _f16_scale(scale)      # all it needs but one segment
    one_segment = f16_walkable and operands != "bf16_parts" and walks_one_segment(N * HV, NT, MAPS_SPLIT_CHUNKS)
    # The walk folds K x K maps (two bf16 parts, or fp32 tiles) in registers and shared memory: past
    # K = 128 they do not fit an SM (at K = 256 the fold alone asks 573 KB of shared memory).
    if num_segments is not None and num_segments > 1 and K > 128:
        raise ValueError(f"num_segments > 1 (segment maps) needs K <= 128 (the walk folds K x K maps), got K={K}")
    if cu_seqlens is not None or K > 128 or (num_segments is None and (f16 or one_segment)):
        P = 1                      # packed sequences: parallel over sequences x heads already; fp16: one segment
    elif num_segments is not None or (pieces is not None and pieces > 1):
        P = 1 if num_segments is None else max(1, min(int(num_segments), NT, 65535))   # (a grid axis: CUDA's cap)
    else:
        P = choose_segments(N * HV * NV, NT, num_sms(q.device), programs_per_sm)
    L = cdiv(NT, P) if P > 1 else max(NT, 1 << 30)
    if P > 1:
        P = cdiv(NT, L)     # no empty segments
    # The segment maps on the fp16 walk's operands (the maps and the walk from the WY pass's fp16
    # copies and T diag(beta)), or on bf16 parts from w and u (v3's).
    if maps not in (None, "f16", "bf16_parts"):
        raise ValueError(f"maps must be None, 'f16' or 'bf16_parts', got {maps!r}")
    maps_f16_fits = P > 1 and f16_walkable and q.dtype == torch.bfloat16 and operands != "bf16_parts"
    if maps == "f16" and P > 1 and not maps_f16_fits:
        raise ValueError("maps='f16' needs bf16 inputs, 2^-10 <= |scale| <= 256 and the fp16 walk's operands "
                         "(attention='stored', state_split=2, wy_split 2 or 3, fast_dots=False, "
                         "wy_dtype=torch.float32, operands and factors unset or 'fp16' and 't')")
    maps_f16 = maps_f16_fits and (maps or MAPS) == "f16"
    if maps_stages is not None and not (maps_f16 and _is_int(maps_stages, 1)):
        raise ValueError("maps_stages needs the segment maps on fp16 operands (maps='f16', segments) and an int "
                         f"of at least 1, got maps_stages={maps_stages!r}, maps_f16={maps_f16}")
    # What the WY pass hands the walk: w and u, or T diag(beta) from which the walk forms the writes
    # (split path with stored attention, one segment: the segment maps read w and u).
    if flag_group is None:
        flag_group = choose_flag_group(NT)
    if not _is_int(flag_group, 1):
        raise ValueError(f"flag_group must be a positive int, got {flag_group!r}")
    if overlap not in ("pieces", "flags"):
        raise ValueError(f"overlap must be 'pieces' or 'flags', got {overlap!r}")
    if factors not in (None, "wu", "t"):
        raise ValueError(f"factors must be 'wu' or 't', got {factors!r}")
    t_in = attn_in and (P == 1 or maps_f16) and factors != "wu"
    # fp16 operands (walk_f16): 11 bits a product where bf16 parts keep 16 in two; more exact than the
    # 2e-3 aim on an H200 (o 1.72e-3, S 4.2e-4) and 14-18% faster at every bench shape (NOTES.md v11).
    # Without l2norm too (q and k then go to fp16 as given: walk_f16's docstring; v50: that call had
    # taken the bf16-parts walk, 2.2x slower at B8 x T4k on an H100).
    f16_fits = f16_walkable and (P == 1 or maps_f16)
    if operands is None:
        f16 = f16_fits
    if f16 and not f16_fits:
        raise ValueError("operands='fp16' needs bf16 or fp16 inputs, 2^-10 <= |scale| <= 256 and the "
                         "walk that forms the writes from T diag(beta) (one segment, factors='t', "
                         "attention='stored', state_split=2, wy_split 2 or 3, fast_dots=False, "
                         "wy_dtype=torch.float32)")
    assert not (q.dtype == torch.float16 and state_split > 0 and not f16), "fp16 inputs on the bf16-split walk"
    # The fp16 walk reads q and k in fp16, l2-normalised with l2norm: copies that the WY pass writes,
    # except for fp16 inputs without l2norm, which are those copies already (0.27 GB less written at
    # B1 x T32k; the same bits). qk_copies=True keeps the copies there too (tests, A/B).
    copies_needed = use_qk_l2norm or q.dtype != torch.float16
    if qk_copies not in (None, True, False):
        raise ValueError(f"qk_copies must be None, True or False, got {qk_copies!r}")
    if qk_copies is not None and not f16:
        raise ValueError("qk_copies applies to the fp16 walk (operands='fp16' applies), and this call does not "
                         "take it")
    if qk_copies is False and copies_needed:
        raise ValueError("qk_copies=False needs fp16 inputs without use_qk_l2norm (otherwise the fp16 walk reads "
                         f"q and k converted or normalised), got {q.dtype} inputs, use_qk_l2norm={use_qk_l2norm}")
    qk_copies = f16 and (copies_needed or bool(qk_copies))
    if q_late and (state_split == 0 or f16):
        # Only the bf16-parts walk loads q late; the others read q with k or not at all (the fp32-tile
        # walk then formed its outputs from zeros: a wrong answer, found by a random-knob sweep).
        raise ValueError("q_late applies to the state walk on bf16 parts (bf16 inputs, state_split=2; with "
                         "use_qk_l2norm also operands='bf16_parts'), and this call takes the "
                         + ("fp16 walk" if f16 else "walk on fp32 tiles"))
    if wy_heads is None:
        # Two value heads a WY program on the fp16 walk where they share a q/k head: q, k, k k^T and
        # q k^T once for both; 1-2% off the wide shapes and varlen, 4-6% off B = 1 from 32k tokens on
        # (benchmarks/NOTES.md v16). One head elsewhere (the bf16-parts passes: not measured).
        wy_heads = 2 if f16 and (HV // H) % 2 == 0 else 1
    if f16 and not inverse_given:
        # The inverse on plain fp16 products where a chunk's |A_ij| <= 1 (tf32x3 elsewhere and where T
        # leaves fp16's range): the 4 x 4 blocks by a product, the 16 x 16 and 64 x 64 ones by block
        # substitution (v18-v19: 2-3% off the wide shapes, o unchanged on an H200); T is stored at
        # fp16's 11 bits here, so the 11-bit inverse loses nothing the walk kept. With two heads a
        # program, on the transposes (no shared-memory round trips between the substitution steps:
        # 2-5% off the WY pass at the wide shapes and varlen on an H200, NOTES.md v36); one head a
        # program keeps the untransposed form (not timed there).
        inverse = "f16_subst_t" if wy_heads > 1 else "f16_subst"
    if wy_fallback is None:
        # After the heads where a program takes two or more (one head gains nothing and spills more).
        wy_fallback = "after" if f16 and inverse in ("f16_subst", "f16_subst_t") and wy_heads > 1 else "inline"
    if wy_fallback not in ("inline", "after"):
        raise ValueError(f"wy_fallback must be 'inline' or 'after', got {wy_fallback!r}")
    if wy_fallback == "after" and not f16:
        raise ValueError("wy_fallback='after' needs the fp16 walk's WY pass (operands='fp16' applies), and this "
                         "call does not take the fp16 walk")
    if wy_fallback == "after" and inverse not in ("f16_subst", "f16_subst_t"):
        raise ValueError(f"wy_fallback='after' needs inverse='f16_subst' or 'f16_subst_t', got inverse={inverse!r}")
    if inverse in ("blocks_f16_subst", "f16_subst", "f16_subst_t") and not f16:
        raise ValueError(f"inverse={inverse!r} needs the fp16 walk (operands='fp16' applies): its T is "
                         "about as exact as fp16's 11 bits, in which that walk stores it")
    if f16 and not stages_given and walk_stages == 2 and 3 * BT * (4 * BK + 2 * BV + 4 * BT) <= 160 * 1024:
        # The narrow fp16 walk's loads two chunks ahead (q, k, v, T and P a stage): at one chunk ahead its
        # first wait held a quarter of its time (ncu, v12); 173 KB with a WY program's 33 KB beside.
        walk_stages = 3

    # The flags need a WY program to fit beside every walk program (4 warps each, a walk of <= 32
    # columns in <= 3 stages: the fp16 walk's three take 173 + 33 KB of shared memory, run on an H200
    # in v12; the split walk's fit with q through registers, Q_REGS: 189 + 33 KB): otherwise walks of
    # concurrent calls could fill every SM and leave no room for the WY passes they wait for.
    # A WY program fits beside a walk program on one SM: 32 columns (or walk_gluon_t's 64 at one stage).
    beside = num_warps == 4 and (walk_warps or num_warps) == 4 and (
        BV <= 32 and walk_stages <= 3 or walk == "gluon_t" and BV == 64 and walk_stages == 1)
    flags_fit = overlap == "flags" and t_in and P == 1 and beside and N * HV * NV < num_sms(q.device)
    # A graph being captured takes no flags: a graph may start two streams' kernels in either order,
    # and a tool that runs them one at a time could start the waiting walk first. Where they would
    # apply, the Gluon walk (and the automatic split's two walks, beside each other) after the WY pass
    # instead (graph_safe; else, with walk="triton", the pieces).
    capturing = stream_capturing(q)
    flags = flags_fit and not capturing
    graph_safe = flags_fit and capturing
    # The Gluon walk's tiles are 64 rows (four warps of 16: one warpgroup) and its shared memory is
    # walk_gluon_kernel's rings in fp16: STAGES x (q, v, T, P) and STAGES + 1 slots of k; the state and
    # two [BT, BV] operands; a margin for the barriers.
    gluon_smem = walk_stages * (2 * BT * K + 2 * BT * BV + 4 * BT * BT) + (walk_stages + 1) * 2 * BT * K \
        + 2 * K * BV + 4 * BT * BV + 1024
    # Beside the WY pass (flags) only where a sequence's chunks read no rows of another (the next
    # sequence's rows are read before its WY programs are waited for: MASK_ROWS zeroes v and U there,
    # but k's rows enter k S and the state's update, so they must be written), and where a WY program
    # fits beside the walk (K = 256: 229 KB of walk alone).
    gluon_flags = (flags or graph_safe) and (B == 1 or T % BT == 0) and K <= 128
    gluon_fits = (f16 and P == 1 and ((pieces or 1) == 1 or gluon_flags) and K in (64, 128, 256) and BT == 64
                  and V % BV == 0 and (walk_warps or num_warps) == 4 and gluon_smem <= 227 * 1024 and _tma_ready(v))

    def gluon_ready():
        # wgmma is sm_90's alone (Blackwell's sm_100/sm_120 have other matrix units; ROCm reports 9.x
        # too). Meta tensors: compile_report's recorded launches, for an sm_90a target.
        device = q.device.type == "meta" or (q.is_cuda and torch.version.hip is None
                                             and cuda_major(q.device) == 9)
        return device and not triton_interpreting() and gluon_available()
    if walk is None:
        # Gluon's walk where the defaults take the wide walk, in the shape it was measured in (64
        # columns, one stage, K = 128): asynchronous products and a ring for each kind of tile, 22-23%
        # off B8 x T4k and B32 x T2k on an H200 (benchmarks/NOTES.md v17-v18), 17% off packed
        # sequences (varlen 32k in 16, v19: rows of the next sequence masked, MASK_ROWS). Beside the WY
        # pass (B = 1: flags, 32 columns, three stages) 3-4% faster from 256 chunks a sequence on, and
        # correct at T = 2^20 (v19-v20); shorter ones keep the Triton walk (at B1 x T8k the Gluon
        # launch's host time, ~0.1 ms more, set the pace).
        # At the wide shapes the Gluon walk on the transposed state (walk_gluon_t: nothing stored on the
        # state's chain), 11-14% faster than walk_gluon's there (B8 x T4k, B32 x T2k, varlen 32k in 16;
        # NOTES.md v22). It needs 64 columns (the matrix units' 64 rows), so B = 1 keeps walk_gluon's 32.
        wide_gluon = wide_default and BV == 64 and walk_stages == 1
        beside_gluon = gluon_flags and (pieces is None or pieces > 1) and BV == 32 and walk_stages == 3 and NT >= 256
        walk = "triton"
        if (wide_gluon or beside_gluon) and gluon_fits and K == 128 and gluon_ready():
            walk = "gluon_t" if wide_gluon else "gluon"
    auto_split = split_walk is None or split_walk == "auto"
    if not (auto_split or split_walk is False or split_walk is True or _is_int(split_walk, 0)):
        raise ValueError("split_walk must be None or 'auto' (the default), False (or 0), True or an int of at "
                         f"least 1 (segments), got {split_walk!r}")
    forced_split = False if auto_split else split_walk       # (0: never, as False)
    if forced_split and not use_qk_l2norm:
        raise ValueError("split_walk (the certified split) needs use_qk_l2norm=True: its certificate takes every "
                         "token's map e^g (I - beta k k^T) to shrink, which unit keys and beta in [0, 2] ensure")
    if walk == "gluon_t" and not (BV == 64 and K in (64, 128)):
        raise ValueError(f"walk='gluon_t' needs block_v 64 and K of 64 or 128, got block_v={BV}, K={K}")
    if walk in ("gluon", "gluon_t"):
        if not gluon_fits:
            raise ValueError(f"walk={walk!r} needs the fp16 walk (operands='fp16' applies), one segment, one "
                             "piece (or overlap='flags'), chunk_size 64, K in "
                             f"(64, 128, 256), V a multiple of block_v ({BV}), 4 warps, v 16-byte aligned and "
                             f"its shared memory within 227 KiB ({gluon_smem} B at walk_stages={walk_stages})")
        if not gluon_ready():
            raise ValueError(f"walk={walk!r} needs an sm_90 CUDA GPU (Hopper) and Triton's Gluon (3.6); Gluon "
                             "kernels have no interpreter")
        if not gluon_flags or forced_split or graph_safe:
            pieces = 1             # the WY pass first, then the walk (else beside it, waiting on its counts)
    if decays_layout is None:
        decays_layout = "heads" if walk in ("gluon", "gluon_t") else "tokens"
    if decays_layout == "heads" and walk not in ("gluon", "gluon_t"):
        raise ValueError(f"decays_layout='heads' takes the Gluon walks (walk='gluon' or 'gluon_t', an sm_90 GPU), "
                         f"got walk={walk!r}")
    if split_warmup is not None and not _is_int(split_warmup, 1):
        raise ValueError(f"split_warmup must be an int of at least 1 (chunks), got {split_warmup!r}")
    if split_beside and not forced_split:
        raise ValueError("split_beside=True needs split_walk (the certified split it places beside the WY pass)")
    if split_check is None:
        split_check = "bounds" if split_beside else "posterior"
    if split_check not in ("bounds", "posterior"):
        raise ValueError(f"split_check must be None, 'bounds' or 'posterior', got {split_check!r}")
    if split_beside and split_check == "posterior":
        raise ValueError("split_beside=True takes split_check='bounds' (the posterior check runs after the WY pass)")
    if split_check == "posterior" and split_warmup is not None and _is_int(split_warmup, 1) \
            and split_warmup > splits.POSTERIOR_MAX_WARMUP:
        raise ValueError(f"split_warmup must be at most {splits.POSTERIOR_MAX_WARMUP} chunks with "
                         f"split_check='posterior' (its margin), got {split_warmup}")
    if split_launches is None:
        split_launches = 1 if NT < splits.ONE_LAUNCH_BELOW else 2
    if split_launches not in (1, 2) or isinstance(split_launches, bool):
        raise ValueError(f"split_launches must be None, 1 or 2, got {split_launches!r}")
    if walk_descriptors not in ("host", "kernel"):
        raise ValueError(f"walk_descriptors must be 'host' or 'kernel', got {walk_descriptors!r}")
    if split_heads_in not in ("kernel", "wy"):
        raise ValueError(f"split_heads_in must be 'kernel' or 'wy', got {split_heads_in!r}")
    if split_heads_in == "wy" and split_check == "bounds":
        raise ValueError("split_heads_in='wy' takes split_check='posterior' (the bounds beside the WY pass need the "
                         "heads before it)")
    # Without l2norm the automatic split takes only the heads whose warm-ups' keys keep beta |k|^2 <= 2
    # (split_walk.forgetting_heads with the keys: its own kernel), so only with the posterior check
    # and the heads from that kernel (the bounds and the WY pass's marks take unit keys).
    auto_split = auto_split and (use_qk_l2norm or (split_check == "posterior" and split_heads_in == "kernel"))
    for name, value in (("bounds_priority", bounds_priority), ("walk_priority", walk_priority)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValueError(f"{name} must be an int (a CUDA stream priority), got {value!r}")
    if forced_split and (walk != "gluon_t" or cu_seqlens is not None or (B > 1 and T % BT != 0)):
        raise ValueError("split_walk (the certified split) takes walk='gluon_t' on dense sequences whose chunks "
                         f"read no other sequence's rows (B = 1 or T a multiple of the chunk), got walk={walk!r}"
                         f"{', cu_seqlens' if cu_seqlens is not None else ''}, B={B}, T={T}")
    if pieces is None:
        pieces = choose_pieces(N * HV * NV, NT, BT, num_sms(q.device), flags) if (
            cu_seqlens is None and P == 1 and q.device.type in ("cuda", "meta") and not triton_interpreting()) else 1
    pieces = max(1, min(int(pieces), NT))
    if wy_maxnreg is None and wy_split > 0 and (not attn_in or (f16 and pieces == 1 and wy_heads == 1)) \
            and not triton_interpreting():
        # Three WY programs an SM instead of two: 2-4% faster on an H200 without stored attention (v3);
        # for the fp16 walk's one-head WY pass only where it runs alone (one piece: with flags too, it
        # then runs first), 1-3% off the wide shapes and varlen, while beside the walk (pieces) it was
        # 5% slower at B1 x T32k (NOTES.md v15). Two heads a program spill and serialise their matrix
        # products at 168: ~1% slower than no cap there (v16).
        wy_maxnreg = 168
    return Plan(B=B, T=T, H=H, K=K, HV=HV, V=V, N=N, BT=BT, BK=BK, BV=BV, NV=NV, NT=NT, BLOCK=BLOCK, P=P, L=L,
                precision=precision, dot_dtype=dot_dtype, f16_dot=f16_dot, wy_dtype=wy_dtype, wy_split=wy_split,
                state_split=state_split, inverse=inverse, attn_in=attn_in, t_in=t_in, f16=f16,
                qk_copies=qk_copies, wy_heads=wy_heads,
                wy_fallback=wy_fallback, wy_maxnreg=wy_maxnreg, num_warps=num_warps, num_stages=num_stages, walk=walk,
                walk_stages=walk_stages, walk_warps=walk_warps, walk_maxnreg=walk_maxnreg, fused=fused,
                walk_loads=walk_loads, walk_tma=walk_tma, q_late=q_late, fast_dots=fast_dots,
                longest_first=longest_first, pieces=pieces, flags=flags, capturing=capturing, graph_safe=graph_safe and walk == "gluon",
                beside=beside,
                flag_group=flag_group, overlap=overlap, auto_split=auto_split,
                forced_split=forced_split, split_walk=split_walk, split_warmup=split_warmup,
                split_check=split_check, split_beside=split_beside, bounds_priority=bounds_priority,
                walk_priority=walk_priority, split_launches=split_launches, split_heads_in=split_heads_in,
                walk_descriptors=walk_descriptors, decays_by_head=decays_layout == "heads",
                maps_stages=maps_stages or walk_stages, common=common)


def _f16_scale(scale: float) -> bool:
    """Whether the fp16 walk keeps P = scale q k^T D in fp16's normal range (F16_SCALES)."""
    return F16_SCALES[0] <= abs(scale) <= F16_SCALES[1]

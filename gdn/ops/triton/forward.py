"""The launcher of the Triton forward of Gated DeltaNet: a parallel WY pass, then a state walk
that writes the outputs.

1. ``wy_kernel`` (gdn.ops.triton.wy): every chunk of every sequence and head at once, what does not
   depend on the state: on the bf16 path by default T diag(beta) = (I + A)^-1 diag(beta) [tokens, HV,
   BT] (the walk forms the writes U = T diag(beta) (v - diag(r e^G) k S) from it), each chunk's
   output attention P = (q k^T . D), scaled, and the cumulative decays G; otherwise the WY factors
   w [tokens, HV, K] and u [tokens, HV, V] (U = u - w S).
2. ``_segment_maps_kernel`` (gdn.ops.triton.chunk_fwd): only when sequences x heads cannot fill the
   GPU, the affine maps that join the segments of a sequence exactly.
3. ``_chunk_fwd_kernel`` (gdn.ops.triton.chunk_fwd): the state walk and the outputs. By default (bf16
   inputs with l2norm) its products take one fp16 operand each, the state and values scaled by
   powers of two (gdn.ops.triton.walk_f16), from fp16 copies of T diag(beta), P and the normalised
   q and k that the WY pass stores; elsewhere two bf16 parts per computed operand.

When the walk takes at most one program per SM (one sequence, or a few), it is latency-bound and
leaves room on every SM: the launcher then runs the WY pass beside it. By default (``overlap="flags"``)
the WY pass is one launch over all chunks in order on the caller's stream, counting each group of
chunks done, and the walk one launch on a side stream that waits for each group's count (two
launches, whatever the length). Otherwise (``overlap="pieces"``, and under CUDA graph capture) the
chunks are cut into pieces, the WY pass of piece i + 1 beside the walk of piece i, events between
them and the state carried between the walk's launches in the final-state buffer.
How the work is cut (segments, pieces) and placed on streams: gdn.ops.triton.schedule.
"""
from __future__ import annotations

import functools
import numbers

import torch
import triton
import triton.language as tl

from ..common import triton_interpreting
from .chunk_fwd import _chunk_fwd_kernel, _segment_maps_kernel
from .chunk_out import _chunk_out_kernel
from . import split_walk as splits      # (triton_forward's split_walk argument shadows the module's name)
from .schedule import (cdiv, choose_flag_group, choose_pieces, choose_segments, cuda_major, next_pow2,
                       num_sms, on_stream, on_tensor_device, side_streams)
from .wy import wy_kernel

SUBBLOCK = 16            # diagonal-block size of the in-chunk triangular inverse
INVERSES = ("blocks", "blocks_parts", "blocks_f16", "blocks_f16_subst", "f16_subst", "f16_subst_t", "product",
            "substitution")   # inverse.unit_lower_inverse
RING_CHUNKS = 32         # outputs="beside": chunks a piece at most (the ring holds two pieces)

_TL_DTYPES = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


def _tma_ready(*tensors) -> bool:
    """Whether the walk's tiles of these [tokens, heads, dim] tensors can move by TMA (sm_90 or later,
    or the interpreter): starts and rows in 16-byte multiples."""
    if not all(t.data_ptr() % 16 == 0 and t.shape[-1] * t.element_size() % 16 == 0 for t in tensors):
        return False
    if triton_interpreting():
        return True
    return tensors[0].is_cuda and cuda_major(tensors[0].device) >= 9


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


def _maxnreg(cap) -> dict:
    """A kernel launch's register cap: maxnreg=cap, none for None or 0."""
    return dict(maxnreg=cap) if cap else {}


def _ensure_allocator() -> None:
    """TMA descriptors made in a kernel live in a scratch buffer that Triton asks an allocator for at
    launch: a torch one, unless the caller has set theirs."""
    allocation = getattr(triton.runtime, "_allocation", None)     # Triton's own module (3.6)
    current = getattr(allocation, "_allocator", None)
    if current is None or type(current.get()).__name__ == "NullAllocator":
        # On the current device: triton_forward runs under its tensors' device (on_tensor_device).
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))


@on_tensor_device
def triton_forward(q, k, v, g, beta, *, scale: float, initial_state=None, output_final_state=False,
                   cu_seqlens=None, use_qk_l2norm=False, chunk_size=64, num_segments=None,
                   fast_dots=False, precision=None, wy_dtype=torch.float32, inverse=None, wy_split=None,
                   state_split=2, block_v=None, walk_stages=None, programs_per_sm=None, num_warps=4,
                   num_stages=1, wy_maxnreg=None, walk_maxnreg=None, wy_heads=None, wy_fallback=None, walk_warps=None,
                   attention="stored",
                   factors=None,
                   longest_first=True, outputs="walk", ring_chunks=RING_CHUNKS, pieces=None, fused=True,
                   overlap="flags", flag_group=None, walk_loads="dots", walk_tma=None, q_late=False,
                   operands=None, walk=None, split_walk=None, split_warmup=None, split_beside=False, split_check=None,
                   bounds_priority=-1, out=None):
    """Launch the forward. Arguments and results as :func:`gdn.gated_delta_rule` (checked there).

    Extra knobs (benchmarks and tests): ``num_segments`` forces the per-sequence split (dense batches
    only; default chooses from the SM count and ``programs_per_sm``, the state-walk programs one SM
    holds: default 1 with ``walk_stages`` > 1, whose shared memory fills an SM, else 2); ``inverse``
    how the in-chunk triangular inverse is formed (one of INVERSES: gdn.ops.triton.inverse.unit_lower_inverse);
    ``out`` an output buffer ``[B, T, HV, V]`` in v's dtype to write into.

    The defaults are the configuration measured correct and fastest on an H200 (benchmarks/NOTES.md,
    v5 to v14; gdn/ops/triton/configs.py). bf16 inputs take the split paths (with l2norm, the walk
    on fp16 operands: ``operands``; fp16 inputs with l2norm take that walk too, v14), where every
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
    walks the longest sequences first, so that no long walk starts in the last wave (the lengths
    sorted on the device, no host sync). ``outputs="beside"`` (split walk with stored attention, in
    pieces; not the default: benchmarks/NOTES.md v6; see gdn.ops.triton.chunk_out) forms each
    piece's outputs in a parallel kernel beside the walk of the next piece, from the chunks' states
    and writes left in a ring of two pieces (pieces of at most ``ring_chunks`` chunks, more pieces
    than asked if need be). The split walk uses ``block_v`` columns of the state per program and
    ``walk_stages`` pipeline stages (loads go straight to shared memory): by default 64 columns and
    1 stage when sequences x heads x V/64 fill two programs per SM, else 32 columns and 2 stages (one
    program per SM, its loads prefetched; the fp16 walk there takes 3 stages, its loads two chunks
    ahead, where they fit 160 KB: v12; on the bf16-split walk 3 stages take q through registers so
    that a WY program still fits beside: slower, benchmarks/NOTES.md v9-v10). ``fused`` (default on; the walk with
    factors "t", at most 32 columns) runs each product of bf16 parts as one matrix product
    (gdn.ops.triton.split_dot.dot_cat): 5 waits for the matrix units a chunk instead of 12.
    ``pieces`` (dense batches in one segment; default
    on a GPU when the walk takes at most one program per SM: see schedule.choose_pieces) runs the WY
    pass beside the walk. How (``overlap``): "flags" (the default, with factors "t" and fewer walk
    programs than SMs, unless a CUDA graph is being captured) launches the WY pass once over all
    chunks in order and the walk beside it, which waits for each group of ``flag_group`` chunks
    (default: schedule.choose_flag_group, 8 or 16) to be counted done; "pieces" cuts the chunks into
    that many pieces, the WY pass of piece i + 1 beside the walk of piece i, ordered by events.
    ``inverse`` defaults to "f16_subst" with the fp16 walk (v19: on plain fp16 products where a chunk's
    |A_ij| <= 1, tf32x3 elsewhere; v18's "blocks_f16_subst" formed the diagonal blocks from pairs of
    fp16 parts), "blocks_parts" on the other split WY passes (v9), "product" otherwise.
    ``walk_loads`` which loads of the walk's loop are pipelined: "dots" (Triton's num_stages: those
    that feed products) or "all" (tl.range's: the output scaling r_q too). ``walk_tma``: the walk's
    tiles move by TMA (sm_90 on, rows in 16-byte multiples): None (default) in the fused walk (v10:
    5-7% faster at B = 1), True wherever the walk forms the writes from T diag(beta), False nowhere.
    ``q_late`` loads q in the walk right before its product (not yet measured on a GPU).
    ``operands`` the walk's matrix operands where it forms the writes from T diag(beta) (bf16 inputs,
    one segment): "bf16_parts" (each computed operand as two bf16 parts, 16 bits; bf16 inputs only)
    or "fp16" (one fp16 operand, 11 bits, the state and values scaled by powers of two:
    gdn.ops.triton.walk_f16; needs use_qk_l2norm and |scale| <= 256; bf16 or fp16 inputs). None
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
    beside the WY pass (one or a few dense sequences x heads, V a multiple of 64, K of 64 or 128,
    outside graph capture) from split_walk.AUTO_MIN_CHUNKS chunks on ("auto": at any length): a
    small kernel over g marks the heads whose warm-ups forget (split_walk.forgetting_heads); the
    others walk in order beside the WY pass as without it, the marked ones in certified segments
    after it (walk_gluon_t, 64 columns, one stage). False (or 0): never.
    True or an int (walk="gluon_t", dense sequences whose chunks read no other sequence's rows;
    opt-in): the certified split of gdn.ops.triton.split_walk for every head, after the WY pass. On
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
    1.4-1.8% faster), else "inline".
    """
    if walk_loads not in ("dots", "all"):
        raise ValueError(f"walk_loads must be 'dots' or 'all', got {walk_loads!r}")
    if walk not in (None, "triton", "gluon", "gluon_t"):
        raise ValueError(f"walk must be None, 'triton', 'gluon' or 'gluon_t', got {walk!r}")
    if chunk_size not in (16, 32, 64):
        raise ValueError(f"backend='triton' supports chunk_size 16, 32 or 64, got {chunk_size} (128 needs more "
                         f"shared memory than an SM has; backend='chunk' takes any power of two)")
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
    N = B if cu_seqlens is None else cu_seqlens.numel() - 1
    if q.dtype == torch.float64:           # no fp64 matrix units: compute from fp32 inputs
        q = q.float()
    q, k, v = q.contiguous(), k.to(q.dtype).contiguous(), v.contiguous()
    if precision is None:
        precision = "tf32x3" if q.dtype == torch.float32 else "tf32"
    g, beta = g.float().contiguous(), beta.float().contiguous()
    h0 = None if initial_state is None else initial_state.float().contiguous()
    o = torch.empty(B, T, HV, V, dtype=v.dtype, device=v.device) if out is None else out
    ht = torch.empty(N, HV, K, V, dtype=torch.float32, device=v.device) if output_final_state else None
    if T == 0:
        if ht is not None:
            ht.copy_(h0) if h0 is not None else ht.zero_()
        return o, ht

    BK = max(16, next_pow2(K))
    BT = chunk_size
    if operands == "bf16_parts" and q.dtype != torch.bfloat16:
        raise ValueError(f"operands='bf16_parts' needs bf16 inputs, got {q.dtype}")
    # fp16 inputs take the split machinery only into the fp16 walk, which reads q and k normalised to
    # fp16 and v as it is (their values are not sums of bf16 parts, which the bf16-split walk needs).
    f16_inputs = (q.dtype == torch.float16 and operands in (None, "fp16") and use_qk_l2norm and abs(scale) <= 256
                  and outputs == "walk" and attention == "stored" and factors != "wu" and wy_split != 0
                  and num_segments in (None, 1) and state_split == 2 and not fast_dots and wy_dtype == torch.float32)
    split_inputs = q.dtype == torch.bfloat16 or f16_inputs
    state_split = state_split if split_inputs and not fast_dots and wy_dtype == torch.float32 else 0
    if wy_split is None:
        wy_split = 2 if state_split > 0 else 3     # w and u as exact as the walk that reads them
    wy_split = wy_split if split_inputs else 0
    if wy_heads is not None and wy_heads > 1 and wy_split == 0:
        raise ValueError("wy_heads > 1 needs the split WY pass: bf16 inputs with wy_split unset, 2 or 3, or "
                         "fp16 inputs on the fp16 walk (use_qk_l2norm, one segment, state_split=2, "
                         "fast_dots=False, wy_dtype=torch.float32)")
    if attention not in ("walk", "stored"):
        raise ValueError(f"attention must be 'walk' or 'stored', got {attention!r}")
    attn_in = attention == "stored" and wy_split > 0 and state_split > 0    # elsewhere the walk forms it
    if inverse not in (None, *INVERSES):
        raise ValueError(f"inverse must be one of {', '.join(map(repr, INVERSES))}, got {inverse!r}")
    inverse_given = inverse is not None
    if inverse is None:
        inverse = "blocks_parts" if wy_split > 0 else "product"
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
    dummy = o

    # Segments (dense batches that cannot fill the GPU), joined by their affine maps.
    if operands not in (None, "bf16_parts", "fp16"):
        raise ValueError(f"operands must be 'bf16_parts' or 'fp16', got {operands!r}")
    f16 = operands == "fp16" or f16_inputs   # asked for (fp16 inputs: their only split walk); else where it applies
    if cu_seqlens is not None or (f16 and num_segments is None):
        P = 1                      # packed sequences: parallel over sequences x heads already; fp16: one segment
    elif num_segments is not None or (pieces is not None and pieces > 1):
        P = 1 if num_segments is None else max(1, min(int(num_segments), NT))
    else:
        P = choose_segments(N * HV * NV, NT, num_sms(q.device), programs_per_sm)
    L = cdiv(NT, P) if P > 1 else max(NT, 1 << 30)
    if P > 1:
        P = cdiv(NT, L)     # no empty segments
    # What the WY pass hands the walk: w and u, or T diag(beta) from which the walk forms the writes
    # (split path with stored attention, one segment: the segment maps read w and u).
    if flag_group is None:
        flag_group = choose_flag_group(NT)
    for name, value in (("ring_chunks", ring_chunks), ("flag_group", flag_group)):
        if not _is_int(value, 1):
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if outputs not in ("walk", "beside"):
        raise ValueError(f"outputs must be 'walk' or 'beside', got {outputs!r}")
    if overlap not in ("pieces", "flags"):
        raise ValueError(f"overlap must be 'pieces' or 'flags', got {overlap!r}")
    if factors not in (None, "wu", "t"):
        raise ValueError(f"factors must be 'wu' or 't', got {factors!r}")
    t_in = attn_in and P == 1 and factors != "wu"
    # fp16 operands (walk_f16): 11 bits a product where bf16 parts keep 16 in two; more exact than the
    # 2e-3 aim on an H200 (o 1.72e-3, S 4.2e-4) and 14-18% faster at every bench shape (NOTES.md v11).
    f16_fits = t_in and use_qk_l2norm and abs(scale) <= 256 and outputs == "walk"
    if operands is None:
        f16 = f16_fits
    if f16 and not f16_fits:
        raise ValueError("operands='fp16' needs bf16 or fp16 inputs, use_qk_l2norm=True, |scale| <= 256 and the "
                         "walk that forms the writes from T diag(beta) and the outputs (one segment, factors='t', "
                         "outputs='walk', attention='stored', state_split=2, wy_split 2 or 3, fast_dots=False, "
                         "wy_dtype=torch.float32)")
    assert not (q.dtype == torch.float16 and state_split > 0 and not f16), "fp16 inputs on the bf16-split walk"
    if wy_heads is None:
        # Two value heads a WY program on the fp16 walk where they share a q/k head: q, k, k k^T and
        # q k^T once for both; 1-2% off the wide shapes and varlen, 4-6% off B = 1 from 32k tokens on
        # (benchmarks/NOTES.md v16). One head elsewhere (the bf16-parts passes: not measured).
        wy_heads = 2 if f16 and (HV // H) % 2 == 0 else 1
    if f16 and not inverse_given:
        # The inverse on plain fp16 products where a chunk's |A_ij| <= 1 (tf32x3 elsewhere and where T
        # leaves fp16's range): the 4 x 4 blocks by a product, the 16 x 16 and 64 x 64 ones by block
        # substitution (v18-v19: 2-3% off the wide shapes, o unchanged on an H200); T is stored at
        # fp16's 11 bits here, so the 11-bit inverse loses nothing the walk kept.
        inverse = "f16_subst"
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

    # 1. The state-free pass over every chunk, in parallel. The split state walk reads from it T diag(beta)
    #    (or w) as bf16 parts and the l2-norm factors of q and k.
    w = w2 = w3 = u = rq = rk = tb = tb2 = qn = kn = dummy
    if state_split > 0:
        if t_in and f16:
            tb = tb2 = torch.empty(B, T, HV, BT, dtype=torch.float16, device=q.device)
            qn, kn = torch.empty(2, B, T, H, K, dtype=torch.float16, device=q.device)
        elif t_in:
            tb_parts = torch.empty(2, B, T, HV, BT, dtype=torch.bfloat16, device=q.device)
            tb, tb2 = tb_parts[0], tb_parts[1]
        else:
            w_parts = torch.empty(state_split, B, T, HV, K, dtype=torch.bfloat16, device=q.device)
            w, w2, w3 = w_parts[0], w_parts[1], w_parts[state_split - 1]
        if use_qk_l2norm:
            rq = torch.empty(B, T, HV, dtype=torch.float32, device=q.device)
            rk = torch.empty(B, T, HV, dtype=torch.float32, device=q.device)
    else:
        w = torch.empty(B, T, HV, K, dtype=wy_dtype, device=q.device)
    if not t_in:
        u = torch.empty(B, T, HV, V, dtype=torch.float32 if state_split > 0 else wy_dtype, device=q.device)
    Gc = attn = attn2 = dummy
    if attn_in:
        Gc = torch.empty(B, T, HV, dtype=torch.float32, device=q.device)
        if f16:
            attn = attn2 = torch.empty(B, T, HV, BT, dtype=torch.float16, device=q.device)
        else:
            attn_parts = torch.empty(2, B, T, HV, BT, dtype=torch.bfloat16, device=q.device)
            attn, attn2 = attn_parts[0], attn_parts[1]
    # The flags need a WY program to fit beside every walk program (4 warps each, a walk of <= 32
    # columns in <= 3 stages: the fp16 walk's three take 173 + 33 KB of shared memory, run on an H200
    # in v12; the split walk's fit with q through registers, Q_REGS: 189 + 33 KB): otherwise walks of
    # concurrent calls could fill every SM and leave no room for the WY passes they wait for.
    # A WY program fits beside a walk program on one SM: 32 columns (or walk_gluon_t's 64 at one stage).
    beside = num_warps == 4 and (walk_warps or num_warps) == 4 and (
        BV <= 32 and walk_stages <= 3 or walk == "gluon_t" and BV == 64 and walk_stages == 1)
    flags = (overlap == "flags" and t_in and outputs == "walk" and beside and N * HV * NV < num_sms(q.device)
             and not (q.is_cuda and torch.cuda.is_current_stream_capturing()))
    # The Gluon walk's tiles are 64 rows (four warps of 16: one warpgroup) and its shared memory is
    # walk_gluon_kernel's rings in fp16: STAGES x (q, v, T, P) and STAGES + 1 slots of k; the state and
    # two [BT, BV] operands; a margin for the barriers.
    gluon_smem = walk_stages * (2 * BT * K + 2 * BT * BV + 4 * BT * BT) + (walk_stages + 1) * 2 * BT * K \
        + 2 * K * BV + 4 * BT * BV + 1024
    # Beside the WY pass (flags) only where a sequence's chunks read no rows of another (the next
    # sequence's rows are read before its WY programs are waited for: MASK_ROWS zeroes v and U there,
    # but k's rows enter k S and the state's update, so they must be written), and where a WY program
    # fits beside the walk (K = 256: 229 KB of walk alone).
    gluon_flags = flags and (B == 1 or T % BT == 0) and K <= 128
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
        if not gluon_flags or forced_split:
            pieces = 1             # the WY pass first, then the walk (else beside it, waiting on its counts)
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
    if isinstance(bounds_priority, bool) or not isinstance(bounds_priority, numbers.Integral):
        raise ValueError(f"bounds_priority must be an int (a CUDA stream priority), got {bounds_priority!r}")
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
    ring = outputs == "beside" and attn_in and pieces > 1      # else the walk forms the outputs
    if ring:         # the ring holds two pieces: at most ring_chunks chunks each, whatever T
        pieces = min(NT, max(pieces, cdiv(NT, ring_chunks)))

    if cu_seqlens is None:
        chunk_offsets, slot_seqs, seq_order = dummy, dummy, dummy
    else:
        lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).to(torch.int32)
        seq_order = dummy
        if longest_first:          # the walk takes the longest sequences first (on the device: no host sync)
            seq_order = torch.argsort(lengths, descending=True, stable=True).to(torch.int32)
        chunk_offsets = torch.zeros(N + 1, dtype=torch.int32, device=q.device)
        torch.cumsum((lengths + BT - 1) // BT, 0, out=chunk_offsets[1:])
        # Each WY slot's sequence: the first whose chunks end after the slot (empty ones end where they
        # start, so they own no slot); slots past the last chunk go to the last sequence.
        slot_ids = torch.arange(NT + N, dtype=torch.int32, device=q.device)
        slot_seqs = torch.searchsorted(chunk_offsets[1:], slot_ids, right=True, out_int32=True).clamp_(max=N - 1)

    def wy_pass(c_first, n_chunks, done=None, feed=None):
        """WY factors of chunks c_first .. c_first + n_chunks - 1 of every sequence, in parallel (with
        done: all chunks, in order, each counted in done when finished; with feed = (P, L, W) in the
        order of the certified split's segments)."""
        slots = N * n_chunks if cu_seqlens is None else NT + N     # varlen: an upper bound, no host sync
        wy_kernel[(slots * (HV // wy_heads),)](
            q, k, v, g, beta, w, w2, w3, u, rq, rk, Gc, attn, attn2, tb, tb2, qn, kn, scale, chunk_offsets,
            slot_seqs, dummy if cu_seqlens is None else cu_seqlens, dummy if done is None else done, T, n_chunks,
            slots, c_first, *(feed or (0, 0, 0)), SIGNAL=done is not None, FEED=feed is not None,
            GROUP=flag_group if done is not None else 1,
            BV=max(16, next_pow2(V)), BLOCK=BLOCK, LOG_BLOCKS=(BT // BLOCK).bit_length() - 1,
            IS_VARLEN=cu_seqlens is not None, INVERSE=inverse, WY_SPLIT=wy_split,
            BC=min(64, BK, next_pow2(V)), W_PARTS=state_split, STORE_NORMS=state_split > 0 and not f16,
            STORE_ATTN=attn_in, STORE_T=t_in, F16=f16, F16_DOT=f16_dot, HEADS=wy_heads,
            FALLBACK_AFTER=wy_fallback == "after", **common, **_maxnreg(wy_maxnreg))

    walk_launch = dict(common, num_stages=walk_stages, num_warps=walk_warps or num_warps)
    fused_walk = fused and t_in and not ring and BV <= 32 and not f16     # each product of parts as one
    maps_A = maps_A2 = maps_A3 = maps_B = dummy
    walk_q, walk_k = (qn, kn) if f16 else (q, k)      # the fp16 walk reads the WY pass's normalised copies
    tma = ((fused_walk or (f16 and BV <= 32)) if walk_tma is None else walk_tma and t_in and not ring) and \
        _tma_ready(walk_q, walk_k, v, o)
    if tma and q.is_cuda and not triton_interpreting():
        _ensure_allocator()

    rings = (dummy,) * 4
    piece_chunks = cdiv(NT, pieces)          # the most chunks a piece holds: its ring slots
    if ring:
        # Two pieces of chunk states (bf16 parts of -S) and writes (bf16 parts of U).
        slots = 2 * piece_chunks
        ring_states = torch.empty(2, slots, N * HV, K, V, dtype=torch.bfloat16, device=q.device)
        ring_writes = torch.empty(2, slots, N * HV, BT, V, dtype=torch.bfloat16, device=q.device)
        rings = (ring_states[0], ring_states[1], ring_writes[0], ring_writes[1])

    split = None                   # walk_gluon_t's certified split (split_walk: formed beside the WY pass)
    skip_heads = None              # the automatic split's heads, which walk_gluon then skips
    walk_descs = None              # descriptors both Gluon walks read (the automatic split launches both)

    def state_walk(c_first, c_end, h_in, h_out, ring_base=0, done=None):
        """The walk over chunks c_first .. c_end - 1 from state h_in (None: zeros), writing o (or, with
        the ring, the chunks' states and writes from slot ring_base on) and, when h_out is given, the
        state after the last chunk."""
        if walk == "gluon":            # all chunks from h0 in one launch (pieces only with flags: done)
            from .walk_gluon import walk_gluon
            walk_gluon(qn, kn, v, tb, attn, Gc, o, h_in, h_out, scale, H, HV, BT, BV, walk_stages,
                       walk_warps or num_warps, walk_maxnreg, cu_seqlens,
                       seq_order if cu_seqlens is not None and longest_first else None, done,
                       flag_group if done is not None else 1, skip_heads, walk_descs)
            return
        if walk == "gluon_t":          # as "gluon", on the transposed state
            from .walk_gluon_t import walk_gluon_t
            walk_gluon_t(qn, kn, v, tb, attn, Gc, o, h_in, h_out, scale, H, HV, BT, BV, walk_stages, cu_seqlens,
                         seq_order if cu_seqlens is not None and longest_first else None, done,
                         flag_group if done is not None else 1, split)
            return
        _chunk_fwd_kernel[(NV * N * HV, P)](
            walk_q, walk_k, g, beta, w, w2, w3, u, rq, rk, Gc, attn, attn2, v, tb, tb2, o, dummy if h_in is None else h_in,
            dummy if h_out is None else h_out,
            maps_A, maps_A2, maps_A3, maps_B, dummy if cu_seqlens is None else cu_seqlens, seq_order, *rings,
            dummy if done is None else done, scale, T, L, P, c_first, c_end, ring_base, N * HV, BV=BV,
            IS_VARLEN=cu_seqlens is not None, WAIT=done is not None, GROUP=flag_group if done is not None else 1,
            AHEAD=walk_stages, HAS_H0=h_in is not None, STORE_FINAL=h_out is not None, FAST_DOTS=fast_dots,
            SPLIT=state_split,
            HAS_MAPS=P > 1, ATTN_IN=attn_in, T_IN=t_in,
            LONGEST_FIRST=longest_first and cu_seqlens is not None, OUT_RING=ring,
            FUSED=fused_walk, Q_REGS=fused_walk and walk_stages >= 3, ALL_LOADS=walk_loads == "all", TMA=tma,
            Q_LATE=q_late, F16=f16, F16_DOT=f16_dot,
            **walk_launch, **_maxnreg(walk_maxnreg))

    def output_pass(c_first, c_end, ring_base):
        """The outputs of chunks c_first .. c_end - 1 from the ring (slots ring_base on), in parallel."""
        _chunk_out_kernel[(NV, c_end - c_first, N * HV)](
            q, rq, Gc, attn, attn2, *rings, o, scale, T, N * HV, c_first, ring_base, H=H, HV=HV, K=K, V=V, BT=BT,
            BK=BK, BV=BV, USE_L2NORM=use_qk_l2norm, DOT_DTYPE=dot_dtype, num_warps=num_warps)

    if flags and pieces > 1:
        # One WY launch over all chunks, in order, and the walk beside it on a side stream, waiting
        # for each group of chunks to be counted done. It cannot deadlock: the WY pass waits for
        # nothing, it is launched first (so a GPU, tool or CUDA_LAUNCH_BLOCKING that runs kernels one
        # at a time finishes it before the walk starts), and the walk leaves at least one SM free
        # for it, and beside each walk program room for a WY program (135 + 33 KB of shared memory,
        # 2 x 32 K registers: ``beside``), so walks of other calls cannot crowd it out either. Fewer
        # walk programs than SMs also means all of them are placed at once: while a kernel of the
        # higher-priority stream has programs waiting to be placed, the GPU places none of the WY
        # pass's (a walk of 512 programs beside it hung at B8 x T4k on an H200: NOTES.md v29). A graph
        # being captured takes the pieces below: a graph may run two kernels of different streams in
        # either order.
        done = torch.zeros(N, cdiv(NT, flag_group), HV, dtype=torch.int32, device=q.device)
        auto = None
        splits.last_heads = splits.last_outcome = None        # (this call's, if it splits)
        long_enough = split_walk == "auto" or NT >= splits.AUTO_MIN_CHUNKS
        if auto_split and long_enough and walk == "gluon" and V % 64 == 0 and K in (64, 128):
            # Placed as split_walk=True's after the WY pass: 64 columns a program, two programs an SM.
            auto = splits.plan(True, split_warmup, NT, N * HV * (V // 64), num_sms(q.device), flag_group, False)
            P_s, L_s, W_s = auto[:3]
            L0_s = L_s                           # (the bounds' check: every segment L chunks)
            if split_check == "posterior" and P_s > 1:
                P_s, L0_s, L_s = splits.posterior_segments(NT, P_s, W_s)
            auto = None if P_s < 2 else auto
        if auto is None:
            with side_streams(q.device, 1) as (main, side):
                wy_pass(0, NT, done)
                with on_stream(side):
                    state_walk(0, 1 << 30, h0, ht, done=done)
            return o, ht
        # The automatic split: on the first side stream the heads whose warm-ups forget (from g and
        # beta, a few microseconds), then the ordered walk of the others beside the WY pass; with
        # split_check="bounds", on the second the certificates' bounds, launched after that walk
        # (their many small programs would otherwise take the SMs the walk's programs wait for: 0.3
        # ms later at B1 x T128k on an H200, NOTES.md v26); after the WY pass, on the caller's
        # stream, the chosen heads' segments (walk_gluon_t, two programs an SM: the SM count's
        # segments, as split_walk=True) and, posterior, their check. Either walk returns at once for
        # the other's heads, and neither waits for the other (the segments start after the WY pass,
        # which the ordered walk alone waits on): the flags' argument holds as without the split.
        from .walk_gluon import shared_descriptors
        posterior = split_check == "posterior"              # (no second side stream: no bounds beside)
        with side_streams(q.device, 1 if posterior else 2, priorities=(-2,) if posterior else (-2, bounds_priority)) \
                as (main, side, *side2):
            wy_pass(0, NT, done)
            walk_descs = shared_descriptors(qn, kn, tb, attn, BT)
            with on_stream(side):
                skip_heads = splits.forgetting_heads(g, beta, BT, P_s, L_s, W_s, L0_s)
                heads_ready = None if side is None else side.record_event()
                state_walk(0, 1 << 30, h0, ht, done=done)
            if posterior:
                # Nothing beside the WY pass: the segments check their warm-ups against each other's
                # states (buffers made on the caller's stream), so only the heads are waited for.
                cert = splits.posterior(P_s, L0_s, L_s, W_s, g, beta, K, V, BT, 64, trusted=skip_heads)
                made = [skip_heads]
                if main is not None:
                    main.wait_event(heads_ready)
            else:
                side2 = side2[0]
                with on_stream(side2):
                    # Only the chosen heads' bounds: with long memory the bounds then read nothing.
                    if side2 is not None:
                        side2.wait_event(heads_ready)
                    cert = splits.certified(P_s, L_s, W_s, v, g, beta, h0, K, BT, 64, skip_heads)
                made = [skip_heads, *cert.buffers]
                if main is not None:
                    main.wait_stream(side2)          # (which waited for the heads)
            if main is not None:                     # (meta tensors: compile_report's recorded launches)
                for t in made:
                    t.record_stream(main)
            splits.last_heads = skip_heads
            from .walk_gluon_t import walk_gluon_t
            walk_gluon_t(qn, kn, v, tb, attn, Gc, o, h0, ht, scale, H, HV, BT, 64, 1, split=cert,
                         split_heads=skip_heads, descs=walk_descs)
        return o, ht

    if pieces > 1:
        # The WY pass of piece i + 1 runs beside the walk of piece i: the walk fills each SM with one
        # latency-bound program and leaves room for a WY program. The state is carried between pieces.
        # With the ring, the outputs of piece i are formed on a third stream beside the walk of piece
        # i + 1; the walk of piece i + 2 reuses piece i's ring slots, so it waits for those outputs.
        bounds = [NT * i // pieces for i in range(pieces + 1)]
        carry = ht if ht is not None else torch.empty(N, HV, K, V, dtype=torch.float32, device=q.device)
        outputs_done = []
        with side_streams(q.device, 2 if ring else 1) as (main, side, *rest):
            cuda = main is not None
            for i in range(pieces):
                wy_pass(bounds[i], bounds[i + 1] - bounds[i])
                if cuda:                                       # the walk waits for this piece's WY pass
                    side.wait_event(main.record_event())
                    if ring and i >= 2:
                        side.wait_event(outputs_done[i - 2])
                with on_stream(side):
                    state_walk(bounds[i], bounds[i + 1], h0 if i == 0 else carry, carry, (i % 2) * piece_chunks)
                if ring:
                    if cuda:
                        rest[0].wait_event(side.record_event())
                    with on_stream(rest[0]):
                        output_pass(bounds[i], bounds[i + 1], (i % 2) * piece_chunks)
                    if cuda:
                        outputs_done.append(rest[0].record_event())
        return o, ht

    if forced_split:
        splits.last_outcome = None
        programs = N * HV * NV
        capturing = q.is_cuda and torch.cuda.is_current_stream_capturing()
        beside_ok = split_beside and overlap == "flags" and t_in and outputs == "walk" and beside and not capturing
        P_s, L_s, W_s, group, beside_split = splits.plan(split_walk, split_warmup, NT, programs, num_sms(q.device),
                                                         flag_group, beside_ok)
        if P_s > 1 and beside_split:
            # The WY pass first, over all chunks in the order the segments need them, counting each group
            # done; on the side stream the certificates' bounds beside it, then the segments' walk, which
            # waits for the counts (the flags' argument above: fewer walk programs than SMs).
            flag_group = group
            done = torch.zeros(N, cdiv(NT, flag_group), HV, dtype=torch.int32, device=q.device)
            with side_streams(q.device, 1) as (main, side):
                wy_pass(0, NT, done, feed=(P_s, L_s, W_s))
                with on_stream(side):
                    split = splits.certified(P_s, L_s, W_s, v, g, beta, h0, K, BT, BV)
                    state_walk(0, 1 << 30, h0, ht, done=done)
            return o, ht
        # After the WY pass: its launch first, then the bounds on a side stream beside it (their
        # tensors, made there, marked as used on the caller's stream, which the walk runs on); in
        # order on the caller's stream while a graph is captured (no allocations across streams there).
        # The posterior check needs no bounds: its heads' test (the betas) on the caller's stream.
        if split_check == "posterior" and P_s > 1:
            P_s, L0_s, L_s = splits.posterior_segments(NT, P_s, W_s)
            wy_pass(0, NT)
            if P_s > 1:
                split = splits.posterior(P_s, L0_s, L_s, W_s, g, beta, K, V, BT, BV)
            state_walk(0, 1 << 30, h0, ht)
            return o, ht
        with side_streams(q.device, 0 if capturing else 1) as (main, *side):
            wy_pass(0, NT)
            if P_s > 1:
                with on_stream(side[0] if side else None):
                    split = splits.certified(P_s, L_s, W_s, v, g, beta, h0, K, BT, BV)
                if side and main is not None:
                    for t in split.buffers:
                        t.record_stream(main)
    else:
        wy_pass(0, NT)
    if P > 1:
        if state_split > 0:
            A_parts = torch.empty(state_split, N * HV * (P - 1), K, K, dtype=torch.bfloat16, device=q.device)
            maps_A, maps_A2, maps_A3 = A_parts[0], A_parts[1], A_parts[state_split - 1]
        else:
            maps_A = torch.empty(N * HV * (P - 1), K, K, dtype=torch.float32, device=q.device)
        maps_B = torch.empty(N * HV * (P - 1), K, V, dtype=torch.float32, device=q.device)
        NMK = cdiv(K, BV)
        _segment_maps_kernel[(NMK + NV, N * HV, P - 1)](
            q, k, g, beta, w, w2, w3, u, rk, maps_A, maps_A2, maps_A3, maps_B, T, L, P, BM=BV, NMK=NMK,
            FAST_DOTS=fast_dots, SPLIT=state_split, **walk_launch)
    state_walk(0, 1 << 30, h0, ht)
    return o, ht

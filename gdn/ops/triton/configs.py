"""Named configurations of the Triton forward (keywords of ``triton_forward``, which
gdn.ops.triton.plan.plan_forward resolves and documents), shared by the tests,
benchmarks/compile_report.py (registers and spills, no GPU needed), benchmarks/gpu_check.py (timing)
and ``gdn bench --configs``.

"default" is the launcher's defaults (v11-v15 in benchmarks/NOTES.md, measured correct and fastest on
an H200): the output attention and T diag(beta) formed by the WY pass, the writes U by the walk, whose
products take one fp16 operand each, the state and values scaled by powers of two (walk_f16; with
or without l2norm since v50, in one segment: where segments are forced, the bf16-split walk of v10,
every computed fp32 operand cut into two bf16 parts, each product of parts as one matrix product),
its tiles moved by TMA at one program an SM, and on a GPU,
where the walk leaves room, the WY pass running beside it (one launch each, the walk waiting on the
WY pass's counts; elsewhere the WY pass runs first, at 168 registers a thread), varlen sequences
walked longest first. "bf16 parts" is v10's default walk; the
knobs of that walk (fused, q_late, walk_loads, Q_REGS with three stages) reach it as "bf16 parts&...". "v4", "v3" and "v2" are the
earlier defaults' kernels (v2: fp32 tiles, tf32 products), "old" v2 as first measured; they take
today's launch policy (pieces, order). The rest vary one knob of the default.
"""
import torch

SPLIT = dict(inverse="blocks_parts", wy_split=2, state_split=2, attention="stored", factors="t",
             operands="bf16_parts")   # v10's defaults: the bf16-split walk
V4 = dict(SPLIT, inverse="blocks", factors="wu")   # no fused walk, no flags (both need T diag(beta)): v4's
V3 = dict(inverse="blocks", wy_split=3, state_split=2, attention="walk", pieces=1)
V2 = dict(inverse="product", wy_split=0, state_split=0, attention="walk", pieces=1)
OLD = dict(V2, inverse="substitution")

CONFIGS = {
    "default": {},
    "v4": V4,
    "v3": V3,
    "v2": V2,
    "old": OLD,
    "v2 fast+bf16 wy": dict(V2, fast_dots=True, wy_dtype=torch.bfloat16),   # FLA's roundings
    # the WY pass and the walk
    "wy3": dict(wy_split=3),                          # w and u exact as fp32 (24 bits) instead of 16
    "attention walk": dict(attention="walk"),         # the walk forms the output attention (v3)
    "wy maxnreg 168": dict(wy_maxnreg=168),           # three WY programs an SM (the default where it runs alone: v15)
    "wy own regs": dict(wy_maxnreg=0),                # no cap: two WY programs an SM (v14's default)
    "wy maxnreg 128": dict(wy_maxnreg=128),           # four (two beside a walk program): slower (v8)
    "wy product": dict(inverse="product"),
    "wy 8 warps": dict(num_warps=8, walk_warps=4, wy_maxnreg=128),   # the WY pass in two warpgroups
    "decays by token": dict(decays_layout="tokens"),  # G stored [tokens, HV] for the Gluon walks too (before v44)
    "qk copies": dict(qk_copies=True),                # fp16 inputs without l2norm: the WY pass's copies (before v51)
    "wy blocks": dict(inverse="blocks"),              # Triton's tf32x3, guarded against infinities (v8)
    "launch order": dict(longest_first=False),       # varlen walks the sequences in order (before v6)
    "wy substitution": dict(inverse="substitution"),
    "wy3 + v2 walk": dict(wy_split=3, state_split=0, attention="walk"),
    # pieces: the WY pass of piece i + 1 beside the walk of piece i (automatic: 8 at B1 x T32k)
    "pieces 1": dict(pieces=1),
    "pieces 4": dict(pieces=4),
    "pieces 16": dict(pieces=16),
    "pieces 2": dict(pieces=2),
    "pieces 8": dict(pieces=8),
    # the walk's shape: state columns a program, pipeline stages, segments, warps
    "bv32 st2": dict(block_v=32, walk_stages=2),
    "bv32 st1": dict(block_v=32, walk_stages=1, attention="walk"),   # with stored attention it crashes (NOTES v5)
    "bv64 st1": dict(block_v=64, walk_stages=1),
    "walk loads": dict(walk_loads="all"),   # tl.range pipelines r_q too: 2% slower at B = 1 (v10)
    "no tma": dict(walk_tma=False),    # the fused walk's tiles by block pointers (v9)
    "tma wide": dict(walk_tma=True),   # TMA in the wide walk too (64 columns, one stage)
    "q late": dict(q_late=True),       # q loaded right before its product: its own TMA barrier (not yet timed)
    "walk st3": dict(walk_stages=3),   # B = 1: three stages (q via registers): spills, 13% slower (v10)
    "walk st3 pieces": dict(walk_stages=3, overlap="pieces"),   # the same without the waits: 16 B spills, not 68
    "bv64 st1 P=2": dict(block_v=64, walk_stages=1, num_segments=2, pieces=1),
    "bv32 st2 P=2": dict(block_v=32, walk_stages=2, num_segments=2, pieces=1),
    # few value heads at B = 1 (e.g. a tensor-parallel shard): segments joined by their affine maps on bf16
    # parts, which the defaults took before v55 (P from the SM count: 2 at HV 16, 4 at HV 8, 8 at HV 4,
    # 16 at HV 2 on 132 SMs) and below 8 sequences x value heads in v56; since v57 the maps on fp16
    # operands below 16 (schedule.walks_one_segment), one segment (fp16 walk, flags, automatic split) above
    "maps P=2": dict(num_segments=2, maps="bf16_parts"),
    "maps P=4": dict(num_segments=4, maps="bf16_parts"),
    "maps P=8": dict(num_segments=8, maps="bf16_parts"),
    "maps P=16": dict(num_segments=16, maps="bf16_parts"),
    # ... and the maps on the fp16 walk's operands (v57: the maps and the walk from the WY pass's fp16
    # copies and T diag(beta), as one segment's fp16 walk; A in two bf16 parts, which the walk folds)
    "one segment": dict(num_segments=1),             # the fp16 walk, flags, automatic split, at any heads
    "f16 maps P=2": dict(num_segments=2, maps="f16"),
    "f16 maps P=4": dict(num_segments=4, maps="f16"),
    "f16 maps P=8": dict(num_segments=8, maps="f16"),
    "f16 maps P=16": dict(num_segments=16, maps="f16"),
    "f16 maps P=32": dict(num_segments=32, maps="f16"),
    "f16 maps P=16 ms1": dict(num_segments=16, maps="f16", maps_stages=1),   # maps at one stage: more an SM
    "f16 maps P=32 ms1": dict(num_segments=32, maps="f16", maps_stages=1),
    "f16 maps bv64 P=4": dict(num_segments=4, maps="f16", block_v=64),
    "f16 maps bv64 P=8": dict(num_segments=8, maps="f16", block_v=64),
    "f16 maps bv64 P=16": dict(num_segments=16, maps="f16", block_v=64),
    "walk 8 warps": dict(walk_warps=8),
    # the walk's products, and how the WY pass runs beside the walk (v7)
    "unfused": dict(fused=False),                     # each product of parts on its own (v6's walk)
    "overlap pieces": dict(overlap="pieces"),        # the WY pass in pieces beside the walk, events between (v6)
    "flags 4": dict(flag_group=4),                    # groups of 4 chunks (default 8, 16 from 1024 chunks)
    "flags 8": dict(flag_group=8),                    # groups of 8 at any length (v7, the v8 bench)
    "flags 16": dict(flag_group=16),
    "flags 32": dict(flag_group=32),
    "flags 64": dict(flag_group=64),
    "flags forced": dict(pieces=8),                   # the overlap where no GPU decides it (compile report)
    # the walk on single fp16 operands, scaled by powers of two (walk_f16; v11)
    "fp16": dict(operands="fp16"),                   # the default where it applies (l2norm, one segment)
    "bf16 parts": dict(operands="bf16_parts"),       # v10's walk: each computed operand as two bf16 parts
    "fp16 bv64 st2": dict(operands="fp16", block_v=64, walk_stages=2),
    "fp16 bv64 st1": dict(operands="fp16", block_v=64, walk_stages=1),
    "fp16 bv32 st2": dict(operands="fp16", block_v=32, walk_stages=2),    # v11's narrow walk: loads a chunk ahead
    "fp16 bv32 st1": dict(operands="fp16", block_v=32, walk_stages=1),
    "fp16 bv16 st2": dict(operands="fp16", block_v=16, walk_stages=2),
    "fp16 tma wide": dict(operands="fp16", walk_tma=True),
    "fp16 bv64 w8": dict(operands="fp16", block_v=64, walk_stages=1, walk_warps=8),   # the wide walk in two warpgroups
    "fp16 bv64 st2 w8": dict(operands="fp16", block_v=64, walk_stages=2, walk_warps=8),
    "fp16 bv128 w8": dict(operands="fp16", block_v=128, walk_stages=1, walk_warps=8),   # one program a head
    # 32 columns at one stage, three walk programs an SM: the launcher refuses it on sm_90. With the
    # refusal lifted (v16): shared memory read out of bounds by TMA (compute-sanitizer), wrong results
    # without TMA (o 1.19), out of bounds again at 168 registers
    "fp16 bv32 st1 r168": dict(operands="fp16", block_v=32, walk_stages=1, walk_maxnreg=168),
    # the value heads of a q/k head in one WY program: q, k, k k^T and q k^T once. v16's default on the
    # fp16 walk is two heads with no register cap ("wy heads 2"; "own regs" spells the no-cap out, as
    # timed in v16); "wy heads 1" is v15's default (one head, 168 registers where it runs alone);
    # "wy heads 2 r168" caps two heads everywhere (v16 timed the cap only in one piece: ~1% slower)
    "wy heads 1": dict(wy_heads=1),
    "wy heads 2": dict(wy_heads=2),
    "wy heads 2 own regs": dict(wy_heads=2, wy_maxnreg=0),
    "wy heads 2 r168": dict(wy_heads=2, wy_maxnreg=168),
    # v28's default: the heads of a WY program with no branch between them, the tf32x3 fallback after
    # them all; "wy fallback inline" is v27's (each head's fallback right after its fp16 inverse)
    "wy fallback inline": dict(wy_fallback="inline"),
    "wy tf32x3": dict(inverse="blocks_parts"),     # v12's inverse under the fp16 walk (v13 default: blocks_f16)
    "wy all f16": dict(inverse="f16_subst"),      # v19-v35's default under the fp16 walk: the whole inverse on fp16
    "wy f16 t": dict(inverse="f16_subst_t"),      # v36's default with two heads a WY program: on the transposes
    "wy f16 merge": dict(inverse="blocks_f16_subst"),   # v18's: diagonal blocks from fp16 pairs, the merge on fp16
    "wy f16 pairs": dict(inverse="blocks_f16"),    # v13's inverse under the fp16 walk
    # the fp16 walk in Gluon with asynchronous matrix products (walk_gluon): the default at the wide
    # shapes (v17; packed ones v19) and at B = 1 beside the WY pass from 256 chunks on (flags: 3-4%
    # faster there, v19-v20); "triton walk" is v16's at the wide shapes and v19's at B = 1;
    # "gluon walk&pieces 1" after the WY pass, as v17 and v18 measured it at B = 1
    "gluon walk": dict(walk="gluon"),
    # at B = 1 beside the WY pass, waiting on its counts (flags; pieces > 1 turns them on, as the GPU's
    # own choice does: this also makes compile_report record that launch)
    "gluon walk beside": dict(walk="gluon", pieces=8),
    "gluon walk st2": dict(walk="gluon", walk_stages=2),
    # the Gluon walk on the transposed state (walk_gluon_t: every chained product's left operand in
    # registers, nothing stored on the chain, per-column scales): v22's wide default, asked for (at
    # B = 1: after the WY pass, or beside it; both slower there than "gluon walk beside", v22)
    "gluon t": dict(walk="gluon_t", operands="fp16", block_v=64, walk_stages=1),
    "gluon t beside": dict(walk="gluon_t", operands="fp16", block_v=64, walk_stages=1, pieces=8),
    # the split's certificates: v30's default checks each warm-up after the segments' walk against the
    # segment before's states (split_check="posterior"); v26-v29's against bounds formed beside the WY
    # pass ("split bounds"), whose stream priority "bounds prio 0" lowers to the caller's (v30: the WY
    # pass faster, the walk waiting as long for the bounds after it)
    "split posterior": dict(split_check="posterior"),
    "split bounds": dict(split_check="bounds"),
    "split w20": dict(split_warmup=20),              # warm-ups of 20 chunks (24 by default): no faster (v31)
    "bounds prio 0": dict(split_check="bounds", bounds_priority=0),
    # v33: the ordered walk beside the WY pass at the caller's priority, not above it (plan_forward's
    # walk_priority; v36: little off the WY pass with decaying gates, slower with long memory)
    "walk prio 0": dict(walk_priority=0),
    # the posterior check's walk and check in one launch (walk_t_kernel's SPLIT 5) or two (SPLIT 3, 4),
    # whatever the length (v37's default: one below split_walk.ONE_LAUNCH_BELOW chunks a sequence)
    "split one launch": dict(split_launches=1),
    "split two launches": dict(split_launches=2),
    # v38: the automatic split's heads marked by the WY pass's chunk-0 programs (no launch of their own;
    # bit for bit on an H100, 5% slower at B1 x T32k beside direct launches: v40), or chosen by their own
    # kernel (the default)
    "heads in wy": dict(split_heads_in="wy"),
    "heads in kernel": dict(split_heads_in="kernel"),
    # v38: the Gluon walks make their TMA descriptors in the kernel (no host descriptor, no encoding a
    # launch; v39: bit for bit on an H100; v41: replayed from CUDA graphs there, no faster a call), or
    # take the host's (the default)
    "descs in kernel": dict(walk_descriptors="kernel"),
    "descs on host": dict(walk_descriptors="host"),
    # v37: each launch after a key's first straight to the compiled kernel, past Triton's binding,
    # cache key and hooks (gdn.ops.triton.launch; v39's default), or every launch through Triton
    "direct launches": dict(direct_launch=True),
    "triton launches": dict(direct_launch=False),
    # v38's default, for A/B against v39's
    "v38": dict(direct_launch=False, split_heads_in="kernel", walk_descriptors="host"),
    # v24-v25: the certified split (gdn.ops.triton.split_walk) on walk_gluon_t, after the WY pass, or
    # beside it (the segments waiting on its counts, the chunks formed in their order)
    "gluon t split": dict(walk="gluon_t", operands="fp16", block_v=64, walk_stages=1, split_walk=True),
    "gluon t split bounds": dict(walk="gluon_t", operands="fp16", block_v=64, walk_stages=1, split_walk=True,
                                 split_check="bounds"),
    "gluon t split beside": dict(walk="gluon_t", operands="fp16", block_v=64, walk_stages=1, split_walk=True,
                                 split_beside=True),
    # v26: the default's automatic split (split_walk=None: the heads whose warm-ups forget in certified
    # segments after the WY pass, the others in order beside it) turned off: v25's default
    "no split": dict(split_walk=False),
    "auto split": dict(split_walk="auto"),           # the automatic split at any length (from 256 chunks)
    "triton walk": dict(walk="triton"),
    # v61-v62: one long sequence in windows, each from the previous one's final state, so that the
    # intermediates scale with the window (triton_forward's window_tokens; the default since v62:
    # "auto", windows of at most 2^18 tokens)
    "windows 2^19": dict(window_tokens=2 ** 19),
    "windows 2^18": dict(window_tokens=2 ** 18),
    "no windows": dict(window_tokens=None),
}


def config(name: str) -> dict:
    """The keywords of a named config; "a&b" merges configs a and b (b's keywords win)."""
    merged = {}
    for part in name.split("&"):
        if part.strip() not in CONFIGS:
            raise ValueError(f"unknown configuration {part.strip()!r}, expected one of {sorted(CONFIGS)}")
        merged.update(CONFIGS[part.strip()])
    return merged

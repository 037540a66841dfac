"""Named configurations of the Triton forward (keywords of ``triton_forward``), shared by the tests,
benchmarks/compile_report.py (registers and spills, no GPU needed), benchmarks/gpu_check.py (timing)
and ``gdn bench --configs``.

"default" is the launcher's defaults: the bf16-split path (every product on bf16 matrix units, the
computed fp32 operands cut into bf16 parts), measured correct and fastest on an H200 (v3 in
benchmarks/NOTES.md). "v2" is the earlier default (fp32 tiles, tf32 products, product inverse), "old"
v2 as first measured (substitution inverse). The rest vary one knob of the default.
"""
import torch

SPLIT = dict(inverse="blocks", wy_split=3, state_split=2)     # the defaults, spelled out
V2 = dict(inverse="product", wy_split=0, state_split=0)
OLD = dict(V2, inverse="substitution")

CONFIGS = {
    "default": {},
    "v2": V2,
    "old": OLD,
    "v2 fast+bf16 wy": dict(V2, fast_dots=True, wy_dtype=torch.bfloat16),   # FLA's roundings
    "wy3 + v2 walk": dict(SPLIT, state_split=0),
    "bv32 st2": dict(block_v=32, walk_stages=2),
    "bv32 st1": dict(block_v=32, walk_stages=1),
    "bv64 st1": dict(block_v=64, walk_stages=1),
    "bv16": dict(block_v=16),
    "bv64 st1 P=2": dict(block_v=64, walk_stages=1, num_segments=2),
    "bv64 st1 P=3": dict(block_v=64, walk_stages=1, num_segments=3),
    "bv32 st2 P=2": dict(block_v=32, walk_stages=2, num_segments=2),
    "wy substitution": dict(inverse="substitution"),
    "wy product": dict(inverse="product"),
    "wy maxnreg 255": dict(wy_maxnreg=255),
    "wy 8 warps": dict(num_warps=8, walk_warps=4),
    "walk 8 warps": dict(walk_warps=8),
    "lean": dict(walk="lean"),                        # v4 candidate: attention in the WY pass
    "lean bv64 st1": dict(walk="lean", block_v=64, walk_stages=1),
    "lean bv32 st1": dict(walk="lean", block_v=32, walk_stages=1),
    "lean bv64 st2": dict(walk="lean", block_v=64, walk_stages=2),
    "lean bv16 st1": dict(walk="lean", block_v=16, walk_stages=1),   # 256 programs at B1 x T32k
    "lean bv16 st2": dict(walk="lean", block_v=16, walk_stages=2),
    "lean wy168": dict(walk="lean", wy_maxnreg=168),   # spills 1.2 KB a thread (compile report)
}

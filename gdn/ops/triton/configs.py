"""Named configurations of the Triton forward (keywords of ``triton_forward``), shared by the tests,
benchmarks/compile_report.py (registers and spills, no GPU needed) and benchmarks/gpu_check.py (timing).

"default" is the launcher's defaults: v2 with the product inverse, the fastest configuration measured
on an H200 so far. "old" is v2 as first measured (substitution inverse). "split" is the bf16-split
path (every product on bf16 matrix units, fp32 operands cut into bf16 parts, pipelined state walk):
it compiles for sm_90 without spills but has not run on a GPU yet, so it is opt-in.
"""
import torch

OLD = dict(inverse="substitution")
SPLIT = dict(inverse="blocks", wy_split=3, state_split=2)

CONFIGS = {
    "default": {},
    "old": OLD,
    "old P=5": dict(OLD, num_segments=5),           # the segment count of the first v2 at B1 x T32k
    "old w8": dict(OLD, num_warps=8),
    "old fast": dict(OLD, fast_dots=True),
    "old fast+bf16 wy": dict(OLD, fast_dots=True, wy_dtype=torch.bfloat16),
    "old blocks": dict(OLD, inverse="blocks"),
    "wy3 + old walk": dict(inverse="blocks", wy_split=3),
    "split": SPLIT,
    "split P=2": dict(SPLIT, num_segments=2),
    "split P=4": dict(SPLIT, num_segments=4),
    "ss2 bv64 st1": dict(SPLIT, block_v=64, walk_stages=1),
    "ss2 bv32 st1": dict(SPLIT, walk_stages=1),
    "ss2 bv16": dict(SPLIT, block_v=16),
    "ss2 bv16 P=2": dict(SPLIT, block_v=16, num_segments=2),
    "wy maxnreg 168": dict(SPLIT, wy_maxnreg=168),
}

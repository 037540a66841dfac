"""Compile here, for the GPU machine's Triton build, the kernels its next calls will launch.

A GPU session has 30 minutes of device time, and a fresh machine compiles every kernel variant it
launches (NOTES.md v41: a sweep's first pass compiled for 240 s). This compiles them on the CPU
instead, keyed as the GPU machine's build (triton_build.key_as, from benchmarks/gpu-triton-build.json),
into $TRITON_CACHE_DIR, which scripts/precompile_triton.sh packs into the cache a call carries
(.tcache). Each line of LIST names problems as compile_report.py's arguments do (variants, shape,
heads, dtype, l2norm, initial state, packing: the constexprs and specialisations a call compiles
with); blank lines and lines starting with # are skipped.

    bash scripts/precompile_triton.sh [LIST]        # default benchmarks/precompile.txt
    python benchmarks/precompile.py LIST [--build FILE]   # into $TRITON_CACHE_DIR (the script's staging)
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from compile_report import capture_launches, compile_launch, problem_of, problem_parser   # (this folder's)
from triton import knobs

import triton_build
from gdn.ops.triton.configs import config


def precompile(line: str) -> tuple[int, int, list[str]]:
    """Compile every launch of one LIST line's variants: (compiled, already in the cache, refusals)."""
    args = problem_parser("one line of precompile.py's LIST").parse_args(shlex.split(line))
    shape, problem, target = problem_of(args)
    hits = []

    def seen(cache_hit, metadata_group, **_):
        hits.append(cache_hit)
        if cache_hit:          # (newest first is what precompile_triton.sh keeps within its budget)
            for path in {os.path.dirname(p) for p in metadata_group.values()}:
                os.utime(path)

    knobs.compilation.listener = seen
    refused = []
    try:
        for name in args.variants.split(","):
            try:
                launches = capture_launches(*shape, args.num_sms, **{**problem, **config(name)})
            except ValueError as err:          # a knob this problem refuses (the launcher's own error)
                refused.append(f"{name}: {err}")
                continue
            for fn, _, largs, lkw in launches:
                compile_launch(fn, largs, lkw, target)
    finally:
        knobs.compilation.listener = None
    return hits.count(False), hits.count(True), refused


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("list", help="a file of compile_report.py argument lines")
    ap.add_argument("--build", default=None, help=f"the build to key for (default {triton_build.GPU_BUILD.name})")
    args = ap.parse_args(argv)
    try:
        build = json.loads(Path(args.build).read_text()) if args.build else triton_build.gpu_build()
        triton_build.key_as(build)
    except (OSError, ValueError) as err:               # (no such build file, or one that compiles otherwise)
        print(f"precompile: {err}", file=sys.stderr)
        return 2
    compiled = cached = 0
    for line in Path(args.list).read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        new, old, refused = precompile(line)
        compiled, cached = compiled + new, cached + old
        print(f"{new:4} compiled {old:4} cached  {line.strip()}", flush=True)
        for text in refused:
            print(f"     refused: {text}")
    print(f"precompile: {compiled} kernels compiled, {cached} already in the cache, for Triton "
          f"{build['triton']} with libtriton {build['libtriton_sha256'][:12]} (Python {build.get('python')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

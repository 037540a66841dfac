"""Executed instructions by source line, for one kernel that ncu profiled.

ncu's source page (``ncu -i REP --page source --csv --print-source sass``: each SASS instruction's
address and how many times a warp executed it) has no source lines for Triton's kernels. The same
kernel compiled here from its PTX (``compile_report.py --dump`` writes it) through ptxas -lineinfo
and nvdisasm -g has them (compile_report.line_listing). This joins the two by each instruction's
offset from the kernel's first one, and checks the opcodes agree at every offset: a mismatch means
another build (another Triton or ptxas, config, shape or launch of the kernel), and nothing is
attributed. Static counts (compile_report --lines) weigh code that rarely runs (the WY pass's tf32x3
fallback) like code that runs every chunk; these are the counts the GPU ran.

    python3 benchmarks/ncu_lines.py ncu-wy-source.csv /tmp/gdn_asm/gluon_t_split/wy_kernel.ptx \\
        [--top 30] [--warps 32768]

--warps: the warps the kernel ran (grid x warps a program), to print counts a warp as well.
Exit status 1 (and nothing joined) when the two listings differ.
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_report import line_listing     # noqa: E402  (this script's folder)
from ncu_stalls import count, instructions   # noqa: E402


def executed(csv_path):
    """{offset from the kernel's first instruction: (times executed, opcode)} of ncu's source CSV
    (ncu_stalls.instructions')."""
    header, rows = instructions(csv_path)
    i_n = header.index("Instructions Executed")
    return {offset: (count(row[i_n]), op) for offset, op, row in rows}


def join(counts, marked):
    """(by line {(file, line) or None: Counter of opcodes, weighted by times executed}, mismatches
    [(offset, ncu's opcode, ours)]) of executed()'s counts and line_listing's marked instructions."""
    base = marked[0][0] if marked else 0
    by_line, mismatches = {}, []
    for addr, op, _, where in marked:
        n, ncu_op = counts.get(addr - base, (0, None))
        if ncu_op is None or ncu_op.split(".")[0] != op.split(".")[0]:
            mismatches.append((addr - base, ncu_op, op))
            continue
        by_line.setdefault(where, Counter())[op.split(".")[0]] += n
    if len(counts) != len(marked):
        mismatches.append((None, f"{len(counts)} instructions", f"{len(marked)} instructions"))
    return by_line, mismatches


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu's source page of the kernel, as CSV with SASS")
    ap.add_argument("ptx", help="the kernel's PTX (compile_report.py --dump)")
    ap.add_argument("--top", type=int, default=30, help="source lines printed (most executed first)")
    ap.add_argument("--warps", type=int, default=0, help="warps the kernel ran: also print counts a warp")
    ap.add_argument("--arch", default="sm_90a")
    args = ap.parse_args(argv)
    marked, _ = line_listing(Path(args.ptx).read_text(), args.arch)
    by_line, mismatches = join(executed(args.csv), marked)
    if mismatches:
        print(f"the listings differ at {len(mismatches)} instructions, first {mismatches[:3]} (offset, ncu, ours): "
              "another build of the kernel; nothing joined")
        return 1
    total = sum(sum(c.values()) for c in by_line.values())
    per_warp = f", {total / args.warps:.0f} a warp" if args.warps else ""
    print(f"{len(marked)} instructions, {total} executed{per_warp}")
    ranked = sorted(by_line.items(), key=lambda item: -sum(item[1].values()))
    for where, ops in ranked[:args.top]:
        n = sum(ops.values())
        name = f"{where[0]}:{where[1]}" if where else "(no line)"
        per_warp = f"{n / args.warps:8.0f} a warp  " if args.warps else ""
        top = ", ".join(f"{op} {c / args.warps:.0f}" if args.warps else f"{op} {c}" for op, c in ops.most_common(4))
        print(f"  {name:<22} {100 * n / max(total, 1):5.1f}%  {per_warp}{top}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the most stalled instructions of a kernel that ncu profiled wait for.

ncu's source page (``ncu -i REP --page source --csv --print-source sass``) counts each SASS
instruction's warp-stall samples by reason; a long- or short-scoreboard stall is an instruction
waiting for one of the six scoreboards that a variable-latency instruction (a global or shared
load, a shuffle, MUFU) holds until its result is written (its write scoreboard) or its operands are
read (its read scoreboard). The instruction that waits need not read what it waits for: ptxas also
waits where it needs the scoreboard for another instruction. This joins the page with the same
kernel compiled here (compile_report.line_listing with its scheduling controls, checked opcode by
opcode as ncu_lines.py does) and prints, for the instructions with the most samples of the chosen
reasons, the scoreboards each waits on and the instructions that set them since they were last
waited for (in program order, around the kernel's largest loop where the instruction is in it),
each with its source line and how many instructions before.

    python3 benchmarks/ncu_waits.py ncu-walkt-source.csv /tmp/asm/gluon_t_split/walk_t_kernel.ptx \\
        [--top 12] [--reasons long_sb,short_sb]

Exit status 1 (and nothing joined) when the two listings differ.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_report import _LABEL_TARGET, largest_loop, line_listing     # noqa: E402  (this script's folder)
from ncu_lines import join                                              # noqa: E402
from ncu_stalls import count, instructions                              # noqa: E402


def stall_samples(csv_path):
    """{offset from the kernel's first instruction: (opcode, {reason: samples})} of ncu's source page
    (reasons as ncu names them less "stall_": long_sb, short_sb, wait, barrier, ...)."""
    header, rows = instructions(csv_path)
    reasons = [(i, h[6:]) for i, h in enumerate(header) if h.startswith("stall_") and "Not Issued" not in h]
    return {offset: (op, {name: count(row[i]) for i, name in reasons if count(row[i])}) for offset, op, row in rows}


def loop_of(marked, labels):
    """(first, last) index in marked of the kernel's largest loop (compile_report.largest_loop over its
    branches), or None."""
    index = {addr: i for i, (addr, _, _, _) in enumerate(marked)}
    branches = []
    for addr, op, text, _ in marked:
        if op.startswith("BRA") and (target := _LABEL_TARGET.search(text)) and target.group(1) in labels:
            branches.append((addr, labels[target.group(1)], "@" in text.split("BRA")[0]))
    first, last = largest_loop(branches)
    return (index[first], index[last]) if last >= 0 else None


def setters(marked, controls, i, sb, loop, limit=8):
    """The instructions before marked[i] that set scoreboard sb (as write or read scoreboard) since the
    last one that waited for it: [(index, "result" or "operands", instructions before i)], nearest
    first. Inside the loop (first, last) the search goes on from the loop's end (the chunk before)."""
    found, j, steps = [], i, 0
    while len(found) < limit and steps < len(marked):
        j -= 1
        steps += 1
        if loop and loop[0] <= i <= loop[1] and j < loop[0]:
            j = loop[1]
        if j < 0:
            break
        _, _, write_sb, read_sb, wait = controls[marked[j][0]]
        if write_sb == sb:
            found.append((j, "result", steps))
        elif read_sb == sb:
            found.append((j, "operands", steps))
        if wait >> sb & 1:
            break
    return found


def _where(entry):
    return f"{entry[0]}:{entry[1]}" if entry else "(no line)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu's source page of the kernel, as CSV with SASS")
    ap.add_argument("ptx", help="the kernel's PTX (compile_report.py --dump)")
    ap.add_argument("--top", type=int, default=12, help="instructions printed (most samples of --reasons first)")
    ap.add_argument("--reasons", default="long_sb,short_sb", help="stall reasons to rank by, comma-separated")
    ap.add_argument("--arch", default="sm_90a")
    args = ap.parse_args(argv)
    marked, labels, controls = line_listing(Path(args.ptx).read_text(), args.arch, controls=True)
    samples = stall_samples(args.csv)
    _, mismatches = join({offset: (0, op) for offset, (op, _) in samples.items()}, marked)
    if mismatches:
        print(f"the listings differ at {len(mismatches)} instructions, first {mismatches[:3]} (offset, ncu, ours): "
              "another build of the kernel; nothing joined")
        return 1
    reasons = args.reasons.split(",")
    base, loop = marked[0][0], loop_of(marked, labels)
    total = sum(sum(by.values()) for _, by in samples.values())
    ranked = sorted(range(len(marked)), key=lambda i: -sum(samples[marked[i][0] - base][1].get(r, 0) for r in reasons))
    print(f"{len(marked)} instructions, {total} stall samples; loop {'none' if loop is None else loop} (indices); "
          f"ranked by {', '.join(reasons)}")
    for i in ranked[:args.top]:
        addr, op, _, where = marked[i]
        by = samples[addr - base][1]
        n = sum(by.get(r, 0) for r in reasons)
        if not n:
            break
        wait = controls[addr][4]
        print(f"{n:7d} {100 * n / max(total, 1):5.1f}%  {addr - base:#07x} {op:<24} {_where(where):<22} "
              + " ".join(f"{r}={by[r]}" for r in reasons if by.get(r)))
        for sb in range(6):
            if wait >> sb & 1:
                print(f"          waits for SB{sb}, set by:")
                for j, kind, before in setters(marked, controls, i, sb, loop):
                    a, o, _, w = marked[j]
                    print(f"            {a - base:#07x} {o:<24} {_where(w):<22} {kind}, {before} instructions before")
    return 0


if __name__ == "__main__":
    sys.exit(main())

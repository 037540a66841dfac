"""Summarise an ncu source page (``ncu -i REP --page source --csv --print-source sass > F.csv``):
the warp-stall samples by reason and the instructions with the most samples.
Usage: python3 benchmarks/ncu_stalls.py F.csv [top N, default 30]"""
import collections
import csv
import sys


def count(cell: str) -> int:
    """A sample count as ncu writes it ("1,234", "" or "0"); anything else counts as 0."""
    try:
        return int(cell.replace(",", "") or 0)
    except ValueError:
        return 0


def read_page(path):
    """(header, rows) of an ncu source page as CSV: a "Kernel Name" line, the header, then one row an
    instruction (rows shorter than the header, if any, left out)."""
    rows = list(csv.reader(open(path, newline="")))
    return rows[1], [r for r in rows[2:] if len(r) >= len(rows[1])]


def instructions(path):
    """(header, [(offset from the kernel's first instruction, opcode, row)]) of an ncu source page
    (read_page's), one entry an instruction with its predicate left off the opcode."""
    header, data = read_page(path)
    i_addr, i_src = header.index("Address"), header.index("Source")
    out, base = [], None
    for row in data:
        words = row[i_src].split()
        if not words:
            continue
        addr = int(row[i_addr], 16)
        base = addr if base is None else base
        out.append((addr - base, words[1] if words[0].startswith("@") and len(words) > 1 else words[0], row))
    return header, out


def main() -> None:
    header, data = read_page(sys.argv[1])
    i_src = header.index("Source")
    i_all = header.index("Warp Stall Sampling (All Samples)")
    stalls = [(i, h) for i, h in enumerate(header) if h.startswith("stall_") and "Not Issued" not in h]
    by_reason = collections.Counter()
    for r in data:
        for i, h in stalls:
            by_reason[h] += count(r[i])
    total = sum(count(r[i_all]) for r in data)
    print("total samples", total)
    for h, n in by_reason.most_common(12):
        print(f"  {h:<24}{n:8d} {100 * n / max(total, 1):5.1f}%")
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    for r in sorted(data, key=lambda r: -count(r[i_all]))[:top]:
        detail = ",".join(f"{h[6:]}={r[i]}" for i, h in stalls if count(r[i]))
        print(f"{r[i_all]:>6} {r[0][-5:]} {r[i_src].strip()[:60]:<60} {detail}")


if __name__ == "__main__":
    main()

"""benchmarks/ncu_lines.py: ncu's executed counts a SASS instruction, joined with the source lines of
the same kernel compiled here. No GPU: the WY pass is compiled for sm_90a (compile_report --dump),
and an ncu source page is written from its own listing with known counts. Everything runs in
processes of their own: compile_report must compile for real, where this suite sets
TRITON_INTERPRET."""
import csv
import json
import re

import pytest

from tests.benchmarks.compiled import BENCH, run_compiling as _run, wy_ptx as compile_wy

pytest.importorskip("triton")

# Writes an ncu-like source page for the PTX at argv[1] into argv[2] (at an address ncu would show,
# some instructions predicated, counts 0-3), and prints each source line's executed total as JSON.
FAKE_NCU = """
import csv, json, sys
from collections import Counter
sys.path.insert(0, sys.argv[3])
from compile_report import line_listing
marked, _ = line_listing(open(sys.argv[1]).read(), "sm_90a")
base = 0x7f96e37d0000
totals = Counter()
with open(sys.argv[2], "w", newline="") as f:
    out = csv.writer(f)
    out.writerow(["Kernel Name", "wy_kernel"])
    out.writerow(["Address", "Source", "Instructions Executed", "Warp Stall Sampling (All Samples)"])
    for i, (addr, op, _, where) in enumerate(marked):
        n = (i * 7) % 4
        out.writerow([hex(base + addr - marked[0][0]), ("@P0   " if i % 5 == 0 else "") + op + " R1, R2", f"{n:,}", 0])
        totals[f"{where[0]}:{where[1]}" if where else "(no line)"] += n
print(json.dumps(totals))
"""


@pytest.fixture(scope="module")
def wy_ptx(tmp_path_factory):
    """The WY pass's PTX at a small shape (compile_report --dump)."""
    return compile_wy(tmp_path_factory.mktemp("asm"))


def test_counts_are_summed_by_source_line(wy_ptx, tmp_path):
    page = tmp_path / "source.csv"
    fake = _run("-c", FAKE_NCU, str(wy_ptx), str(page), str(BENCH))
    assert fake.returncode == 0, fake.stderr[-2000:]
    totals = json.loads(fake.stdout)
    run = _run(str(BENCH / "ncu_lines.py"), str(page), str(wy_ptx), "--top", "3", "--warps", "2")
    assert run.returncode == 0, run.stdout + run.stderr
    # "N instructions, M executed, M/2 a warp", then "  file:line   pct%   count a warp  OP n, ..."
    assert f", {sum(totals.values())} executed, " in run.stdout
    shown = re.findall(r"^  (\S+) +([\d.]+)% +(\d+) a warp", run.stdout, re.M)
    best = sorted(totals.items(), key=lambda item: -item[1])[:3]
    assert [name for name, _, _ in shown] == [name for name, _ in best]
    assert [int(n) for _, _, n in shown] == [round(n / 2) for _, n in best]


def test_another_build_is_refused(wy_ptx, tmp_path):
    page = tmp_path / "source.csv"
    assert _run("-c", FAKE_NCU, str(wy_ptx), str(page), str(BENCH)).returncode == 0
    rows = list(csv.reader(open(page, newline="")))
    rows[40][1] = "NOP"                      # one instruction another build would have
    with open(page, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    run = _run(str(BENCH / "ncu_lines.py"), str(page), str(wy_ptx))
    assert run.returncode == 1 and "nothing joined" in run.stdout and "a warp" not in run.stdout

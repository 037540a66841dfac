"""benchmarks/ncu_waits.py and compile_report's scheduling controls: what a stalled instruction waits
for. No GPU: the WY pass compiled for sm_90a (compile_report --dump), an ncu source page written from
its own listing with known stall samples. Compiling runs in processes of their own (this suite sets
TRITON_INTERPRET)."""
import csv
import json
import re

import pytest

from tests.benchmarks.compiled import BENCH, run_compiling as _run, wy_ptx

pytest.importorskip("triton")

# Prints the WY pass's listing with its controls as JSON: [[offset, opcode, text, write, read, wait]].
LISTING = """
import json, sys
sys.path.insert(0, sys.argv[2])
from compile_report import line_listing
marked, _, controls = line_listing(open(sys.argv[1]).read(), "sm_90a", controls=True)
base = marked[0][0]
print(json.dumps([[a - base, op, text.split("*/")[1].split(";")[0].strip(), *controls[a][2:]]
                  for a, op, text, _ in marked]))
"""


@pytest.fixture(scope="module")
def wy(tmp_path_factory):
    """The WY pass's PTX at a small shape and its listing [(offset, opcode, text, write sb, read sb, wait)]."""
    ptx = wy_ptx(tmp_path_factory.mktemp("asm"))
    listing = _run("-c", LISTING, str(ptx), str(BENCH))
    assert listing.returncode == 0, listing.stderr[-2000:]
    return ptx, json.loads(listing.stdout)


def _registers(operands):
    """The R registers an operand list names (R12.64 and [R12+0x10] name R12; RZ is none)."""
    return set(re.findall(r"\bR(\d+)\b", operands))


def test_a_shared_load_is_waited_for_before_its_result_is_read(wy):
    """The decoded controls agree with the dataflow: after each LDS, the first instruction that reads
    its destination register waits for the LDS's write scoreboard, or an instruction between them
    did (bit sb of a wait mask). Checked over the straight-line code after each LDS (to the next
    branch or barrier); the WY pass has dozens of them."""
    _, listing = wy
    checked = 0
    for i, (_, op, text, write_sb, _, _) in enumerate(listing):
        if not op.startswith("LDS") or write_sb == 7:
            continue
        dest = text.split(None, 1)[1].split(",")[0].strip()
        waited = False
        for _, op2, text2, _, _, wait2 in listing[i + 1:i + 200]:
            waited |= bool(wait2 >> write_sb & 1)
            if op2.startswith(("BRA", "BAR", "EXIT", "RET")):
                break
            words = text2.split(None, 1)
            sources = words[1].split(",", 1)[1] if len(words) > 1 and "," in words[1] else ""
            if op2.startswith("ST"):           # a store's operands are all read
                sources = words[1] if len(words) > 1 else ""
            if dest in {f"R{r}" for r in _registers(sources)}:
                assert waited, (i, text, text2)
                checked += 1
                break
    assert checked >= 10


def _fake_page(listing, path, samples):
    """An ncu-like source page of the listing at path: stall samples {offset: (reason, n)}."""
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["Kernel Name", "wy_kernel"])
        out.writerow(["Address", "Source", "Warp Stall Sampling (All Samples)", "stall_long_sb", "stall_short_sb"])
        for offset, op, text, *_ in listing:
            reason, n = samples.get(offset, ("", 0))
            out.writerow([hex(0x7f96e37d0000 + offset), text, n, n if reason == "long_sb" else 0,
                          n if reason == "short_sb" else 0])


def test_the_most_stalled_instruction_and_what_set_its_scoreboard(wy, tmp_path):
    """Samples on one waiting instruction (the first that waits for a scoreboard an LDG set, with no
    branch between), fewer on another: it is printed first, with that LDG among its setters."""
    ptx, listing = wy
    target = setter = None
    for i, (offset, op, text, _, _, wait) in enumerate(listing):
        if op.startswith("BRA"):
            setter = None
        if op.startswith("LDG") and listing[i][3] != 7:
            setter = (offset, listing[i][3])
        elif setter and wait >> setter[1] & 1:
            target = offset
            break
    assert target is not None
    other = next(offset for offset, op, *_ in listing if op.startswith("FMUL"))
    page = tmp_path / "source.csv"
    _fake_page(listing, page, {target: ("long_sb", 900), other: ("short_sb", 40)})
    run = _run(str(BENCH / "ncu_waits.py"), str(page), str(ptx), "--top", "2")
    assert run.returncode == 0, run.stdout + run.stderr
    ranked = re.findall(r"^ +(\d+) +[\d.]+% +(0x[0-9a-f]+) ", run.stdout, re.M)
    assert [(int(n), int(a, 16)) for n, a in ranked] == [(900, target), (40, other)]
    first = run.stdout.split(ranked[1][1])[0]
    assert re.search(rf"^ +{setter[0]:#07x} LDG.* result, \d+ instructions before", first, re.M), run.stdout


def test_another_build_is_refused(wy, tmp_path):
    ptx, listing = wy
    page = tmp_path / "source.csv"
    _fake_page(listing, page, {})
    rows = list(csv.reader(open(page, newline="")))
    rows[40][1] = "NOP"
    with open(page, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    run = _run(str(BENCH / "ncu_waits.py"), str(page), str(ptx))
    assert run.returncode == 1 and "nothing joined" in run.stdout

"""For the tests of the benchmark scripts that read compiled kernels: those scripts run in processes
of their own, without TRITON_INTERPRET (which this suite sets), so that Triton compiles for real
(sm_90a, no GPU needed)."""
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def run_compiling(*args):
    """python3 with these arguments in a process without TRITON_INTERPRET: its completed process."""
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=600)


def wy_ptx(out: Path) -> Path:
    """The WY pass compiled at a small shape (compile_report --dump into out): its PTX's path."""
    run = run_compiling(str(BENCH / "compile_report.py"), "--variants", "default", "--shape", "1,140",
                        "--heads", "1,2,32,32", "--dump", str(out))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return out / "default" / "wy_kernel.ptx"


_LOC_DEF = re.compile(r"^(#loc\d*) = loc\((.*)\)$", re.M)
_LOC_PART = re.compile(r'"([^"]+)":(\d+):\d+|#loc\d*')


def op_sources(ttgir: str, op: str) -> list[list[str]]:
    """Each `op` (e.g. "ttng.wait_barrier") of a TTGIR dump (compile_report --dump): the source lines
    of its location's call-site chain, innermost first, as their text (read from the files the
    kernel was compiled from). A TTGIR location is a file:line:col, or a call site, name or fusion of
    other locations (#locN, defined at the dump's end)."""
    defs = dict(_LOC_DEF.findall(ttgir))

    def lines(loc: str) -> list[str]:
        found = []
        for part in _LOC_PART.finditer(loc):
            if part.group(1):
                found.append(_source_line(part.group(1), int(part.group(2))))
            else:
                found += lines(defs.get(part.group(0), ""))
        return found

    return [lines(line.rsplit(" loc(", 1)[1][:-1]) for line in ttgir.splitlines()
            if line.lstrip().startswith((op + " ", f"= {op} ")) or f" = {op} " in line]


@functools.cache
def _source_line(path: str, line: int) -> str:
    return Path(path).read_text().splitlines()[line - 1]

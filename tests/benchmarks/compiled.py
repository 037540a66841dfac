"""For the tests of the benchmark scripts that read compiled kernels: those scripts run in processes
of their own, without TRITON_INTERPRET (which this suite sets), so that Triton compiles for real
(sm_90a, no GPU needed)."""
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"

# The body of a script (Triton reads a kernel's source from its file) that compiles one small kernel
# for sm_90a: block $BLOCK (default 128: another block, another kernel); leaves the kernel in
# `kernel` and whether Triton's cache had it in `hits`.
COMPILE_ONE = """
import os
import triton, triton.language as tl
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)

hits = []
knobs.compilation.listener = lambda **kw: hits.append(kw["cache_hit"])
block = int(os.environ.get("BLOCK", 128))
source = ASTSource(add_one, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {(2,): block}, {})
kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32))
"""


def run_compiling(*args, env=None):
    """python3 with these arguments in a process without TRITON_INTERPRET (and with env's variables):
    its completed process."""
    env = {**{name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}, **(env or {})}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=600)


def wy_ptx(out: Path) -> Path:
    """The WY pass compiled at a small shape (compile_report --dump into out): its PTX's path."""
    run = run_compiling(str(BENCH / "compile_report.py"), "--variants", "default", "--shape", "1,140",
                        "--heads", "1,2,32,32", "--dump", str(out))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return out / "default" / "wy_kernel.ptx"

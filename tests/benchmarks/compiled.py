"""For the tests of the benchmark scripts that read compiled kernels: those scripts run in processes
of their own, without TRITON_INTERPRET (which this suite sets), so that Triton compiles for real
(sm_90a, no GPU needed)."""
import os
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

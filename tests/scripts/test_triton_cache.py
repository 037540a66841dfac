"""scripts/triton_cache.sh: Triton's cache, binaries only, packed on one machine and unpacked on the
next, where the same kernel is then a cache hit (compiled here for sm_90a, as compile_report does)."""
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "triton_cache.sh"

# One small kernel compiled for an H100/H200; prints whether Triton's cache had it, and what it loaded.
COMPILE = """
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
source = ASTSource(add_one, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {(2,): 128}, {})
kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32))
print(hits, len(kernel.asm["cubin"]) > 0)
"""


def _env(**kw):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_")}
    return {**env, **{k: str(v) for k, v in kw.items()}}


def _bash(command, **kw):
    run = subprocess.run(["bash", "-c", f"source {SCRIPT} && {command}"], capture_output=True, text=True,
                         env=_env(**kw), timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def _compile(cache):
    """The kernel compiled the way gpu_run.sh's calls compile: that script's settings, this cache."""
    script = cache.parent / "compile_one.py"                  # (Triton reads a kernel's source from its file)
    script.write_text(COMPILE)
    run = subprocess.run(["bash", "-c", f"source {SCRIPT} && {sys.executable} {script}"], capture_output=True,
                         text=True, env=_env(TRITON_CACHE_DIR=cache), timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout.split("\n")[-2]


@pytest.mark.skipif(shutil.which("xz") is None, reason="the script packs with xz, as the GPU machine has it")
def test_cache_packed_here_hits_there(tmp_path):
    first, second, out = tmp_path / "first", tmp_path / "second", tmp_path / "out"
    assert _compile(first) == "[False] True"                             # compiled
    assert _compile(first) == "[True] True"                              # the same machine: a hit
    saved = _bash("save_triton_cache", TRITON_CACHE_DIR=first, OUT=out)
    assert "1 kernels" in saved
    archive = out / "triton-cache.tar.xz"
    with tarfile.open(archive) as tar:                                  # binaries only: cubin and metadata
        files = [m.name for m in tar.getmembers() if m.isfile()]       # (and the source, a few KB)
    assert files and all(name.endswith((".cubin", ".json", ".source")) for name in files), files
    assert any(name.endswith(".cubin") for name in files)
    unpacked = _bash("true", TRITON_CACHE_DIR=second, GDN_TRITON_ARCHIVE=archive)
    assert "1 kernels from" in unpacked
    assert _bash("true", TRITON_CACHE_DIR=second, GDN_TRITON_ARCHIVE=archive) == ""   # unchanged: not again
    assert _compile(second) == "[True] True"                             # the next machine: a hit

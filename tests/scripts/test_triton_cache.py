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
block = int(os.environ.get("BLOCK", 128))           # another block, another kernel
source = ASTSource(add_one, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {(2,): block}, {})
kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32))
print(hits, len(kernel.asm["cubin"]) > 0)
"""


def _env(**kw):
    """This environment without Triton's settings, and with no archive to unpack unless a test names
    one (a checkout that carries .tcache/ would otherwise fill each test's cache from it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_")}
    return {**env, "GDN_TRITON_ARCHIVE": os.devnull + ".none", **{k: str(v) for k, v in kw.items()}}


def _bash(command, ok=True, **kw):
    run = subprocess.run(["bash", "-c", f"source {SCRIPT} && {command}"], capture_output=True, text=True,
                         env=_env(**kw), timeout=120)
    assert (run.returncode == 0) == ok, run.stdout + run.stderr
    return run.stdout + run.stderr


def _compile(cache, block=128):
    """The kernel compiled the way gpu_run.sh's calls compile: that script's settings, this cache."""
    script = cache.parent / "compile_one.py"                  # (Triton reads a kernel's source from its file)
    script.write_text(COMPILE)
    run = subprocess.run(["bash", "-c", f"source {SCRIPT} && {sys.executable} {script}"], capture_output=True,
                         text=True, env=_env(TRITON_CACHE_DIR=cache, BLOCK=block), timeout=300)
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


def _kernels(archive):
    with tarfile.open(archive) as tar:
        return sorted(m.name.split("/")[1] for m in tar.getmembers() if m.name.endswith(".cubin"))


@pytest.mark.skipif(shutil.which("xz") is None, reason="the script packs with xz, as the GPU machine has it")
def test_cache_past_the_limit_keeps_what_this_machine_compiled(tmp_path):
    """An archive that grew past the limit a device call brings back: packed again with only the kernels
    compiled since it was unpacked; and a pack that fails keeps nothing (not an empty archive)."""
    first, second, out = tmp_path / "first", tmp_path / "second", tmp_path / "out"
    _compile(first)
    _bash("save_triton_cache", TRITON_CACHE_DIR=first, OUT=out)
    archive = tmp_path / "carried.tar.xz"
    (out / "triton-cache.tar.xz").rename(archive)
    _bash("true", TRITON_CACHE_DIR=second, GDN_TRITON_ARCHIVE=archive)
    assert _compile(second, block=256) == "[False] True"                 # unpacked, then one more kernel
    _bash("save_triton_cache", TRITON_CACHE_DIR=second, OUT=out, GDN_TRITON_ARCHIVE=archive)
    both = _kernels(out / "triton-cache.tar.xz")
    assert len(both) == 2 and _kernels(archive)[0] in both
    limit = (out / "triton-cache.tar.xz").stat().st_size - 1
    saved = _bash("save_triton_cache", TRITON_CACHE_DIR=second, OUT=out, GDN_TRITON_ARCHIVE=archive,
                  GDN_TRITON_CACHE_MAX=limit)
    assert "1 kernels (new)" in saved, saved
    assert _kernels(out / "triton-cache.tar.xz") == [k for k in both if k not in _kernels(archive)]
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "xz").write_text("#!/bin/sh\nexit 1\n")
    (fake / "xz").chmod(0o755)
    failed = _bash("save_triton_cache", ok=False, TRITON_CACHE_DIR=second, OUT=out, GDN_TRITON_ARCHIVE=archive,
                   PATH=f"{fake}:{os.environ['PATH']}")
    assert "failed" in failed and not (out / "triton-cache.tar.xz").exists()

"""scripts/triton_cache.sh: Triton's cache, binaries only, packed on one machine and unpacked on the
next, where the same kernel is then a cache hit (compiled here for sm_90a, as compile_report does)."""
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.benchmarks.compiled import COMPILE_ONE

triton = pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "triton_cache.sh"

# One small kernel compiled for an H100/H200; prints whether Triton's cache had it, and what it loaded.
COMPILE = COMPILE_ONE + 'print(hits, len(kernel.asm["cubin"]) > 0)\n'


def _env(**kw):
    """This environment without Triton's settings, and with no archive to unpack unless a test names
    one (a checkout that carries .tcache/ would otherwise fill each test's cache from it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_")}
    return {**env, "GDN_TRITON_ARCHIVE": os.devnull + ".none", "PYTHON": sys.executable,
            **{k: str(v) for k, v in kw.items()}}


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
    # (the next machine's cache at a path with characters that a substitution's text would take as its own)
    first, second, out = tmp_path / "first", tmp_path / "se&c#ond", tmp_path / "out"
    assert _compile(first) == "[False] True"                             # compiled
    assert _compile(first) == "[True] True"                              # the same machine: a hit
    saved = _bash("save_triton_cache", TRITON_CACHE_DIR=first, OUT=out)
    assert "1 kernels" in saved
    archive = out / "triton-cache.tar.xz"
    _bash("save_triton_build", OUT=out)                                  # (what gpu_run.sh does first)
    build = json.loads((out / "triton-build.json").read_text())          # (benchmarks/triton_build.py's)
    assert build["triton"] == triton.__version__ and len(build["libtriton_sha256"]) == 64
    assert not list(out.glob("*.tmp"))
    with tarfile.open(archive) as tar:                                  # binaries only: cubin and metadata
        files = [m.name for m in tar.getmembers() if m.isfile()]       # (and the source, a few KB)
    assert files and all(name.endswith((".cubin", ".json", ".source")) for name in files), files
    assert any(name.endswith(".cubin") for name in files)
    unpacked = _bash("true", TRITON_CACHE_DIR=second, GDN_TRITON_ARCHIVE=archive)
    assert "1 kernels from" in unpacked
    assert _bash("true", TRITON_CACHE_DIR=second, GDN_TRITON_ARCHIVE=archive) == ""   # unchanged: not again
    shutil.rmtree(first)            # (the next machine has no such folder: its group files name its own)
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


PRECOMPILE = ROOT / "scripts" / "precompile_triton.sh"


def _archive_of(tmp_path, name, block):
    """An archive (save_triton_cache's) of one kernel compiled in a cache of its own."""
    cache = tmp_path / f"cache-{name}"
    _compile(cache, block=block)
    _bash("save_triton_cache", TRITON_CACHE_DIR=cache, OUT=tmp_path / f"out-{name}")
    return tmp_path / f"out-{name}" / "triton-cache.tar.xz"


@pytest.mark.skipif(shutil.which("xz") is None, reason="the script packs with xz, as the GPU machine has it")
def test_precompile_script_merges_and_keeps_the_newest_within_the_carry(tmp_path):
    """scripts/precompile_triton.sh with LIST "none": the archive it writes holds its own kernels and
    every --merge archive's, each a hit where unpacked; past GDN_TRITON_CARRY_MAX the oldest kernels
    are left out first."""
    older = _archive_of(tmp_path, "older", 128)
    newer = _archive_of(tmp_path, "newer", 256)
    target = tmp_path / "carried" / "triton-cache.tar.xz"
    run = subprocess.run(["bash", str(PRECOMPILE), "--merge", str(older), "--merge", str(newer), "none"],
                         capture_output=True, text=True, env=_env(GDN_TRITON_ARCHIVE=target), timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    both = _kernels(target)
    assert "2 kernels of 2" in run.stdout and both == sorted(_kernels(older) + _kernels(newer))
    for block in (128, 256):
        here = tmp_path / f"here-{block}"
        _bash("true", TRITON_CACHE_DIR=here, GDN_TRITON_ARCHIVE=target)
        assert _compile(here, block=block) == "[True] True"
    limit = max(older.stat().st_size, newer.stat().st_size) + 64      # room for one kernel, not two
    run = subprocess.run(["bash", str(PRECOMPILE), "none"], capture_output=True, text=True,
                         env=_env(GDN_TRITON_ARCHIVE=target, GDN_TRITON_CARRY_MAX=limit), timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 kernels of 2" in run.stdout and _kernels(target) == _kernels(newer)
    broken = tmp_path / "broken.tar.xz"
    broken.write_bytes(older.read_bytes()[:200])
    for missing in (tmp_path / "no-such.tar.xz", broken):       # (a GPU call's archive that did not come back)
        run = subprocess.run(["bash", str(PRECOMPILE), "--merge", str(missing), "none"], capture_output=True,
                             text=True, env=_env(GDN_TRITON_ARCHIVE=target), timeout=300)
        assert run.returncode != 0 and str(missing) in run.stderr, run.stdout + run.stderr
    assert _kernels(target) == _kernels(newer)                           # (left as it was)

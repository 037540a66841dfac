"""The Triton build a machine compiles with, and Triton's cache keys formed as another build's.

Triton keys its cache by its version, the hashes of its Python sources, the hash of its compiled
library (libtriton), the ptxas version, the kernel and its options. Two builds of one Triton release
(the GPU machine's Python 3.12 wheel, this machine's 3.11 one) differ only in libtriton's bytes, and
compile the same kernel to the same SASS (NOTES.md v46: wy_kernel compiled here and there, byte for
byte the same instructions). So a kernel compiled here with the GPU machine's libtriton hash in its
key (``key_as``) is a cache hit there: benchmarks/precompile.py fills the cache a GPU session carries
(.tcache, scripts/triton_cache.sh) with what its calls will launch, and the device time its compiles
took goes to measuring.

    python benchmarks/triton_build.py            # this machine's build, as JSON (the GPU's: gpu_run.sh cache)
"""
from __future__ import annotations

import functools
import hashlib
import json
import platform
import sys
from pathlib import Path

import triton
import triton.runtime.cache as triton_cache
from triton.backends.nvidia.compiler import get_ptxas_version

# The GPU machine's build, written there by `gpu_run.sh cache` (save_triton_cache) and kept here.
GPU_BUILD = Path(__file__).resolve().parent / "gpu-triton-build.json"


def _libtriton_sha256() -> str:
    digest = hashlib.sha256()
    with open(Path(triton.__file__).parent / "_C" / "libtriton.so", "rb") as lib:
        for block in iter(lambda: lib.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def build() -> dict:
    """This machine's Triton build: its version, libtriton's sha256, the ptxas version its keys hold
    (sm_90's, the whole `ptxas --version` text) and the Python that runs it."""
    return dict(triton=triton.__version__, libtriton_sha256=_libtriton_sha256(), ptxas=get_ptxas_version(90),
                python=platform.python_version())


def key_as(other: dict) -> None:
    """From now on this process keys Triton's cache as the build ``other`` (build()'s dict) would: the
    same Triton release with another libtriton. Raises ValueError where the two builds would not
    compile alike (another Triton version or another ptxas), so that no kernel compiled here stands
    in for one the other build would compile differently."""
    mine = build()
    for field in ("triton", "ptxas"):
        if other.get(field) != mine[field]:
            raise ValueError(f"the other build's {field} is {other.get(field)!r}, this machine's {mine[field]!r}: "
                             f"its kernels cannot be compiled here")
    native = getattr(triton_cache.triton_key, "__wrapped__", triton_cache.triton_key)
    theirs = other["libtriton_sha256"]

    @functools.lru_cache()
    def triton_key():
        key = native()
        if key.count(mine["libtriton_sha256"]) != 1:
            raise RuntimeError("Triton's cache key does not hold libtriton's sha256 once: this Triton keys "
                               "its cache otherwise, and key_as does not apply to it")
        return key.replace(mine["libtriton_sha256"], theirs)

    triton_cache.triton_key = triton_key       # (get_cache_key reads the module's name at every compile)


def gpu_build() -> dict:
    """The GPU machine's build (GPU_BUILD), or a ValueError that says how to get it."""
    if not GPU_BUILD.exists():
        raise ValueError(f"no {GPU_BUILD.name}: a GPU call's `bash benchmarks/gpu_run.sh cache` writes it to $OUT "
                         f"(beside triton-cache.tar.xz); copy it to {GPU_BUILD}")
    return json.loads(GPU_BUILD.read_text())


if __name__ == "__main__":
    json.dump(build(), sys.stdout, indent=1)
    print()

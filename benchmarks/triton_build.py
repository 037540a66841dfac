"""The Triton build a machine compiles with, and Triton's cache keys formed as another build's.

Triton keys its cache by its version, the hashes of its Python sources, the hash of its compiled
library (libtriton), the ptxas version, the kernel and its options. Two builds of one Triton release
for two Pythons (PyPI's 3.11 and 3.12 wheels of 3.6.0) differ only in libtriton's bytes, and the GPU
machine's build compiled wy_kernel to the same SASS as this machine's (NOTES.md v46). So a kernel
compiled here with the GPU machine's libtriton hash in its key (``key_as``) is a cache hit there,
provided the rest of that build's key is this one's, which key_as checks against the build's own
record (benchmarks/gpu-triton-build.json, which every gpu_run.sh call writes) before it keys anything:
benchmarks/precompile.py fills the cache a GPU session carries (.tcache, scripts/triton_cache.sh)
with what its calls will launch, and the device time its compiles took goes to measuring.

    python benchmarks/triton_build.py            # this machine's build, as JSON (the GPU's: every gpu_run.sh call)
    python benchmarks/triton_build.py --libtriton SHA256     # ... as it would read with another libtriton
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
from triton._C.libtriton import get_cache_invalidating_env_vars
from triton.backends.nvidia.compiler import get_ptxas_version

_NATIVE_KEY = getattr(triton_cache.triton_key, "__wrapped__", triton_cache.triton_key)     # (before key_as)

# The GPU machine's build, written there by every gpu_run.sh call (save_triton_build) and kept here.
GPU_BUILD = Path(__file__).resolve().parent / "gpu-triton-build.json"


@functools.lru_cache()
def _libtriton_sha256() -> str:
    """(~400 MB read: once a process, whatever build() and key_as ask.)"""
    digest = hashlib.sha256()
    with open(Path(triton.__file__).parent / "_C" / "libtriton.so", "rb") as lib:
        for block in iter(lambda: lib.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def build() -> dict:
    """This machine's Triton build: its version, libtriton's sha256, the ptxas version its keys hold
    (sm_90's, the whole `ptxas --version` text), the sha256 of the build's part of every cache key
    (Triton's triton_key: version, sources, libtriton), the environment variables that enter the keys
    (Triton's cache-invalidating ones that are set) and the Python that runs it."""
    return dict(triton=triton.__version__, libtriton_sha256=_libtriton_sha256(), ptxas=get_ptxas_version(90),
                triton_key_sha256=_sha256(_NATIVE_KEY()), key_env=dict(sorted(get_cache_invalidating_env_vars().items())),
                python=platform.python_version())


def with_libtriton(sha256: str) -> dict:
    """build() as it reads on a machine of this build but for its libtriton (of that sha256): what such
    a build's own build() would give, for the tests and for checking a build file by hand."""
    mine = build()
    return dict(mine, libtriton_sha256=sha256,
                triton_key_sha256=_sha256(_NATIVE_KEY().replace(mine["libtriton_sha256"], sha256)))


def key_as(other: dict) -> None:
    """From now on this process keys Triton's cache as the build ``other`` (build()'s dict) would: the
    same Triton release with another libtriton. Raises ValueError where a kernel compiled here would not
    stand for the other build's (another Triton version or ptxas: compiled otherwise) or would not be
    found there (other sources than this release's here, which the other build's triton_key_sha256
    shows, or other cache-invalidating variables set)."""
    mine = build()
    for field in ("triton", "ptxas", "key_env"):
        if other.get(field, {} if field == "key_env" else None) != mine[field]:
            raise ValueError(f"the other build's {field} is {other.get(field)!r}, this machine's {mine[field]!r}: "
                             f"its kernels cannot be compiled here")
    native = _NATIVE_KEY()
    if native.count(mine["libtriton_sha256"]) != 1:
        raise RuntimeError("Triton's cache key does not hold libtriton's sha256 once: this Triton keys its cache "
                           "otherwise, and key_as does not apply to it")
    theirs = native.replace(mine["libtriton_sha256"], other["libtriton_sha256"])
    if _sha256(theirs) != other.get("triton_key_sha256", _sha256(theirs)):
        raise ValueError("the other build's triton_key is not this one's with its libtriton: its Triton sources "
                         "differ from this machine's, and no kernel compiled here would be found there")
    triton_cache.triton_key = lambda: theirs    # (get_cache_key reads the module's name at every compile)


def gpu_build() -> dict:
    """The GPU machine's build (GPU_BUILD), or a ValueError that says how to get it."""
    if not GPU_BUILD.exists():
        raise ValueError(f"no {GPU_BUILD.name}: every GPU call of benchmarks/gpu_run.sh writes it to $OUT as "
                         f"triton-build.json; copy one to {GPU_BUILD}")
    return json.loads(GPU_BUILD.read_text())


if __name__ == "__main__":
    # (--libtriton SHA256: with_libtriton's build instead of this machine's)
    json.dump(with_libtriton(sys.argv[2]) if sys.argv[1:2] == ["--libtriton"] else build(), sys.stdout, indent=1)
    print()

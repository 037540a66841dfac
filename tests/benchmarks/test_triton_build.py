"""benchmarks/triton_build.py and benchmarks/precompile.py: Triton's cache keys formed as another build's
(another libtriton of the same release), and the forward's kernels compiled for it. Each compile runs
in a process of its own (key_as changes the process's Triton; this suite sets TRITON_INTERPRET)."""
import hashlib
import json

import pytest

from tests.benchmarks.compiled import BENCH, COMPILE_ONE, run_compiling

pytest.importorskip("triton")

# compiled.COMPILE_ONE's kernel into $TRITON_CACHE_DIR, keyed as the build in argv[1] (a JSON file)
# when given (argv[-1]: benchmarks/; twice: key_as called again); prints its key's hash, whether the
# cache had it, and the sha256 of the build's part of the key that Triton then used.
COMPILE = """
import hashlib, json, sys
sys.path.insert(0, sys.argv[-1])
import triton_build
if len(sys.argv) > 2:
    for _ in range(2 if "twice" in sys.argv else 1):
        triton_build.key_as(json.load(open(sys.argv[1])))
""" + COMPILE_ONE + """
import triton.runtime.cache as cache
print(kernel.hash, hits, hashlib.sha256(cache.triton_key().encode()).hexdigest())
"""

# Triton's own key text of this machine's build, and libtriton's sha256 read here (not by triton_build).
NATIVE_KEY = """
import hashlib, os, triton
from triton.runtime.cache import triton_key
with open(os.path.join(os.path.dirname(triton.__file__), "_C", "libtriton.so"), "rb") as f:
    print(hashlib.sha256(f.read()).hexdigest())
print(triton_key())
"""


def _compile(tmp_path, cache, build=None, *extra):
    script = tmp_path / "compile_one.py"                      # (Triton reads a kernel's source from its file)
    script.write_text(COMPILE)
    args = [str(script)] + ([str(build)] if build else []) + list(extra) + [str(BENCH)]
    run = run_compiling(*args, env={"TRITON_CACHE_DIR": str(cache)})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return run.stdout.split()


def _build_file(tmp_path, name, libtriton=None):
    """triton_build.py's JSON (with --libtriton: as with that libtriton) in a file."""
    run = run_compiling(str(BENCH / "triton_build.py"), *(["--libtriton", libtriton] if libtriton else []))
    assert run.returncode == 0, run.stderr
    (tmp_path / name).write_text(run.stdout)
    return tmp_path / name


@pytest.fixture(scope="module")
def this_build():
    run = run_compiling(str(BENCH / "triton_build.py"))
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_keys_as_another_libtriton(tmp_path):
    """Keyed as this machine's own build, a kernel's key is Triton's own (a hit in the cache it
    compiled into); keyed as a build with another libtriton, Triton's key text is its own with that
    libtriton's sha256 in place of this one's (another kernel key: a miss there, then a hit), also
    with key_as called twice."""
    script = tmp_path / "native.py"
    script.write_text(NATIVE_KEY)
    lib, native_key = run_compiling(str(script)).stdout.split("\n", 1)
    native, _, native_sha = _compile(tmp_path, tmp_path / "a")
    assert native_sha == hashlib.sha256(native_key.rstrip("\n").encode()).hexdigest()
    assert _compile(tmp_path, tmp_path / "a", _build_file(tmp_path, "same.json")) == [native, "[True]", native_sha]
    other = _build_file(tmp_path, "other.json", "0" * 64)
    theirs, hit, their_sha = _compile(tmp_path, tmp_path / "a", other)
    expected = native_key.rstrip("\n").replace(lib, "0" * 64)
    assert lib in native_key and their_sha == hashlib.sha256(expected.encode()).hexdigest()
    assert theirs != native and hit == "[False]"
    assert _compile(tmp_path, tmp_path / "a", other, "twice") == [theirs, "[True]", their_sha]


@pytest.mark.parametrize("field, value, says", [
    ("triton", "9.9.9", "the other build's triton is '9.9.9'"),
    ("ptxas", "9.9.9", "the other build's ptxas is '9.9.9'"),
    ("key_env", {"TRITON_DISABLE_LINE_INFO": "1"}, "the other build's key_env is"),
    ("triton_key_sha256", "0" * 64, "its Triton sources differ"),
])
def test_refuses_a_build_it_cannot_stand_for(tmp_path, this_build, field, value, says):
    """Another Triton release or another ptxas would compile the kernel otherwise, and other sources
    (another triton_key than this one's with the other libtriton) or other cache-invalidating
    variables would key it otherwise: no key made for any of them."""
    other = tmp_path / "other.json"
    other.write_text(json.dumps(dict(this_build, **{field: value})))
    script = tmp_path / "compile_one.py"
    script.write_text(COMPILE)
    run = run_compiling(str(script), str(other), str(BENCH), env={"TRITON_CACHE_DIR": str(tmp_path / "c")})
    assert run.returncode != 0 and says in run.stderr, run.stderr[-2000:]


def test_precompile_compiles_each_launch_once(tmp_path):
    """precompile.py over a LIST: every kernel one problem's variants launch, compiled for the build it
    names (then cached: the same list again compiles nothing); a knob the problem refuses is named,
    and without a build to key for it stops before compiling."""
    build = _build_file(tmp_path, "build.json", "1" * 64)
    listing = tmp_path / "list.txt"
    listing.write_text("# a comment\n\n--variants \"bf16 parts,gluon t split\" --shape 1,140 "
                       "--heads 1,2,32,32 --no-l2norm\n")
    env = {"TRITON_CACHE_DIR": str(tmp_path / "cache")}
    first = run_compiling(str(BENCH / "precompile.py"), str(listing), "--build", str(build), env=env)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    compiled = int(first.stdout.split("precompile: ")[1].split()[0])
    assert compiled >= 2 and "refused: gluon t split" in first.stdout, first.stdout     # (split: l2norm only)
    assert len(list((tmp_path / "cache").glob("*/*.cubin"))) == compiled
    again = run_compiling(str(BENCH / "precompile.py"), str(listing), "--build", str(build), env=env)
    assert f"0 kernels compiled, {compiled} already in the cache" in again.stdout, again.stdout
    (tmp_path / "missing.json").unlink(missing_ok=True)
    none = run_compiling(str(BENCH / "precompile.py"), str(listing), "--build", str(tmp_path / "missing.json"),
                         env=env)
    assert none.returncode != 0

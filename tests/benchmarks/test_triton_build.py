"""benchmarks/triton_build.py and benchmarks/precompile.py: Triton's cache keys formed as another build's
(another libtriton of the same release), and the forward's kernels compiled for it. Each compile runs
in a process of its own (key_as changes the process's Triton; this suite sets TRITON_INTERPRET)."""
import json

import pytest

from tests.benchmarks.compiled import BENCH, COMPILE_ONE, run_compiling

pytest.importorskip("triton")

# compiled.COMPILE_ONE's kernel into $TRITON_CACHE_DIR, keyed as the build in argv[1] (a JSON file)
# when given (argv[-1]: benchmarks/); prints its key's hash and whether the cache had it.
COMPILE = """
import json, sys
sys.path.insert(0, sys.argv[-1])
import triton_build
if len(sys.argv) > 2:
    triton_build.key_as(json.load(open(sys.argv[1])))
""" + COMPILE_ONE + "print(kernel.hash, hits)\n"


def _compile(tmp_path, cache, build=None):
    script = tmp_path / "compile_one.py"                      # (Triton reads a kernel's source from its file)
    script.write_text(COMPILE)
    args = [str(script)] + ([str(build)] if build else []) + [str(BENCH)]
    run = run_compiling(*args, env={"TRITON_CACHE_DIR": str(cache)})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return run.stdout.split()


@pytest.fixture(scope="module")
def this_build():
    run = run_compiling(str(BENCH / "triton_build.py"))
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_keys_as_another_libtriton(tmp_path, this_build):
    """Keyed as this machine's own build, a kernel's key is Triton's own (a hit in the cache it
    compiled into); keyed as a build with another libtriton, it is another key (a miss there), and
    the same one again (a hit) in the cache that build compiled into."""
    native, _ = _compile(tmp_path, tmp_path / "a")
    same = tmp_path / "same.json"
    same.write_text(json.dumps(this_build))
    assert _compile(tmp_path, tmp_path / "a", same) == [native, "[True]"]
    other = tmp_path / "other.json"
    other.write_text(json.dumps(dict(this_build, libtriton_sha256="0" * 64)))
    theirs, hit = _compile(tmp_path, tmp_path / "a", other)
    assert theirs != native and hit == "[False]"
    assert _compile(tmp_path, tmp_path / "a", other) == [theirs, "[True]"]


@pytest.mark.parametrize("field", ["triton", "ptxas"])
def test_refuses_a_build_that_compiles_otherwise(tmp_path, this_build, field):
    """Another Triton release or another ptxas would compile the kernel otherwise: no key made for it."""
    other = tmp_path / "other.json"
    other.write_text(json.dumps(dict(this_build, **{field: "9.9.9"})))
    script = tmp_path / "compile_one.py"
    script.write_text(COMPILE)
    run = run_compiling(str(script), str(other), str(BENCH), env={"TRITON_CACHE_DIR": str(tmp_path / "c")})
    assert run.returncode != 0 and f"the other build's {field} is '9.9.9'" in run.stderr


def test_precompile_compiles_each_launch_once(tmp_path, this_build):
    """precompile.py over a LIST: every kernel one problem's variants launch, compiled for the build it
    names (then cached: the same list again compiles nothing); a knob the problem refuses is named,
    and without a build to key for it stops before compiling."""
    build = tmp_path / "build.json"
    build.write_text(json.dumps(dict(this_build, libtriton_sha256="1" * 64)))
    listing = tmp_path / "list.txt"
    listing.write_text("# a comment\n\n--variants \"bf16 parts,fp16 bv128 w8\" --shape 1,140 "
                       "--heads 1,2,32,32 --no-l2norm\n")
    env = {"TRITON_CACHE_DIR": str(tmp_path / "cache")}
    first = run_compiling(str(BENCH / "precompile.py"), str(listing), "--build", str(build), env=env)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    compiled = int(first.stdout.split("precompile: ")[1].split()[0])
    assert compiled >= 2 and "refused: fp16 bv128 w8" in first.stdout, first.stdout
    assert len(list((tmp_path / "cache").glob("*/*.cubin"))) == compiled
    again = run_compiling(str(BENCH / "precompile.py"), str(listing), "--build", str(build), env=env)
    assert f"0 kernels compiled, {compiled} already in the cache" in again.stdout, again.stdout
    (tmp_path / "missing.json").unlink(missing_ok=True)
    none = run_compiling(str(BENCH / "precompile.py"), str(listing), "--build", str(tmp_path / "missing.json"),
                         env=env)
    assert none.returncode != 0

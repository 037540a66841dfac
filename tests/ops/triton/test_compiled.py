"""The kernels as compiled for an H100/H200 (sm_90a, by the ptxas in Triton's wheel; no GPU needed):
no read of a uniform register that nothing wrote. ptxas of Triton 3.6 emitted such reads as the
shared-memory base of the WY pass's wgmma at chunk 64 and K < 64, which gave wrong results on an H200
with no fault (benchmarks/NOTES.md v14). benchmarks/compile_report.py compiles and scans; it runs in a
process of its own, because it must compile for real where this suite sets TRITON_INTERPRET. Also
its --launches listing (no compiling) and its per-line counts."""
import re

import pytest

from tests.benchmarks.compiled import BENCH, run_compiling

pytest.importorskip("triton")
REPORT = BENCH / "compile_report.py"


def _report(*args):
    """compile_report.py with these arguments, in a process of its own without TRITON_INTERPRET (it
    compiles for real); fails the test unless it exits 0. Returns its completed process."""
    run = run_compiling(str(REPORT), *args)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run


def test_launches_are_listed_without_compiling():
    """--launches prints each recorded launch (kernel, grid, arguments' shapes, constexprs) and compiles
    nothing: at B1 x T32k the default's four launches, the WY pass first (the split's walk and check
    in one: 512 chunks, below split_walk.ONE_LAUNCH_BELOW)."""
    run = _report("--variants", "default", "--shape", "1,32768", "--launches")
    kernels = re.findall(r"^default +(\w+)\[", run.stdout, re.M)
    assert kernels == ["wy_kernel", "_forgetting_kernel", "walk_gluon_kernel", "walk_t_kernel"]
    assert "HEADS=2" in run.stdout and "regs" not in run.stdout


@pytest.mark.parametrize("heads, extra", [
    ("1,2,32,32", ["--num-segments", "2"]),             # w in two bf16 parts (segments): was miscompiled
    ("1,2,48,32", ["--num-segments", "2"]),             # K = 48: BK = 64, 32 columns at a time
    ("1,2,16,16", ["--variants", "bf16 parts&v4"]),     # w and u in one segment (factors "wu")
    ("1,2,32,32", ["--variants", "default", "--lines", "3"]),   # the fp16 walk; where its instructions go
    ("1,2,64,64", ["--variants", "gluon walk,gluon walk beside,gluon t,gluon t beside"]),   # the Gluon walks
    ("1,2,64,128", ["--variants", "gluon t", "--loop-lines", "3"]),   # V = 128: two programs a head; a chunk's lines
    ("1,2,64,64", ["--variants", "gluon walk,gluon t", "--packed", "2"]),     # packed sequences (MASK_ROWS)
    ("1,2,64,64", ["--variants", "gluon t split,gluon t split beside", "--shape", "1,8192"]),   # after, beside WY
    ("1,2,64,64", ["--variants", "split one launch", "--shape", "1,8192"]),   # the posterior's walk and check in one
])
def test_no_uniform_register_read_before_its_write(heads, extra):
    args = ["--shape", "1,140", "--heads", heads, "--chunk", "64", "--check"]
    if "--variants" not in extra:
        args += ["--variants", "default,bf16 parts"]
    run = _report(*args, *extra)
    assert "wy_kernel" in run.stdout
    if "--lines" in extra:                 # each kernel's 3 busiest source lines: "wy.py:123   456  FMUL 64, ..."
        assert len(re.findall(r"^    \w+\.py:\d+ +\d+  [A-Z]", run.stdout, re.M)) >= 6
    if "--loop-lines" in extra:            # the walk's loop: its 3 busiest lines, each within the loop's count
        loop = int(re.search(r"walk_t_kernel .* (\d+)(?:-\d+)?/\d+/\d+ ", run.stdout).group(1))
        counts = [int(n) for n in re.findall(r"^    loop \w+\.py:\d+ +(\d+)  [A-Z]", run.stdout, re.M)]
        assert len(counts) == 3 and all(0 < n <= loop for n in counts) and sum(counts) < loop, (loop, counts)
    gluon_kernels = ("walk_gluon_kernel", "walk_t_kernel")     # the Gluon walks' kernels
    assert any(name in run.stdout for name in gluon_kernels) == any("gluon" in arg for arg in extra)
    variants = extra[extra.index("--variants") + 1].split(",") if "--variants" in extra else []
    assert any(variant.startswith("gluon t") for variant in variants) == ("walk_t_kernel" in run.stdout)


def test_one_launch_split_walk_keeps_its_loop_in_registers():
    """The posterior split's walk and check in one launch (walk_t_kernel's SPLIT 5) compiles its walk's
    chunk loop as the two-launch walk (SPLIT 3) does: the check's values formed again after the walk
    (fresh_program_id, fresh_int), not held through it, where they spilled the loop's barrier and
    operand addresses (9 local loads and stores a chunk, the walk ~9% slower on an H200: NOTES.md
    v37). At most 3 a chunk (the checkpoint's chunk index and one address around a TMA issue, off the
    products' chain), and at most 5% more instructions a chunk."""
    run = _report("--variants", "split one launch,split two launches", "--shape", "1,32768")
    # "... walk_t_kernel (256,) ... 1339-209/28/3 ...": instructions a chunk, HGMMAs, local loads + stores.
    loops = {}
    for variant, instr, ldst in re.findall(r"^(split \w+ launch\w*) +walk_t_kernel .* (\d+)(?:-\d+)?/\d+/(\d+) ",
                                           run.stdout, re.M):
        loops.setdefault(variant, []).append((int(instr), int(ldst)))
    (merged,), (walk, _) = loops["split one launch"], loops["split two launches"]     # (the check's launch: any)
    assert merged[1] <= 3, (merged, walk)
    assert merged[0] <= 1.05 * walk[0], (merged, walk)


def test_split_walk_chunk_costs_no_more_than_the_unsplit_one():
    """walk_t_kernel's split at B1 x T32k (the default: walk and check in one launch; "gluon t split":
    the bounds' check) runs no more instructions a chunk (its loop without the checkpoint's branch,
    which one chunk of all takes) than the unsplit walk ("gluon t") of the same shape, and nothing of
    it spills. With one stage a constant ring slot let LLVM hoist the rings' descriptors out of the
    loop; ptxas then moved them back to uniform registers before every product (1130 against
    1117 a chunk) and spilled (walk_gluon.ring_slot; benchmarks/NOTES.md v42). Since the chunks'
    low-parts flags (v67) the bounds' split keeps one value in local memory across the walk (4 bytes
    stored at its start, loaded at its end): nothing in its chunk loop."""
    run = _report("--variants", "default,gluon t split,gluon t", "--shape", "1,32768")
    # "... walk_t_kernel (256,) 4 250 0/0 ... 1278-205/28/0 ...": spills st/ld, then the loop's
    # instructions (minus those behind the checkpoint's branch), HGMMAs, local loads + stores.
    walks = {variant: (st, ld, int(instr) - int(branch or 0), ldst) for variant, st, ld, instr, branch, ldst in
             re.findall(r"^(default|gluon t split|gluon t) +walk_t_kernel +\S+ +\d+ +\d+ +(\d+)/(\d+) .* "
                        r"(\d+)(?:-(\d+))?/\d+/(\d+) ", run.stdout, re.M)}
    assert set(walks) == {"default", "gluon t split", "gluon t"}, run.stdout
    unsplit = walks["gluon t"][2]
    for variant in ("default", "gluon t split"):
        st, ld, chunk, ldst = walks[variant]
        assert int(st) <= 4 and int(ld) <= 4 and ldst == "0" and chunk <= unsplit, (variant, walks[variant], unsplit)


@pytest.mark.parametrize("shape, walk", [("1,8192", "_chunk_fwd_kernel"), ("1,32768", "walk_gluon_kernel")])
def test_walk_beside_the_wy_pass_leaves_it_room(shape, walk):
    """At B = 1 the ordered walk waits for the WY pass's chunks (WAIT) while the WY pass runs beside it
    (below 256 chunks the Triton walk, from there the Gluon walk, with long-memory gates every head):
    one program of each must fit on one SM together, in shared memory and registers. v67's Gluon walk
    took 8 KB more for its low-parts tile and no longer left room: the WY pass then ran on the few
    SMs the walk's 128 programs left free, B1 x T32k with long memory 1.2 -> 9.2 ms on an H100
    (NOTES.md v68). Also: the Triton walk's chunk keeps the flagged chunks' branch off its path, at
    most 24 instructions over v66's 912 (its tile and beta loaded again inside the branch, not held
    from the main path: 1019 there in v67)."""
    run = _report("--variants", "default", "--shape", shape)
    assert re.search(rf"^default +beside the WY pass: {walk} and wy_kernel fit on one SM", run.stdout, re.M), \
        run.stdout
    if walk == "_chunk_fwd_kernel":
        instr, branch = re.search(r"^default +_chunk_fwd_kernel .* (\d+)(?:-(\d+))?/\d+/\d+ ", run.stdout,
                                  re.M).groups()
        assert int(instr) - int(branch or 0) <= 912 + 24, run.stdout


def test_state_row_maxima_run_on_packed_halves(tmp_path):
    """walk_gluon_t takes each column's largest state entry from the state's fp16 copy (the one its
    products read), which ptxas compiles to three-input packed maxima (VHMNMX: two entries an
    instruction, against FMNMX's one on the fp32 state; the split walk's chunk 1278 -> 1250
    instructions at B1 x T32k, benchmarks/NOTES.md v43): at K = 64 at least 8 (the fp32 maxima: none)."""
    _report("--variants", "gluon t", "--shape", "1,140", "--heads", "1,2,64,64", "--dump", str(tmp_path))
    sass = (tmp_path / "gluon_t" / "walk_t_kernel.sass").read_text()
    assert len(re.findall(r"\bVHMNMX\b", sass)) >= 8


def test_decays_stored_by_head_compile_without_spills():
    """The default decays_layout ("heads" with the Gluon walks) at B1 x T32k (the ordered walk and the
    automatic split's walk_t_kernel, both reading G a head's tokens contiguous): no spilled register
    in either walk, no read of an unwritten uniform register, and no more instructions a chunk than
    the walks reading G [tokens, HV] ("decays by token")."""
    run = _report("--variants", "default,decays by token", "--shape", "1,32768", "--check")
    # (A chunk's instructions: the loop's, less those behind the rare branches, "1453-537".)
    loops = {(variant, kernel): (st, ld, int(instr) - int(branch or 0)) for variant, kernel, st, ld, instr, branch in
             re.findall(r"^(default|decays by token) +(walk_\w+) +\S+ +\d+ +\d+ +(\d+)/(\d+) .* (\d+)(?:-(\d+))?/\d+/\d+ ",
                        run.stdout, re.M)}
    for kernel in ("walk_gluon_kernel", "walk_t_kernel"):
        st, ld, chunk = loops["default", kernel]
        # (+4: by head, the chunk's low-parts flag has a base address of its own: one 64-bit add, v67.)
        assert (st, ld) == ("0", "0") and chunk <= loops["decays by token", kernel][2] + 4, (kernel, loops)


def test_heads_marked_by_the_wy_pass_compile():
    """split_heads_in="wy" at B1 x T32k (the automatic split): the WY pass with the heads' test
    (wy_kernel's FORGET) and the ordered walk reading them late (SKIP = 2) compile for sm_90a with no
    read of an unwritten uniform register, and no _forgetting_kernel is launched."""
    run = _report("--variants", "heads in wy", "--shape", "1,32768", "--check")
    kernels = re.findall(r"^heads in wy +(\w+_kernel) +\(", run.stdout, re.M)
    assert kernels == ["wy_kernel", "walk_gluon_kernel", "walk_t_kernel"]


@pytest.mark.parametrize("shape, packed", [("1,16384", None), ("8,4096", None), ("1,32768", "16")])
def test_descriptors_made_in_the_kernel_compile_without_spills(shape, packed):
    """walk_descriptors="kernel": the ordered walk (B = 1 from 256 chunks), the wide walk (dense, and
    packed sequences) compile for sm_90a with their TMA descriptors made in the kernel, without a
    spilled register, and with no read of an unwritten uniform register. Packed sequences (the wide
    walk's masked rows, at 255 registers before) spill since the chunks' low-parts flags (v67): at
    most 8 local loads and stores in the chunk loop, loop-invariant addresses reloaded from L1."""
    run = _report("--variants", "descs in kernel", "--shape", shape, "--check", *(["--packed", packed] if packed else []))
    walks = re.findall(r"^descs in kernel +(walk_\w+) +\S+ +\d+ +\d+ +(\d+)/(\d+) .* \d+(?:-\d+)?/\d+/(\d+) ",
                       run.stdout, re.M)
    if packed:
        assert walks and all(int(ldst) <= 8 for _, _, _, ldst in walks), run.stdout
    else:
        assert walks and all(st == ld == "0" for _, st, ld, _ in walks), run.stdout

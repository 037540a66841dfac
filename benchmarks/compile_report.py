"""Ahead-of-time compile report for the Triton forward: registers, spills, shared memory, matrix units.

No GPU needed. The launcher (gdn.ops.triton.forward.triton_forward) runs on ``meta`` tensors with its
kernels swapped for recorders, so every kernel is compiled with exactly the constexprs, argument
specialisations (16-divisible pointers and ints, ints equal to 1 folded) and launch options that a
real call would use; then ``triton.compile`` builds each one for an H100/H200 (sm_90a) and ptxas (from
the Triton wheel) reports registers and spills, cuobjdump the SASS.

    python3 benchmarks/compile_report.py                      # every variant, B1 x T32k, H200 SM count
    python3 benchmarks/compile_report.py --variants default,product --dump /tmp/gdn_asm
    python3 benchmarks/compile_report.py --shape 1,140 --heads 1,2,32,32 --num-segments 2 --check
    python3 benchmarks/compile_report.py --variants default --shape 8,4096 --lines 12   # where instructions go
    python3 benchmarks/compile_report.py --variants default --shape 8,4096 --loop-lines 20   # ... in a walk's chunk
    python3 benchmarks/compile_report.py --variants default --shape 1,32768 --launches   # what a call launches

Columns: w (warps), regs (per thread, 255 at most), spill st/ld (bytes a thread, ptxas -v), stack
(bytes of local memory a thread), smem (bytes of shared memory a program; "!" past the 227 KiB one
sm_90 program may have: it would not launch), occ (programs one SM holds, from registers and shared
memory), HGMMA (warpgroup MMAs, how many take bf16 / tf32 operands), HMMA (mma.sync), LDL/STL
(local-memory loads/stores in the SASS: spills and register arrays), cvt (ttg.convert_layout ops in
the TTGIR: register shuffles, mostly through shared memory), instr (SASS instructions), loop
(instructions / HGMMA / LDL+STL in the largest loop body: one chunk of the state walk or segment
maps, their critical path; "-N": N of those instructions sit in blocks behind forward branches
of 100 or more, e.g. the posterior split's checkpoint, which one chunk of all takes), ser (ptxas reports wgmma serialized for lack of registers), ur? (reads
of uniform registers that nothing wrote before: a miscompile, see undefined_uniform_reads; must be 0).
"""
from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)         # compile for real, never interpret

import torch
import triton
from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDAOptions
from triton.compiler import ASTSource, make_backend
from triton.experimental.gluon._runtime import GluonASTSource

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import gdn.ops.triton.forward as forward         # noqa: E402
import gdn.ops.triton.plan as planning           # noqa: E402  (its device probes, replaced for an sm_90 target)
import gdn.ops.triton.walk_gluon as walk_gluon   # noqa: E402
import gdn.ops.triton.split_walk as split_walk   # noqa: E402
import gdn.ops.triton.walk_gluon_t as walk_gluon_t   # noqa: E402
from gdn.ops.triton.configs import CONFIGS, config   # noqa: E402
from sass_text import SASS_LINE, sass_instructions   # noqa: E402  (this script's folder)

# (module, name) of every kernel the launcher may run: the Gluon walks' live in their own modules.
KERNELS = tuple((forward, name) for name in ("wy_kernel", "_segment_maps_kernel", "_segment_maps_f16_kernel", "_chunk_fwd_kernel")) + (
    (walk_gluon, "walk_gluon_kernel"), (walk_gluon_t, "walk_t_kernel"), (split_walk, "_chunk_growth_kernel"),
    (split_walk, "_segment_bounds_kernel"), (split_walk, "_forgetting_kernel"), (split_walk, "_keys_grow_kernel"))
NVIDIA_BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"



class _Recorder:
    """Stands in for a JITFunction: ``kernel[grid](*args, **kw)`` records the launch instead of running."""

    def __init__(self, fn, launches):
        self.fn, self.launches = fn, launches

    def __getitem__(self, grid):
        return lambda *args, **kw: self.launches.append((self.fn, grid, args, kw))


@contextlib.contextmanager
def kernels_swapped(wrap):
    """Every kernel of KERNELS replaced by wrap(name, kernel) (an object indexed by the grid, as a
    JITFunction is) inside the block, restored after it (gpu_check.py's stages, launch_overhead.py)."""
    saved = [(module, name, getattr(module, name)) for module, name in KERNELS]
    try:
        for module, name, fn in saved:
            setattr(module, name, wrap(name, fn))
        yield
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)


def capture_launches(B, T, H, HV, K, V, num_sms, dtype=torch.bfloat16, packed=0, initial_state=False, graph=False,
                     **kw):
    """The kernel launches triton_forward makes for this problem on a GPU with ``num_sms`` SMs
    (``packed`` > 0: B = 1 and T tokens packed as that many sequences, through cu_seqlens; with an
    initial state if ``initial_state``; as while a CUDA graph is being captured if ``graph``)."""
    launches = []
    saved_sms, saved_tma, saved_capturing = planning.num_sms, planning._tma_ready, planning.stream_capturing
    try:
        planning.num_sms = lambda device: num_sms
        planning._tma_ready = lambda *tensors: True        # an sm_90 target, tensors as torch allocates them
        planning.stream_capturing = lambda q: graph
        q = torch.empty(B, T, H, K, dtype=dtype, device="meta")
        k = torch.empty_like(q)
        v = torch.empty(B, T, HV, V, dtype=dtype, device="meta")
        g = torch.empty(B, T, HV, dtype=torch.float32, device="meta")
        beta = torch.empty_like(g)
        if packed:
            kw = dict(kw, cu_seqlens=torch.empty(packed + 1, dtype=torch.int32, device="meta"))
        if initial_state:
            kw = dict(kw, initial_state=torch.empty(packed or B, HV, K, V, device="meta"))
        kw = dict(dict(scale=K ** -0.5, output_final_state=True, use_qk_l2norm=True), **kw)
        with kernels_swapped(lambda name, fn: _Recorder(fn, launches)):
            forward.triton_forward(q, k, v, g, beta, **kw)
    finally:
        planning.num_sms, planning._tma_ready, planning.stream_capturing = saved_sms, saved_tma, saved_capturing
    return launches


def describe_launch(fn, grid, args, kw) -> str:
    """One recorded launch as text: the kernel, its grid, each argument (a tensor as its shape, strides
    and dtype; a TMA descriptor as its shape, strides and block) and its keywords (constexprs and
    launch options): what --launches prints, so that two versions of the launcher compare by diff."""
    def arg(x):
        if isinstance(x, torch.Tensor):
            return f"{tuple(x.shape)}/{tuple(x.stride())}/{str(x.dtype).replace('torch.', '')}"
        if hasattr(x, "block_shape") and hasattr(x, "strides"):
            return f"desc{tuple(x.shape)}/{tuple(x.strides)}/{tuple(x.block_shape)}"
        return repr(x)
    keywords = ", ".join(f"{name}={arg(kw[name])}" for name in sorted(kw))
    return f"{fn.__name__}[{grid}]({', '.join(arg(x) for x in args)}; {keywords})"


def compile_launch(fn, args, kw, target):
    """triton.compile the kernel as JITFunction.run would specialise it for these arguments."""
    backend = make_backend(target)
    sig = inspect.signature(fn.fn)
    # (As JITFunction.run: a compile option that is also a kernel's parameter, num_warps in the Gluon
    # walks, is both.)
    options = {name: kw[name] for name in kw if name not in sig.parameters or name in CUDAOptions.__dataclass_fields__}
    bound = sig.bind(*args, **{name: val for name, val in kw.items() if name in sig.parameters})
    bound.apply_defaults()
    signature, constexprs, attrs = {}, {}, {}
    for i, (kp, (name, val)) in enumerate(zip(fn.params, bound.arguments.items())):
        if kp.is_constexpr:
            signature[name], constexprs[(i,)] = "constexpr", val
            continue
        ty, spec = native_specialize_impl(backend, val, kp.is_const, not kp.do_not_specialize,
                                          not kp.do_not_specialize_on_alignment)
        signature[name] = ty
        if ty == "constexpr":
            constexprs[(i,)] = spec
        elif isinstance(spec, str):
            attrs[(i,)] = backend.parse_attr(spec)
    source = GluonASTSource if getattr(fn, "is_gluon", lambda: False)() else ASTSource
    return triton.compile(source(fn, signature, constexprs, attrs), target=target, options=options)


def ptxas_info(ptx, arch):
    """Registers, spill bytes, stack and warnings from ``ptxas -v`` (the flags Triton uses)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        Path(src).write_text(ptx)
        res = subprocess.run([str(NVIDIA_BIN / "ptxas"), "-lineinfo", "-v", f"--gpu-name={arch}", src,
                              "-o", src + ".o"], capture_output=True, text=True)
    log = res.stderr
    num = lambda pat: int(m.group(1)) if (m := re.search(pat, log)) else -1
    return dict(regs=num(r"Used (\d+) registers"), spill_st=num(r"(\d+) bytes spill stores"),
                spill_ld=num(r"(\d+) bytes spill loads"), stack=num(r"(\d+) bytes stack frame"),
                serialized="serialized" in log, log=log)


_PREDICATED_BRA = re.compile(r"/\*([0-9a-f]{4,})\*/\s+@!?U?P[T0-9]+\s+BRA")


def largest_loop(branches):
    """(first, last) address of the largest loop among branches [(address, target, conditional)]: the
    widest conditional backward branch (a loop's back edge), else the widest backward branch; (0, -1)
    where there is none. (An mbarrier wait's retry is an unconditional branch back from a block ptxas
    places after the epilogue: as the widest, it would count the epilogue as the loop's.)"""
    loop = (0, -1)
    for wanted in (True, False):
        for addr, target, conditional in branches:
            if (conditional or not wanted) and target < addr and addr - target > loop[1] - loop[0]:
                loop = (target, addr)
        if loop[1] >= 0:
            break
    return loop


def sass_info(cubin):
    """Opcode counts over the kernel and over its largest loop (largest_loop), and the SASS."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        Path(path).write_bytes(cubin)
        sass = subprocess.run([str(NVIDIA_BIN / "cuobjdump"), "-sass", path], capture_output=True,
                              text=True).stdout
    instrs = sass_instructions(sass)
    conditional = {int(a, 16) for a in _PREDICATED_BRA.findall(sass)}
    branches = [(addr, int(m.group(1), 16), addr in conditional) for addr, op, rest in instrs
                if op.startswith("BRA") and (m := re.search(r"0x([0-9a-f]+)", rest))]
    loop = largest_loop(branches)

    def count(selected):
        c = Counter(op.split(".")[0] for _, op, _ in selected)
        c["HGMMA_BF16"] = sum(1 for _, op, _ in selected if op.startswith("HGMMA") and "BF16" in op)
        c["HGMMA_TF32"] = sum(1 for _, op, _ in selected if op.startswith("HGMMA") and "TF32" in op)
        c["instr"] = len(selected)
        return c
    body = [i for i in instrs if loop[0] <= i[0] <= loop[1]]
    in_loop = count(body)
    # The loop's blocks behind forward branches over 100 or more instructions: code a chunk skips
    # unless, e.g., it is the split's checkpoint (taken once) or a chunk whose T diag(beta) carries
    # its low parts (rare). Nested or overlapping ones counted once.
    spans = [(addr, target) for addr, op, rest in body
             if op.startswith("BRA") and (m := re.search(r"0x([0-9a-f]+)", rest))
             and addr < (target := int(m.group(1), 16)) <= loop[1]]
    spans = [(lo, hi) for lo, hi in spans if sum(1 for a, _, _ in body if lo < a < hi) >= 100]
    in_loop["skipped"] = sum(1 for a, _, _ in body if any(lo < a < hi for lo, hi in spans))
    return count(instrs), in_loop, sass


_LINE_MARK = re.compile(r'//## File "([^"]+)", line (\d+)')
_LABEL = re.compile(r"^(\.L\w+):")                  # nvdisasm's branch targets
_LABEL_TARGET = re.compile(r"`\((\.L\w+)\)")


_ENCODING_HIGH = re.compile(r"^\s*/\* (0x[0-9a-f]{16}) \*/\s*$")     # nvdisasm -hex: an instruction's upper 64 bits


def decode_control(high):
    """The scheduling controls in the upper 64 bits of a Volta-or-later SASS instruction (its bits 105
    to 127): (stall cycles, yield, write scoreboard, read scoreboard, wait mask). A variable-latency
    instruction (a load, a shared-memory access, a shuffle, MUFU) releases its write scoreboard once
    its result is written and its read scoreboard once its operands are read; 7 is none. An
    instruction whose mask has bit i waits for scoreboard i first."""
    c = high >> 41
    return c & 0xF, (c >> 4) & 1, (c >> 5) & 7, (c >> 8) & 7, (c >> 11) & 0x3F


def line_listing(ptx, arch, controls=False):
    """The PTX through ptxas -lineinfo, then nvdisasm -g, which marks where each source line's
    instructions start (an inlined function's by its own file and line). Returns (marked, labels):
    marked [(address, opcode, text, (file name, line) or None)] for every SASS instruction in order
    (ptxas leaves some without a mark: None), labels {branch label: address}. controls: also
    {address: decode_control(...)} of every instruction, from the same binary (nvdisasm -hex)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        Path(src).write_text(ptx)
        subprocess.run([str(NVIDIA_BIN / "ptxas"), "-lineinfo", f"--gpu-name={arch}", src, "-o", src + ".o"],
                       capture_output=True, check=True)
        listing = subprocess.run([str(NVIDIA_BIN / "nvdisasm"), "-g", "-c", *(["-hex"] if controls else []),
                                  src + ".o"], capture_output=True, text=True).stdout
    marked, labels, pending, here, control = [], {}, [], None, {}
    for text in listing.splitlines():
        if (mark := _LINE_MARK.search(text)):
            here = (Path(mark.group(1)).name, int(mark.group(2)))
        elif (label := _LABEL.match(text)):
            pending.append(label.group(1))
        elif (m := SASS_LINE.search(text)):
            addr = int(m.group(1), 16)
            labels.update((name, addr) for name in pending)
            pending = []
            marked.append((addr, m.group(2), text, here))
        elif controls and marked and (high := _ENCODING_HIGH.match(text)):
            control[marked[-1][0]] = decode_control(int(high.group(1), 16))
    return (marked, labels, control) if controls else (marked, labels)


def sass_by_line(ptx, arch, loop_only=False):
    """SASS instructions per source line (line_listing's marks). Returns {(file name, line): Counter of
    opcodes}. Only the instructions under a mark are counted. loop_only: only those of the largest
    loop (largest_loop on this listing, whose branches name labels: one chunk of a walk, what its
    critical path runs)."""
    marked, labels = line_listing(ptx, arch)
    loop = (0, 1 << 62)
    if loop_only:
        loop = largest_loop([(addr, labels[t.group(1)], "@" in text.split("BRA")[0])
                             for addr, op, text, _ in marked
                             if op.startswith("BRA") and (t := _LABEL_TARGET.search(text)) and t.group(1) in labels])
    lines = {}
    for addr, op, _, where in marked:
        if where and loop[0] <= addr <= loop[1]:
            lines.setdefault(where, Counter())[op.split(".")[0]] += 1
    return lines


def top_lines(lines, n):
    """The n source lines with the most instructions, one text line each: file:line, the count, its
    three commonest opcodes."""
    ranked = sorted(lines.items(), key=lambda item: -sum(item[1].values()))[:n]
    return [f"{name}:{line:<5} {sum(ops.values()):>5}  " + ", ".join(f"{op} {k}" for op, k in ops.most_common(3))
            for (name, line), ops in ranked]


# Instructions whose first operand is read, not written (stores, barriers, branches, the MMAs).
_NO_DEST = ("HGMMA", "STS", "ST", "BAR", "WARPGROUP", "LDSM", "LDS", "STSM", "BRA", "EXIT", "RED", "ATOM")


def undefined_uniform_reads(sass):
    """(address, opcode) of each read of a uniform register (URn) that no earlier instruction, in
    address order, writes. ptxas (Triton 3.6) emitted such reads as the base of a wgmma's shared-memory
    descriptor in the WY pass at chunk 64 and K < 64: wrong results on an H200, no fault
    (benchmarks/NOTES.md v14). A linear scan, so a register first written later in a loop body would
    also count; every kernel of the default configurations scans empty."""
    written, bad = set(), []
    for addr, op, rest in SASS_LINE.findall(sass):
        operands = [o.strip() for o in rest.split(",")] if rest.strip() else []
        if op.split(".")[0] in _NO_DEST:            # (by name: REDUX, unlike RED, writes a register)
            dests, srcs = [], operands
        elif op.startswith("R2UR"):              # "R2UR P0, UR7, R2": a predicate and a register written
            dests, srcs = operands[:-1], operands[-1:]
        elif op.startswith(("LOP3", "ULOP3")) and re.fullmatch(r"U?P\d", operands[0] if operands else ""):
            # "ULOP3.LUT UP0, UR26, UR9, 0x1, URZ, 0xc0, !UPT": a predicate and a register written
            dests, srcs = operands[:2], operands[2:]
        else:
            dests, srcs = operands[:1], operands[1:]
        if not op.startswith("HGMMA"):
            bad += [(addr, op) for src in srcs for r in re.findall(r"\bUR(\d+)\b", src) if int(r) not in written]
        for dest in dests:
            for r in re.findall(r"\bUR(\d+)\b", dest):
                written.add(int(r))
                if ".64" in op or ".WIDE" in op:        # a register pair
                    written.add(int(r) + 1)
    return bad


def analyse(ck, arch):
    info = ptxas_info(ck.asm["ptx"], arch)
    total, loop, sass = sass_info(ck.asm["cubin"])
    ttgir = ck.asm["ttgir"]
    info.update(smem=ck.metadata.shared, warps=ck.metadata.num_warps, total=total, loop=loop, sass=sass,
                undefined_ur=len(undefined_uniform_reads(sass)),
                cvt=ttgir.count("ttg.convert_layout"),
                wgmma_ptx=len(re.findall(r"wgmma\.mma_async", ck.asm["ptx"])),
                mma_ptx=len(re.findall(r"\bmma\.sync", ck.asm["ptx"])))
    return info


SMEM_LIMIT = 232448           # bytes of shared memory one program may use on sm_90 (227 KiB)
SMEM_PER_SM = 233472          # bytes of shared memory an sm_90 SM has for programs (228 KiB)


def program_registers(regs, warps):
    """Registers one program holds on an SM: allocated per warp, in units of 8 a thread."""
    return -(-max(regs, 1) // 8) * 8 * 32 * warps


def programs_per_sm(regs, warps, smem):
    """Resident programs per SM: 64K registers (program_registers), 228 KiB of shared memory (1 KiB
    reserved per program), 64 warps."""
    return min(65536 // program_registers(regs, warps), SMEM_PER_SM // (smem + 1024), 64 // warps)


def beside(walk, wy):
    """Whether one program of the walk (analyse's dict) and one of the WY pass fit on one SM together,
    as a walk launched beside the WY pass (WAIT) needs: without room, the WY pass runs only on the SMs
    the walk leaves free while the walk waits for it (NOTES.md v68: 10x slower). (fits, the sums)."""
    regs = [program_registers(r["regs"], r["warps"]) for r in (walk, wy)]
    smem = [r["smem"] + 1024 for r in (walk, wy)]
    fits = sum(regs) <= 65536 and sum(smem) <= SMEM_PER_SM and walk["warps"] + wy["warps"] <= 64
    return fits, f"shared memory {smem[0]} + {smem[1]} of {SMEM_PER_SM} B, registers {regs[0]} + {regs[1]} of 65536"


def row(variant, name, grid, r):
    t, lp = r["total"], r["loop"]
    hg = f"{t['HGMMA']} ({t['HGMMA_BF16']}b/{t['HGMMA_TF32']}t)"
    skipped = f"-{lp['skipped']}" if lp["skipped"] >= 100 else ""
    loop = f"{lp['instr']}{skipped}/{lp['HGMMA']}/{lp['LDL'] + lp['STL']}" if lp["instr"] else "-"
    smem = f"{r['smem']}{'!' if r['smem'] > SMEM_LIMIT else ''}"
    occ = programs_per_sm(r["regs"], r["warps"], r["smem"])
    return (f"{variant:<21} {name:<23}{str(tuple(grid)):<15}{r['warps']:>3}{r['regs']:>5}"
            f"{r['spill_st']:>7}/{r['spill_ld']:<6}{r['stack']:>6}{smem:>8}{occ:>4} {hg:<16}{t['HMMA']:>5}"
            f"{t['LDL']:>6}/{t['STL']:<5}{r['cvt']:>4}{t['instr']:>7}  {loop:<16}{'Y' if r['serialized'] else '-':>3}"
            f"{r['undefined_ur']:>4}")


HEADER = (f"{'variant':<22}{'kernel':<23}{'grid':<15}{'w':>3}{'regs':>5}{'spill st/ld':>14}{'stack':>6}"
          f"{'smem':>8}{'occ':>4} {'HGMMA (bf16/tf32)':<16}{'HMMA':>5}{'LDL/STL':>12}{'cvt':>4}{'instr':>7}"
          f"  {'loop ins/HGMMA/LDST':<20}{'ser':>3}{'ur?':>4}")


def problem_parser(description: str) -> argparse.ArgumentParser:
    """The arguments that name a problem, its variants and a target (this script's; precompile.py's)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--variants", default=",".join(CONFIGS),
                    help='comma-separated names of CONFIGS; "a&b" merges configs a and b (b wins)')
    ap.add_argument("--shape", default="1,32768", help="B,T")
    ap.add_argument("--heads", default="16,32,128,128", help="H,HV,K,V")
    ap.add_argument("--dtype", default="bfloat16", help="input dtype: bfloat16, float16 or float32")
    ap.add_argument("--chunk", type=int, default=64, help="chunk_size")
    ap.add_argument("--packed", type=int, default=0, help="pack T tokens as this many sequences (varlen)")
    ap.add_argument("--no-l2norm", action="store_true", help="use_qk_l2norm=False")
    ap.add_argument("--initial-state", action="store_true", help="pass an initial state (the kernels' HAS_H0)")
    ap.add_argument("--num-sms", type=int, default=132, help="SM count the segment choice sees (H200: 132)")
    ap.add_argument("--arch", type=int, default=90, help="CUDA compute capability to compile for")
    ap.add_argument("--num-segments", type=int, default=None, help="force the per-sequence split")
    ap.add_argument("--graph", action="store_true", help="as while a CUDA graph is being captured")
    return ap


def problem_of(args) -> tuple:
    """problem_parser's arguments as ((B, T, H, HV, K, V), capture_launches' keywords, the target)."""
    B, T = (int(x) for x in args.shape.split(","))
    H, HV, K, V = (int(x) for x in args.heads.split(","))
    problem = dict(dtype=getattr(torch, args.dtype), packed=args.packed, chunk_size=args.chunk,
                   use_qk_l2norm=not args.no_l2norm, initial_state=args.initial_state, graph=args.graph)
    if args.num_segments is not None:
        problem["num_segments"] = args.num_segments
    return (B, T, H, HV, K, V), problem, GPUTarget("cuda", args.arch, 32)


def main(argv=None):
    # scripts/triton_cache.sh's cache keeps binaries only, and this report reads each kernel's PTX
    # and TTGIR: a cache of its own then (here, not at import: gpu_check's stages import this module)
    if os.environ.pop("TRITON_STORE_BINARY_ONLY", None):
        os.environ["TRITON_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), "gdn_compile_report_cache")
    ap = problem_parser(__doc__.split("\n")[0])
    ap.add_argument("--dump", default=None, help="folder to write ttgir/ptx/sass/ptxas log of every kernel")
    ap.add_argument("--ptxas-log", action="store_true", help="print ptxas -v output of each kernel")
    ap.add_argument("--lines", type=int, default=0,
                    help="print each kernel's N source lines with the most SASS instructions (ptxas -lineinfo, "
                         "nvdisasm -g): where a kernel's instructions go (static counts: code behind a rarely "
                         "taken branch, e.g. the WY pass's tf32x3 fallback, counts as much as the main path)")
    ap.add_argument("--loop-lines", type=int, default=0,
                    help="the same for the instructions of each kernel's largest loop only (the loop column's: "
                         "one chunk of a walk)")
    ap.add_argument("--launches", action="store_true",
                    help="print each variant's launches (describe_launch) instead of compiling them")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a kernel reads a uniform register nothing wrote (the ur? column)")
    args = ap.parse_args(argv)
    (B, T, H, HV, K, V), problem, target = problem_of(args)
    arch = f"sm_{args.arch}a" if args.arch >= 90 else f"sm_{args.arch}"
    packed = f" packed as {args.packed} sequences" if args.packed else ""
    print(f"triton {triton.__version__}, target {arch}, B{B} x T{T}{packed}, "
          f"H={H} HV={HV} K={K} V={V} {args.dtype}, chunk {args.chunk}, "
          f"{'no l2norm' if args.no_l2norm else 'l2norm'}, {args.num_sms} SMs")
    if not args.launches:
        print(HEADER)
    seen = {}
    for vname in args.variants.split(","):
        config_kw = config(vname)
        try:
            launches = capture_launches(B, T, H, HV, K, V, args.num_sms, **{**problem, **config_kw})
        except ValueError as err:            # a knob this problem refuses (the launcher's own error)
            print(f"{vname:<22}refused: {err}")
            continue
        if args.launches:
            for fn, grid, largs, lkw in launches:
                print(f"{vname:<21} {describe_launch(fn, grid, largs, lkw)}")
            continue
        dumped = Counter()
        compiled = []
        for fn, grid, largs, lkw in launches:
            ck = compile_launch(fn, largs, lkw, target)
            if ck.hash not in seen:
                seen[ck.hash] = analyse(ck, arch)
            r = seen[ck.hash]
            compiled.append((fn.__name__, lkw, r))
            print(row(vname, fn.__name__, grid, r), flush=True)
            if args.ptxas_log:
                print("    " + r["log"].strip().replace("\n", "\n    "))
            if args.lines:
                for text in top_lines(sass_by_line(ck.asm["ptx"], arch), args.lines):
                    print("    " + text)
            if args.loop_lines:
                for text in top_lines(sass_by_line(ck.asm["ptx"], arch, loop_only=True), args.loop_lines):
                    print("    loop " + text)
            if args.dump:
                out = Path(args.dump) / re.sub(r"[^\w.+-]", "_", vname)
                out.mkdir(parents=True, exist_ok=True)
                # A kernel launched again (the split walk's two phases) gets a numbered name.
                name = fn.__name__ + (f".{dumped[fn.__name__]}" if dumped[fn.__name__] else "")
                dumped[fn.__name__] += 1
                for ext in ("ttgir", "ptx"):
                    (out / f"{name}.{ext}").write_text(ck.asm[ext])
                (out / f"{name}.sass").write_text(r["sass"])
                (out / f"{name}.ptxas.log").write_text(r["log"])
        wy = [r for name, _, r in compiled if name == "wy_kernel"]
        for name, lkw, r in compiled:
            if lkw.get("WAIT") and wy:
                fits, sums = beside(r, wy[0])
                print(f"{vname:<22}beside the WY pass: {name} and wy_kernel {'fit' if fits else 'do NOT fit'} "
                      f"on one SM ({sums})")
    bad = sum(r["undefined_ur"] for r in seen.values())
    if args.check and bad:
        print(f"{bad} reads of uniform registers that nothing wrote (ur?): a miscompile")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

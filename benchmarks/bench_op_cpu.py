"""CPU speed of the op (issue: chunk >= 3x transformers, scan within 3x of chunk), one run, side by side.

B=1, H=HV=16, K=V=128, float32, no grad, l2norm, torch threads = 2 by default (--batch, --heads H,HV,
--dim K=V, --dtype to change them; transformers' version runs where H = HV). The providers take
turns inside every repeat (this VM's speed drifts between runs), in an order rotated each repeat,
median of the repeats.

    python benchmarks/bench_op_cpu.py [--lengths 512,2048,8192] [--repeats 5] [--threads 2] [--chunk-size 64]

`--lengths 1,2,4,8,16,32 --repeats 21` times a decode step and a few tokens: where `backend="auto"`
stops taking `recurrent` on the CPU (gdn.api.RECURRENT_MAX_T; BENCHMARKS.md, CPU: a decode step).
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time
import warnings

import torch

import gdn
from gdn.cli.peers import available_peers


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", default="512,2048,8192")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--chunk-size", type=int, default=64, help="chunk_size of the chunk and scan backends")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", default="16,16", help="H,HV: q/k heads, value heads")
    parser.add_argument("--dim", type=int, default=128, help="K = V")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--recurrent-max-T", type=int, default=2048, help="skip the token loop beyond this T")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    hf = available_peers("cpu").get("hf")          # transformers' own torch code, when installed
    B, (H, HV), K, dtype = args.batch, map(int, args.heads.split(",")), args.dim, getattr(torch, args.dtype)
    if HV != H:
        hf = None
    print(f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; B={B}, H={H}, HV={HV}, K=V={K}, {args.dtype}, no grad, l2norm, "
          f"chunk_size={args.chunk_size}; "
          f"median of {args.repeats}, providers interleaved in rotated order")
    print("\n| T | recurrent ms | chunk ms | scan ms | transformers ms | transformers / chunk | scan / chunk | chunk / recurrent |")
    print("|---|---|---|---|---|---|---|---|")
    for T in (int(t) for t in args.lengths.split(",")):
        gen = torch.Generator().manual_seed(T)
        q, k, v = (torch.randn(B, T, heads, K, generator=gen).to(dtype) for heads in (H, H, HV))
        g = torch.nn.functional.logsigmoid(torch.randn(B, T, HV, generator=gen) + 4)
        beta = torch.rand(B, T, HV, generator=gen)
        fns = {name: (lambda name=name: gdn.gated_delta_rule(q, k, v, g, beta, use_qk_l2norm=True, backend=name,
                                                                  chunk_size=args.chunk_size))
               for name in ("recurrent", "chunk", "scan") if name != "recurrent" or T <= args.recurrent_max_T}
        if hf is not None:
            fns["transformers"] = lambda: hf(q, k, v, g, beta, use_qk_l2norm=True)
        times = {name: [] for name in fns}
        with torch.no_grad():
            for fn in fns.values():
                fn()                                                   # warm-up
            order = list(fns.items())
            for r in range(args.repeats):
                # Rotated each repeat, so that no provider always runs right after the slow token loop
                # (whose big temporaries leave the allocator and caches cold for whoever comes next).
                for name, fn in order[r % len(order):] + order[:r % len(order)]:
                    start = time.perf_counter()
                    fn()
                    times[name].append((time.perf_counter() - start) * 1e3)
        ms = {name: statistics.median(t) for name, t in times.items()}
        cell = lambda name: f"{ms[name]:.{2 if ms[name] < 10 else 1}f}" if name in ms else "-"
        ratio = f"{ms['transformers'] / ms['chunk']:.2f}x" if "transformers" in ms else "-"
        recurrent = f"{ms['chunk'] / ms['recurrent']:.2f}x" if "recurrent" in ms else "-"
        print(f"| {T} | {cell('recurrent')} | {cell('chunk')} | {cell('scan')} | {cell('transformers')} | "
              f"{ratio} | {ms['scan'] / ms['chunk']:.2f}x | {recurrent} |", flush=True)


if __name__ == "__main__":
    main()

"""Hard inputs inside the documented limits: beta near 2 on repeated or nearly parallel unit keys.

Each step of the delta rule with beta |k|^2 = 2 is a reflection, I - 2 k k^T: it keeps the state's
norm, so every rounding is carried on instead of erased, and a chunked algorithm's in-chunk factors
(T diag(beta), whose rows then alternate ~+-2 across the chunk) cancel ~BT terms of the state's size.
This script measures, on the same inputs against the float64 chunk algorithm: our backends and
knobs (the fp16 walk of bf16 inputs, fp32 on the "subst" and "substitution" inverses, the torch chunk
backend) and the peers (FLA, FlashQLA, on bf16) where importable; then the time of fp32 inputs on
both inverses and of the bf16 default on these inputs against random ones (every chunk then takes
the tf32x3 fallback of the WY pass). benchmarks/NOTES.md v66-v67 has the question and the answers.

    python benchmarks/hard_inputs.py                     # on the GPU machine (peers: scripts/unpack_peers.sh)
    TRITON_INTERPRET=1 python benchmarks/hard_inputs.py --device cpu --shapes 1x256 --heads 1,2 --dim 32
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from gdn import gated_delta_rule
from gdn.cli.peers import available_peers
from gdn.cli.timing import random_problem
from gdn.ops.triton import triton_forward
from gpu_check import reference, rel                # (this script's folder is on sys.path)


def parallel_keys(B, T, H, HV, K, V, *, noise, beta, device, seed, gates="zero"):
    """q random unit rows; k one unit direction a head plus `noise` times a random unit row, then
    normalised (noise 0: every key of a head the same); v random; g = 0 (gates "zero": nothing
    forgets, so nothing erases an error either; the automatic split then walks every head in order)
    or logsigmoid(randn + 4) ("decaying": GUIDE.md's, which the split takes); beta constant. q, k, v
    fp32 (cast by the caller), g, beta fp32."""
    gen = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
    base = F.normalize(torch.randn(1, 1, H, K, generator=gen), dim=-1)
    k = F.normalize(base + noise * F.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1), dim=-1)
    v = torch.randn(B, T, HV, V, generator=gen)
    g = torch.zeros(B, T, HV)
    if gates == "decaying":
        g = F.logsigmoid(torch.randn(B, T, HV, generator=gen) + 4.0)
    b = torch.full((B, T, HV), float(beta))
    return [x.to(device) for x in (q, k, v, g, b)]


def providers(device, only=None):
    """{name: (input dtype, fn(q, k, v, g, beta) -> (o, S))}; only: the names whose first part
    (gdn, fla, flashqla) or whole name is listed."""
    def ours(dtype, **knobs):
        def call(q, k, v, g, beta):
            o = torch.full_like(v, float("nan"))       # poisoned: an unwritten row shows as NaN
            return triton_forward(q, k, v, g, beta, scale=q.shape[-1] ** -0.5, output_final_state=True,
                                  use_qk_l2norm=True, out=o, **knobs)
        return dtype, call

    def chunk(q, k, v, g, beta):
        return gated_delta_rule(q, k, v, g, beta, output_final_state=True, use_qk_l2norm=True, backend="chunk")

    found = {
        "gdn_bf16": ours(torch.bfloat16),
        "gdn_bf16_parts": ours(torch.bfloat16, operands="bf16_parts"),
        "gdn_fp32_subst": ours(torch.float32),
        "gdn_fp32_substitution": ours(torch.float32, inverse="substitution"),
        "gdn_chunk_fp32": (torch.float32, chunk),
    }
    for name, fn in available_peers(device).items():
        if name in ("fla", "flashqla"):
            found[f"{name}_bf16"] = (torch.bfloat16, lambda q, k, v, g, beta, fn=fn: fn(
                q, k, v, g, beta, output_final_state=True, use_qk_l2norm=True))
    if only:
        found = {name: fn for name, fn in found.items() if name in only or name.split("_")[0] in only}
    return found


def accuracy(args, device, B, T):
    (H, HV), K = args.heads, args.dim
    cases = [(noise, beta, gates) for gates in args.gates for noise in (0.0, 0.1) for beta in (1.0, 1.9, 1.99)]
    names = providers(device, args.providers)
    rows = []
    for noise, beta, gates in cases:
        seed = int(time.time() * 1e3) % 100000                      # fresh inputs every run
        inputs = parallel_keys(B, T, H, HV, K, K, noise=noise, beta=beta, device=device, seed=seed, gates=gates)
        cast = {}
        for dtype in (torch.bfloat16, torch.float32):
            cast[dtype] = [x.to(dtype) if i < 3 else x for i, x in enumerate(inputs)]
        # The reference sees each dtype's rounded inputs: bf16 rows against the bf16 inputs' float64 answer.
        refs = {dtype: reference(*xs, None, None) for dtype, xs in cast.items()}
        for name, (dtype, fn) in names.items():
            try:
                o, S = fn(*cast[dtype])
            except Exception as e:                                     # a peer that refuses the case
                rows.append((gates, noise, beta, name, f"{type(e).__name__}", ""))
                continue
            o_ref, S_ref = refs[dtype]
            rows.append((gates, noise, beta, name, f"{rel(o, o_ref):.2e}", f"{rel(S, S_ref):.2e}"))
        print(f"B{B} x T{T} gates {gates} noise {noise} beta {beta}: done", flush=True)
    print(f"\nAccuracy, B{B} x T{T}, H {H} HV {HV}, K = V = {K}, l2norm; rel. error against float64:")
    print(f"{'gates':>9} {'noise':>6} {'beta':>5}  {'provider':<24} {'o':>9} {'S':>9}")
    for gates, noise, beta, name, eo, es in rows:
        print(f"{gates:>9} {noise:>6} {beta:>5}  {name:<24} {eo:>9} {es:>9}")


def timing(args, device):
    import triton.testing
    (H, HV), K = args.heads, args.dim
    print("\nTime (median ms of triton.testing.do_bench, l2norm, final state):")
    print(f"{'shape':<10} {'inputs':<28} {'config':<24} {'ms':>7}")
    for B, T in ((1, 32768), (8, 4096)):
        random = random_problem(B, T, H, HV, K, K, device=device, dtype=torch.float32)
        hard = parallel_keys(B, T, H, HV, K, K, noise=0.0, beta=1.99, device=device, seed=0)
        runs = [("random fp32", random, "default", {}), ("random fp32", random, "substitution",
                                                          dict(inverse="substitution")),
                ("random bf16", [x.to(torch.bfloat16) if i < 3 else x for i, x in enumerate(random)], "default", {}),
                ("parallel keys beta 1.99 bf16", [x.to(torch.bfloat16) if i < 3 else x for i, x in enumerate(hard)],
                 "default", {})]
        for label, (q, k, v, g, beta), name, knobs in runs:
            def call():
                return triton_forward(q, k, v, g, beta, scale=K ** -0.5, output_final_state=True,
                                      use_qk_l2norm=True, **knobs)
            ms = triton.testing.do_bench(call, warmup=50, rep=300)
            print(f"{f'{B}x{T}':<10} {label:<28} {name:<24} {ms:7.3f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shapes", default="1x4096", help="BxT,BxT,...")
    parser.add_argument("--gates", type=lambda s: s.split(","), default=["zero"], help="zero,decaying")
    parser.add_argument("--providers", type=lambda s: s.split(","), default=None,
                        help="names (gdn_bf16, ...) or their first part (gdn, fla, flashqla); default all")
    parser.add_argument("--heads", type=lambda s: tuple(int(x) for x in s.split(",")), default=(16, 32))
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--no-time", action="store_true", help="accuracy only")
    args = parser.parse_args()
    device = torch.device(args.device)
    for shape in args.shapes.split(","):
        B, T = (int(x) for x in shape.split("x"))
        accuracy(args, device, B, T)
    if device.type == "cuda" and not args.no_time:
        timing(args, device)


if __name__ == "__main__":
    main()

"""`gdn demo`: the 3-token walkthrough, a cross-check table, a timing table, a tiny model."""
from __future__ import annotations

import importlib
import itertools
import platform
import sys
import warnings

import torch

from .. import gated_delta_rule
from .peers import available_peers
from .timing import median_ms, random_problem
from .walkthrough import print_walkthrough


def _backends(device):
    names = ["recurrent", "chunk", "scan"]
    if device.startswith("cuda"):
        names.append("triton")
    return names


def _hf_chunk():
    """transformers' Qwen3-Next torch implementation (gdn.cli.peers' "hf"), when transformers is installed."""
    warnings.filterwarnings("ignore", message=".*flash-linear-attention.*")
    return available_peers("cpu").get("hf")


def print_cross_check(device: str) -> None:
    print("\n== cross-check: each pair of algorithms on random inputs "
          "(B=2, T=300, H=2, HV=4, K=V=64, l2norm, initial state) ==")
    print(f"{'dtype':>8} {'pair':>20} {'max abs err o':>14} {'rel err o':>10} {'rel err state':>14}")
    for dtype in (torch.float64, torch.float32):
        q, k, v, g, beta = random_problem(2, 300, 2, 4, 64, 64, device=device, dtype=dtype, gates="decaying")
        g, beta = g.to(dtype), beta.to(dtype)
        S0 = torch.randn(2, 4, 64, 64, device=device, dtype=dtype)
        results = {b: gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                       use_qk_l2norm=True, backend=b) for b in _backends(device)
                   if not (b == "triton" and dtype == torch.float64)}
        for a, b in itertools.combinations(results, 2):
            (oa, sa), (ob, sb) = results[a], results[b]
            rel = lambda x, y: ((x - y).norm() / y.norm()).item()
            print(f"{str(dtype)[6:]:>8} {a + ' vs ' + b:>20} {(oa - ob).abs().max().item():>14.2e} "
                  f"{rel(oa, ob):>10.2e} {rel(sa, sb):>14.2e}")


def print_timing(device: str, max_T: int) -> None:
    H, K, V = 16, 128, 128
    hf = _hf_chunk()
    lengths = [T for T in (256, 512, 1024, 2048, 4096, 8192) if T <= max_T]
    print(f"\n== timing on {device} ({torch.get_num_threads()} threads): B=1, H=HV={H}, K=V={K}, float32, "
          "no grad, l2norm; median ms ==")
    columns = _backends(device) + (["transformers"] if hf else [])
    print(f"{'T':>6} " + " ".join(f"{c:>12}" for c in columns) + "   chunk speedup vs " +
          ("transformers" if hf else "recurrent"))
    q, k, v, g, beta = random_problem(1, 64, H, H, K, V, device=device)
    with torch.no_grad():                         # process-wide warm-up (thread pools, kernels)
        for name in columns:
            if name != "transformers":
                gated_delta_rule(q, k, v, g, beta, use_qk_l2norm=True, backend=name)
    for T in lengths:
        q, k, v, g, beta = random_problem(1, T, H, H, K, V, device=device)
        row = {}
        with torch.no_grad():
            for name in columns:
                print(f"  timing {name} at T={T} ...", file=sys.stderr, flush=True)
                if name == "transformers":
                    fn = lambda: hf(q, k, v, g, beta, use_qk_l2norm=True)
                else:
                    fn = lambda name=name: gated_delta_rule(q, k, v, g, beta, use_qk_l2norm=True, backend=name)
                repeats = 1 if name == "recurrent" and T > 1024 else 3
                row[name] = median_ms(fn, device, repeats=repeats)
        base = row.get("transformers", row["recurrent"])
        print(f"{T:>6} " + " ".join(f"{row[c]:>12.1f}" for c in columns) + f"   {base / row['chunk']:.1f}x")


def run_demo(args) -> None:
    device = args.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda asked for, but torch sees no CUDA device")
    print(f"gdn demo on {device} | torch {torch.__version__} | {platform.processor() or platform.machine()}\n")
    print("== seed 002's 3-token example, by all three algorithms ==")
    print_walkthrough()
    print_cross_check(device)
    print_timing(device, args.max_T)
    if not args.skip_model:
        print_model_part(device)


def print_model_part(device: str) -> None:
    """The tiny Qwen3.5-shaped model through transformers, with and without gdn; skipped, saying
    why, where transformers is not installed (the ``hf`` extra)."""
    try:
        importlib.import_module("transformers")      # (demo_model imports it only when it runs)
        from .demo_model import run_demo_model
    except ImportError as err:
        print(f"\n(tiny-model part skipped: {err}; pip install -e '.[hf]' adds it)")
        return
    print("\n== a tiny Qwen3.5-shaped model through transformers, with and without gdn ==")
    run_demo_model(device=device)

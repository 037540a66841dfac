"""Random problems x random knob sets of the Triton forward against float64: a sweep for wrong answers.

The test suite checks chosen shapes under chosen knobs; this draws them at random (B, T up to ~300,
packed sequences with empty ones, H, HV/H of 1-4, K and V of 16-128 with non-powers of two, chunk
16/32/64, fp32/bf16/fp16 inputs, l2norm or not, initial states, decaying/zero/forgetting gates,
beta in [0, 1] or 1) and, with ``--knobs single`` or ``pairs``, one config of
gdn/ops/triton/configs.py or two merged ("a&b"), sometimes with forced segments. Each call's o and
final state are compared with gdn's float64 chunk algorithm (itself checked against an independent
float64 recurrence by the tests); a knob set the shape does not take is refused by plan_forward and
counted as such. Its first run (thirtieth session) found q_late on the fp32-tile walk leaving q
unread (benchmarks/NOTES.md v35).

On the CPU the kernels run in Triton's interpreter (TRITON_INTERPRET=1, set here), ~0.1-5 s a case;
Gluon configs are left out there (no interpreter). On a GPU (``--device cuda``) the compiled kernels,
Gluon's included, with the output poisoned (NaN) before each call.

    python benchmarks/knob_sweep.py [--cases 200] [--seed 0] [--knobs none|single|pairs]
                                    [--configs "a;b"] [--device cpu] [--minutes M]

Prints one line a case (ok / FAIL / refused / ERROR) and a summary; exits 1 on any FAIL or ERROR.
--minutes: no case starts after M minutes (a GPU call's time limit: the summary still prints).
"""
from __future__ import annotations

import argparse
import itertools
import os
import random
import sys
import time
from pathlib import Path

# Bounds on the relative error of (o, S) by input dtype: twice the suite's for the fp16 walk's o.
BOUNDS = {"float32": (2e-3, 2e-3), "bfloat16": (1.5e-2, 3e-3), "float16": (5e-3, 3e-3)}
LOOSE = (1.5e-2, 1e-2)          # FLA's roundings (fast_dots, or w and u kept in bf16): ~3.5e-3 on S


def draw_problem(r: random.Random, torch, device: str):
    """(description, triton_forward's keywords) of one random problem (inputs: tests.reference's
    random_inputs)."""
    from tests.reference import random_inputs
    dtype = r.choice([torch.float32, torch.bfloat16, torch.bfloat16, torch.float16])
    H = r.choice([1, 2])
    HV = H * r.choice([1, 2, 3, 4])
    K, V = r.choice([16, 32, 40, 64, 128]), r.choice([16, 24, 32, 64, 128])
    C = r.choice([16, 32, 64, 64])
    l2norm, h0 = r.random() < 0.7, r.random() < 0.5
    gate, beta_one = r.choice(["decaying", "decaying", "zero", "forgetting"]), r.random() < 0.3
    cu = None
    if r.random() < 0.3:
        lengths = [r.choice([0, 1, r.randint(1, 150)]) for _ in range(r.randint(1, 4))]
        if sum(lengths) == 0:
            lengths[-1] = 5
        B, T, N = 1, sum(lengths), len(lengths)
        cu = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)
    else:
        B = r.choice([1, 2, 3])
        T = r.choice([1, 2, 15, 16, 17, 63, 64, 65, r.randint(1, 300)])
        N = B
    q, k, v, g, beta, S0 = random_inputs(B, T, H, HV, K, V, dtype=dtype, device=device, initial_state=h0, N=N,
                                         gate={"decaying": "normal", "forgetting": "strong"}.get(gate, gate),
                                         beta_mode=1.0 if beta_one else "rand", seed=r.randrange(1 << 30))
    scale = r.choice([K ** -0.5, 0.5, 1.0])
    desc = (f"{str(dtype)[6:]} B{B} T{T} H{H} HV{HV} K{K} V{V} C{C} l2norm {l2norm} h0 {h0} gates {gate}"
            f"{' beta 1' if beta_one else ''}" + (f" cu {cu.tolist()}" if cu is not None else ""))
    call = dict(q=q, k=k, v=v, g=g, beta=beta, scale=scale, initial_state=S0, output_final_state=True,
                cu_seqlens=cu, use_qk_l2norm=l2norm, chunk_size=C)
    return desc, call


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0, help="first case's seed (case i draws from seed + i)")
    ap.add_argument("--knobs", choices=["none", "single", "pairs"], default="single")
    ap.add_argument("--configs", help='";"-separated config names to draw from (default: all that run here)')
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--minutes", type=float, help="start no case after this many minutes")
    args = ap.parse_args(argv)
    deadline = None if args.minutes is None else time.monotonic() + 60 * args.minutes
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"           # before Triton is imported
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import torch

    import gdn
    from gdn.ops.triton import triton_forward
    from gdn.ops.triton.configs import CONFIGS, config
    from tests.tolerances import rel_err

    names = args.configs.split(";") if args.configs else [
        n for n in CONFIGS if args.device != "cpu" or not any(w in n for w in ("gluon", "split", "prio", "tokens"))]
    counts = dict(ok=0, FAIL=0, refused=0, ERROR=0)
    for case in range(args.seed, args.seed + args.cases):
        if deadline is not None and time.monotonic() >= deadline:
            print(f"stopped before case {case}: --minutes {args.minutes:g} spent", flush=True)
            break
        r = random.Random(case)
        desc, call = draw_problem(r, torch, args.device)
        knobs, label = {}, "defaults"
        if args.knobs != "none":
            label = "&".join(r.choice(names) for _ in range(1 if args.knobs == "single" else 2))
            knobs = config(label)
            if r.random() < 0.2:
                knobs = dict(knobs, num_segments=r.choice([2, 3]))
                label += " + segments"
        start = time.perf_counter()
        try:
            out = torch.full_like(call["v"], float("nan"))
            o, S = triton_forward(**call, out=out, **knobs)
        except ValueError as e:                          # plan_forward's refusal of a knob
            counts["refused"] += 1
            print(f"refused case {case} [{label}] {desc}: {str(e)[:140]}", flush=True)
            continue
        except Exception as e:                           # anything else is a bug
            counts["ERROR"] += 1
            print(f"ERROR   case {case} [{label}] {desc}: {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        ref = {n: (x.double() if torch.is_tensor(x) and x.is_floating_point() else x) for n, x in call.items()}
        o_ref, S_ref = gdn.gated_delta_rule(**ref, backend="chunk")
        err_o, err_S = rel_err(o, o_ref), rel_err(S, S_ref)
        loose = knobs.get("fast_dots") or knobs.get("wy_dtype", torch.float32) != torch.float32
        bound_o, bound_S = LOOSE if loose else BOUNDS[str(call["v"].dtype)[6:]]
        good = bool(torch.isfinite(o).all() and torch.isfinite(S).all()) and err_o <= bound_o and err_S <= bound_S
        counts["ok" if good else "FAIL"] += 1
        print(f"{'ok     ' if good else 'FAIL   '} case {case} [{label}] {desc}: o {err_o:.2e} S {err_S:.2e}"
              f" ({time.perf_counter() - start:.1f} s)", flush=True)
    print(" ".join(f"{k} {v}" for k, v in counts.items()))
    return 1 if counts["FAIL"] or counts["ERROR"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""`gdn verify`: every chosen backend against a float64 recurrence, on shapes and dtypes given as options."""
from __future__ import annotations

import torch

from .. import gated_delta_rule
from ..api import triton_available
from ..ops.common import triton_interpreting
from .argtypes import UsageError, check_heads

# Pass/fail bounds on the relative-norm error of o and the final state, by input dtype.
BOUNDS = {torch.float64: 1e-10, torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 5e-3}


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-300)).item()


def run_verify(args) -> int:
    device = args.device
    backends = [b for b in args.backends.split(",") if b]
    check_heads(args.H, args.HV)
    if "triton" in backends:
        if not triton_available():
            raise UsageError("argument --backends: triton needs the triton package (pip install triton)")
        if device == "cpu" and not triton_interpreting():
            raise UsageError("argument --backends: triton on the CPU runs in Triton's interpreter: set "
                             "TRITON_INTERPRET=1")
    dtypes = [getattr(torch, d) for d in args.dtypes.split(",") if d]
    lengths = [int(t) for t in args.T.split(",") if t]
    print(f"{'T':>6} {'dtype':>9} {'backend':>9} {'rel err o':>10} {'rel err S':>10} {'max |err| o':>11}  ok")
    failures = 0
    for T in lengths:
        gen = torch.Generator().manual_seed(args.seed + T)
        B = 1 if args.varlen else args.B
        q = torch.randn(B, T, args.H, args.K, generator=gen, dtype=torch.float64)
        k = torch.randn(B, T, args.H, args.K, generator=gen, dtype=torch.float64)
        if not args.l2norm:
            # Unit keys, as a model's are: with raw randn keys (|k|^2 ~ K, beta |k|^2 > 2) the
            # recurrence itself diverges and the states reach 1e20 and more.
            k = torch.nn.functional.normalize(k, dim=-1)
        v = torch.randn(B, T, args.HV, args.V, generator=gen, dtype=torch.float64)
        g = torch.nn.functional.logsigmoid(torch.randn(B, T, args.HV, generator=gen, dtype=torch.float64) + 3)
        beta = torch.rand(B, T, args.HV, generator=gen, dtype=torch.float64)
        cu = None
        if args.varlen:
            cuts = torch.randint(0, T + 1, (args.B - 1,), generator=gen).sort().values
            cu = torch.cat([torch.tensor([0]), cuts, torch.tensor([T])]).to(device=device)
        N = len(cu) - 1 if cu is not None else B
        S0 = torch.randn(N, args.HV, args.K, args.V, generator=gen, dtype=torch.float64)
        for dtype in dtypes:
            q_, k_, v_ = (x.to(device, dtype) for x in (q, k, v))
            gate = torch.float64 if dtype == torch.float64 else torch.float32
            g_, b_, s_ = (x.to(device, gate) for x in (g, beta, S0))
            # Reference: the recurrence in float64 on the same (rounded) inputs.
            o_ref, S_ref = gated_delta_rule(*(x.double() for x in (q_, k_, v_, g_, b_)), initial_state=s_.double(),
                                            output_final_state=True, cu_seqlens=cu, use_qk_l2norm=args.l2norm,
                                            backend="recurrent")
            for backend in backends:
                o, S = gated_delta_rule(q_, k_, v_, g_, b_, initial_state=s_, output_final_state=True,
                                        cu_seqlens=cu, use_qk_l2norm=args.l2norm, backend=backend,
                                        chunk_size=args.chunk_size)
                eo, es = _rel(o, o_ref), _rel(S, S_ref)
                ok = eo <= BOUNDS[dtype] and es <= BOUNDS[dtype] and bool(torch.isfinite(o).all())
                failures += not ok
                max_abs = (o.double() - o_ref).abs().max().item() if o.numel() else 0.0
                print(f"{T:>6} {str(dtype)[6:]:>9} {backend:>9} {eo:>10.2e} {es:>10.2e} {max_abs:>11.2e}  "
                      f"{'yes' if ok else 'NO'}", flush=True)
    print("all within bounds" if not failures else f"{failures} case(s) out of bounds")
    return 1 if failures else 0

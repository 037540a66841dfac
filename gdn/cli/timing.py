"""Timing helpers shared by `gdn demo` and `gdn bench`: median wall time on the CPU, CUDA events on GPUs."""
from __future__ import annotations

import statistics
import time

import torch


def median_ms(fn, device: str, *, repeats: int = 5, warmup: int = 1) -> float:
    """Median time of ``fn()`` in milliseconds (warm-up calls outside the timed region). On a GPU,
    ``triton.testing.do_bench`` after 200 ms of warm-up calls: a provider's first call may compile for
    tens of seconds with the GPU idle (clocks down to ~375 MHz on the H200), and 25 ms of warm-up
    left the first shape of a run slow for the peers (benchmarks/NOTES.md v6)."""
    if str(device).startswith("cuda"):
        import triton.testing
        return float(triton.testing.do_bench(fn, warmup=200, rep=100, return_mode="median"))
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def host_ms(fn, device: str, *, calls: int = 10) -> float:
    """The host's milliseconds a call of ``fn()`` (its Python and launches): ``calls`` calls issued back
    to back, timed on the host. On a GPU the queue is drained first and not waited for inside, so the
    GPU runs behind the host: when this nears median_ms's reading, the launches, not the kernels, set
    the pace (the B = 1 shapes on a slow host, benchmarks/NOTES.md v32). On the CPU the host's time
    is the whole call's."""
    cuda = str(device).startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    if cuda:
        torch.cuda.synchronize()
    return elapsed * 1e3 / calls


def random_problem(B, T, H, HV, K, V, *, device="cpu", dtype=torch.float32, gates="decaying", seed=0,
                   unit_keys=False):
    """q, k, v in ``dtype``; g, beta float32. gates: "decaying" = logsigmoid(randn + 4) (memory fades
    within a few chunks), "long" = logsigmoid(randn + 9) (long memory), as in GUIDE.md section 2.
    unit_keys: q and k rows scaled to unit l2 norm (for calls without use_qk_l2norm, where raw randn
    keys, of norm ~sqrt(K), would make the delta rule diverge)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    shift = {"decaying": 4.0, "long": 9.0}[gates]
    q = torch.randn(B, T, H, K, generator=gen)
    k = torch.randn(B, T, H, K, generator=gen)
    if unit_keys:
        q, k = (torch.nn.functional.normalize(x, dim=-1) for x in (q, k))
    q, k = q.to(device, dtype), k.to(device, dtype)
    v = torch.randn(B, T, HV, V, generator=gen).to(device, dtype)
    g = torch.nn.functional.logsigmoid(torch.randn(B, T, HV, generator=gen) + shift).to(device)
    beta = torch.rand(B, T, HV, generator=gen).to(device)
    return q, k, v, g, beta

"""How much of a launch's host time is Triton's binding and how much the driver's launch (GPU only).

The host stages of a B = 1 call (gpu_check.py stages, NOTES.md v26) put 30-90 us on each Triton
launch. This records the launches of one call of a config (their kernel, grid, arguments), then
times each launch three ways on the same arguments, the GPU kept busy:

    jit:     kernel[grid](*args, **kw)    Triton's JITFunction.run: bind, specialise, look up, launch
    bind:    the binder alone (the first step above: arguments to the specialisation key)
    direct:  the compiled kernel's run with the bound arguments kept from the first launch

so that a launch cache's prize is known before it is built. NOTES.md v27: one was built on these
numbers (keyed by Triton's own per-argument specialisation) and saved only 3-5 us a launch, its
key's Python costing more than Triton's binder; it was dropped. Every launch really runs (the WY pass's counts only
grow, which the walks' waits allow). Usage on the GPU machine:

    python benchmarks/launch_overhead.py [CONFIG] [BxT] [launches]     (default: "auto split" 1x32768 50)
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from triton import knobs                                     # noqa: E402
from triton.runtime.driver import driver                     # noqa: E402
from triton.runtime.jit import compute_cache_key             # noqa: E402

import gdn.ops.triton.forward as forward                     # noqa: E402
from gdn.cli.timing import random_problem                    # noqa: E402
from gdn.ops.triton.configs import config                    # noqa: E402
from compile_report import kernels_swapped                   # noqa: E402  (this script's folder)


def record_launches(call) -> list:
    """[(name, jit function, grid, args, kw, stream)] of one call, each launched as usual."""
    seen = []

    class Recorder:
        def __init__(self, name, fn):
            self.name, self.fn = name, fn

        def __getitem__(self, grid):
            def launch(*args, **kw):
                stream = torch.cuda.current_stream()
                seen.append((self.name, self.fn, grid, args, kw, stream))
                return self.fn[grid](*args, **kw)
            return launch

    with kernels_swapped(Recorder):
        call()
    return seen


def timed(fn, n: int) -> float:
    """Host us a call of fn, n calls (the GPU's queue absorbs the launches)."""
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "auto split"
    B, T = (int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "1x32768").split("x"))
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    q, k, v, g, beta = random_problem(B, T, 16, 32, 128, 128, device="cuda", dtype=torch.bfloat16)
    kw = dict(scale=128 ** -0.5, use_qk_l2norm=True, output_final_state=True, **config(name))
    call = lambda: forward.triton_forward(q, k, v, g, beta, **kw)
    call()                                                   # compiles
    torch.cuda.synchronize()
    launches = record_launches(call)
    torch.cuda.synchronize()
    device = driver.active.get_current_device()
    print(f"{name}, B{B} x T{T}: host us a launch ({n} launches each)")
    print(f"  {'kernel':<26} {'jit':>8} {'bind':>8} {'direct':>8}")
    for kname, fn, grid, args, kwargs, stream in launches:
        with torch.cuda.stream(stream):
            jit_us = timed(lambda: fn[grid](*args, **kwargs), n)
            try:
                kernel_cache, key_cache, _, _, binder = fn.device_caches[device]
                # The options JITFunction.run adds before binding (Triton 3.6), so that the key matches.
                options_kw = dict(kwargs, debug=kwargs.get("debug", fn.debug) or knobs.runtime.debug,
                                  instrumentation_mode=knobs.compilation.instrumentation_mode)
                bind_us = timed(lambda: binder(*args, **options_kw), n)
                bound, specialization, options = binder(*args, **options_kw)
                compiled = kernel_cache[compute_cache_key(key_cache, specialization, options)]
                values = tuple(bound.values())
                grid3 = tuple(grid) + (1,) * (3 - len(grid))
                raw = stream.cuda_stream
                meta = compiled.launch_metadata(grid3, raw, *values)

                def direct():
                    compiled.run(*grid3, raw, compiled.function, compiled.packed_metadata, meta,
                                 knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, *values)
                direct_us = timed(direct, n)
                cells = f"{bind_us:8.1f} {direct_us:8.1f}"
            except Exception as e:                           # Triton's internals differ: say so, go on
                cells = f"   (direct launch failed: {type(e).__name__}: {e})"
        print(f"  {kname:<26} {jit_us:8.1f} {cells}", flush=True)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()

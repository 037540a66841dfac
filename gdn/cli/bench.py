"""`gdn bench`: gdn and every importable peer on the same inputs, in one process.

Per shape and gate regime: median time (triton.testing.do_bench on a GPU, the faster of two rounds
over all providers; wall clock on a CPU), peak memory on a GPU, the ratio of each peer's time to
ours, and our time against the floor (the larger of bytes / copy bandwidth and chunk-algorithm
FLOPs / matmul rate). With --graphs (GPU) each forward is also timed as the replay of a CUDA graph
that captured it (mode "fwd-graph": no host work a call, so a slow host cannot set the pace; a
provider that cannot be captured is skipped there). On a GPU the fwd rows also record each
provider's host milliseconds a call (timing.host_ms: its Python and launches); where ours nears its
time, the row measured the host, not the kernels. Prints a table, writes results.json and a PNG plot
(when matplotlib is installed) under --out.

--l2norm picks the q/k normalisation regimes: "on" (use_qk_l2norm=True on raw randn q, k: what the
Qwen3.5 / Qwen3-Next layers call) and "off" (unit-norm q, k given, no normalisation asked: the
setting the peers publish their times in). They are timed apart because the peers normalise in
extra passes over q and k before their kernels (FLA's and FlashQLA's l2norm_fwd), while ours
normalises inside the WY pass.
"""
from __future__ import annotations

import itertools
import json
import os
import platform
import time

import torch

from .. import gated_delta_rule
from .argtypes import UsageError, check_heads
from .peers import available_peers
from .timing import host_ms, median_ms, random_problem

GPU_SHAPES = "1x8192,1x32768,1x131072,8x4096,32x2048,varlen32768/16"
CPU_SHAPES = "1x512,1x2048,1x8192"
# H200 ceilings measured on the GPU machine (GUIDE.md section 2): copy bandwidth and bf16 matmul rate.
COPY_BYTES_PER_S = 4.28e12
MATMUL_FLOP_PER_S = 693e12
FLOP_PER_TOKEN_PER_HEAD = 184e3          # chunk algorithm at C=64, K=V=128 (GUIDE.md section 2)
ROUNDS = 2                               # interleaved timing rounds a row on a GPU (the fastest kept)


def parse_shapes(spec: str):
    """'1x8192,varlen32768/16' -> [(label, B, T, pieces or None)]."""
    shapes = []
    for item in spec.split(","):
        if item.startswith("varlen"):
            total, pieces = item[len("varlen"):].split("/")
            shapes.append((item, 1, int(total), int(pieces)))
        else:
            B, T = item.split("x")
            shapes.append((item, int(B), int(T), None))
    return shapes


def random_cu_seqlens(T: int, pieces: int, device, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    cuts = torch.randperm(T - 1, generator=gen)[: pieces - 1].add(1).sort().values
    return torch.cat([torch.tensor([0]), cuts, torch.tensor([T])]).to(device=device, dtype=torch.int32)


def floor_ms(B, T, H, HV, K, V, elem_bytes) -> float:
    """The time no implementation beats: one read of q, k, v, g, beta and one write of o, or the
    chunk algorithm's matmul FLOPs at the measured rate, whichever is longer."""
    tokens = B * T
    nbytes = tokens * ((2 * H * K + 2 * HV * V) * elem_bytes + 2 * HV * 4)
    flops = tokens * HV * FLOP_PER_TOKEN_PER_HEAD * (K / 128) * (V / 128)
    return max(nbytes / COPY_BYTES_PER_S, flops / MATMUL_FLOP_PER_S) * 1e3


def _config_provider(config: dict):
    from ..ops.triton import triton_forward
    return lambda q, *a, **kw: triton_forward(q, *a, scale=q.shape[-1] ** -0.5, **kw, **config)


def _providers(device: str, names, configs=()):
    ours = {}
    if configs and not device.startswith("cuda"):
        raise UsageError(f"--configs names Triton configurations: it needs a CUDA device, got {device}")
    if device.startswith("cuda"):
        from ..ops.triton.configs import config
        ours["gdn"] = lambda *a, **kw: gated_delta_rule(*a, backend="triton", **kw)
        for cname in configs:        # named launcher configurations, timed beside the default
            try:
                knobs = config(cname)                                   # "a&b" merges
            except ValueError as err:
                raise UsageError(f"--configs: {err}") from None
            ours[f"gdn[{cname}]"] = _config_provider(knobs)
    else:
        ours["gdn"] = lambda *a, **kw: gated_delta_rule(*a, backend="chunk", **kw)
        ours["gdn-scan"] = lambda *a, **kw: gated_delta_rule(*a, backend="scan", **kw)
    errors = {}
    peers = available_peers(device, errors=errors)
    for name, reason in errors.items():
        print(f"  (peer {name} not timed: {reason})")
    providers = {**ours, **peers}
    if names:        # --providers picks among ours and the peers; --configs rows are always kept
        unknown = sorted(set(names) - set(providers) - set(errors))     # unimportable peers were named above
        if unknown:
            raise UsageError(f"--providers: unknown {unknown}, expected some of {sorted({**providers, **errors})}")
        providers = {k: v for k, v in providers.items() if k in names or k.startswith("gdn[")}
        if not providers:            # only unimportable peers named: nothing to time
            raise UsageError(f"--providers: none of {names} can be timed here (see above)")
    return providers


def parse_l2norm(spec: str) -> list[bool]:
    """'on,off' -> [True, False]: the use_qk_l2norm regimes to time."""
    table = {"on": True, "off": False}
    items = spec.split(",")
    if any(item not in table for item in items):
        raise ValueError(f"--l2norm: expected a comma-separated subset of on,off, got {spec!r}")
    return [table[item] for item in items]


def qk_label(l2norm: bool) -> str:
    """A row's q/k regime as the table and the log name it."""
    return "l2norm" if l2norm else "unit"


def _call(fn, inputs, cu, backward, l2norm=True):
    q, k, v, g, beta = inputs
    kwargs = dict(initial_state=None, output_final_state=True, cu_seqlens=cu, use_qk_l2norm=l2norm)
    if not backward:
        with torch.no_grad():
            return fn(q, k, v, g, beta, **kwargs)
    o, S = fn(q, k, v, g, beta, **kwargs)
    (o.float().sum() + S.sum()).backward()
    return o, S


def _graph_replay(fn, inputs, cu, l2norm=True):
    """The replay of a CUDA graph that captured one forward of fn on these inputs (warmed up on a side
    stream first, as capture asks): every kernel of the call launched with no host work."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            _call(fn, inputs, cu, False, l2norm)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _call(fn, inputs, cu, False, l2norm)
    return graph.replay


def _timed_calls(providers, inputs, cu, mode: str, where: str, l2norm: bool = True) -> dict:
    """name -> what to time for one row of mode "fwd", "fwd+bwd" or "fwd-graph" (a CUDA graph's replay,
    _graph_replay), each provider called once first (its compilation). A provider that raises is
    skipped there (printed, with where: the row's shape and gates), except a ValueError of ours or a
    peer outside fwd-graph: only a named config may refuse a shape (the split: packed sequences),
    while any provider may fail to be captured."""
    backward = mode == "fwd+bwd"
    ready = {}
    for name, fn in providers.items():
        try:
            _call(fn, inputs, cu, backward, l2norm)
            if mode == "fwd-graph":
                ready[name] = _graph_replay(fn, inputs, cu, l2norm)
            else:
                ready[name] = lambda fn=fn: _call(fn, inputs, cu, backward, l2norm)
        except (NotImplementedError, torch.cuda.OutOfMemoryError, RuntimeError, ValueError) as err:
            if isinstance(err, ValueError) and not name.startswith("gdn[") and mode != "fwd-graph":
                raise
            print(f"  {where} {mode} {name}: skipped ({type(err).__name__}: {str(err)[:80]})")
    return ready


def run_bench(args) -> None:
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    on_gpu = device.startswith("cuda")
    graphs = getattr(args, "graphs", False)
    if graphs and not on_gpu:
        raise UsageError(f"--graphs times CUDA graph replays: it needs a CUDA device, got {device}")
    HV = args.HV or (32 if on_gpu else args.H)
    check_heads(args.H, HV)
    dtype = torch.bfloat16 if on_gpu else torch.float32
    shapes = parse_shapes(args.shapes or (GPU_SHAPES if on_gpu else CPU_SHAPES))
    names = None
    if args.providers is not None:
        names = [name.strip() for name in args.providers.split(",") if name.strip()]
        if not names:
            raise UsageError(f"--providers: expected comma-separated names, got {args.providers!r}")
    regimes = parse_l2norm(getattr(args, "l2norm", None) or ("on,off" if on_gpu else "on"))
    providers = _providers(device, names, args.configs.split(",") if args.configs else ())
    try:                            # before any timing: a bad folder would lose the whole run
        os.makedirs(args.out, exist_ok=True)
    except OSError as err:
        raise UsageError(f"--out: cannot make the folder {args.out!r} ({err.strerror})") from None
    if not on_gpu:
        torch.set_num_threads(os.cpu_count() or 1)
    machine = torch.cuda.get_device_name() if on_gpu else f"{platform.processor() or platform.machine()}, " \
        f"{torch.get_num_threads()} threads"
    print(f"gdn bench | {machine} | torch {torch.__version__} | H={args.H} HV={HV} K={args.K} V={args.V} "
          f"{str(dtype)[6:]} inputs, fp32 gates/states, final state | providers: {', '.join(providers)}")
    modes = ["fwd"] + (["fwd-graph"] if graphs else []) + (["fwd+bwd"] if args.backward else [])
    rows = []
    # The first shape of a GPU run ran slow for every provider in some runs (0.55 against 0.36 ms at
    # B1 x T8k, benchmarks/NOTES.md v5-v25, cause unknown): it is timed twice there, the first pass
    # (its first gates and l2norm regime) printed and not kept.
    warm = args.warm_pass == "on" or (args.warm_pass == "auto" and on_gpu)
    passes = [(False, shape) for shape in shapes[:1] if warm] + [(True, shape) for shape in shapes]
    for keep, (label, B, T, pieces) in passes:
        cases = list(itertools.product(args.gates.split(","), regimes))
        for gates, l2norm in cases[:None if keep else 1]:
            qk = qk_label(l2norm)
            inputs = random_problem(B, T, args.H, HV, args.K, args.V, device=device, dtype=dtype, gates=gates,
                                    unit_keys=not l2norm)
            cu = random_cu_seqlens(T, pieces, device) if pieces else None
            for mode in modes:
                row = dict(shape=label, gates=gates, l2norm=l2norm, mode=mode, ms={}, peak_gib={}, host_ms={},
                           B=B, T=T)
                backward = mode == "fwd+bwd"
                if backward:
                    inputs = tuple(x.detach().requires_grad_(x.is_floating_point()) for x in inputs)
                ready = _timed_calls(providers, inputs, cu, mode, f"{label} {gates} {qk}", l2norm)
                # Every provider compiled first, then timed in ROUNDS interleaved rounds, the fastest
                # round kept: a provider timed right after another's compile (tens of seconds, the
                # GPU idle) may run on lowered clocks (benchmarks/NOTES.md, v12 and v14).
                for _ in range(ROUNDS if on_gpu else 1):
                    for name, timed in ready.items():
                        ms = median_ms(timed, device, repeats=3)
                        row["ms"][name] = min(ms, row["ms"].get(name, ms))
                for name in ready:
                    fn = providers[name]
                    if on_gpu and mode == "fwd":
                        row["host_ms"][name] = host_ms(ready[name], device)
                    if on_gpu and mode != "fwd-graph":       # (a graph's memory is its own pool's)
                        torch.cuda.synchronize()
                        torch.cuda.reset_peak_memory_stats()
                        base = torch.cuda.memory_allocated()
                        _call(fn, inputs, cu, backward, l2norm)
                        torch.cuda.synchronize()
                        row["peak_gib"][name] = (torch.cuda.max_memory_allocated() - base) / 2 ** 30
                    host = f" (host {row['host_ms'][name]:.3f} ms a call)" if name in row["host_ms"] else ""
                    print(f"  {label:>16} {gates:>8} {qk:>7} {mode:>7} {name:>9}: {row['ms'][name]:9.3f} ms{host}"
                          f"{'' if keep else '   (warm-up pass, not kept)'}", flush=True)
                row["floor_ms"] = floor_ms(B, T, args.H, HV, args.K, args.V, 2) if on_gpu else None
                if keep:
                    rows.append(row)
                    _write_json(rows, args.out, machine)     # a run cut short keeps what it measured
    _print_table(rows, providers)
    _write(rows, args.out, machine)


def _print_table(rows, providers) -> None:
    """The rows as a markdown table: each provider's ms, each peer's time over ours, ours against the
    floor, and (where rows recorded it: GPU fwd) our host ms a call."""
    peers = [p for p in providers if not p.startswith("gdn")]
    with_host = any("gdn" in r.get("host_ms", {}) for r in rows)
    head = "| shape | gates | q, k | mode | " + " | ".join(f"{p} ms" for p in providers) + " | " + \
        " | ".join(f"{p}/gdn" for p in peers) + " | gdn % of floor |" + (" gdn host ms |" if with_host else "")
    print("\n" + head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in rows:
        ms = r["ms"]
        cells = [f"{ms[p]:.3f}" if p in ms else "-" for p in providers]
        ratios = [f"{ms[p] / ms['gdn']:.2f}x" if p in ms and "gdn" in ms else "-" for p in peers]
        floor = f"{100 * r['floor_ms'] / ms['gdn']:.0f}%" if "gdn" in ms and r["floor_ms"] else "-"
        host = r.get("host_ms", {})
        tail = (f" {host['gdn']:.3f} |" if "gdn" in host else " - |") if with_host else ""
        qk = qk_label(r.get("l2norm", True))
        print(f"| {r['shape']} | {r['gates']} | {qk} | {r['mode']} | " + " | ".join(cells) + " | " +
              " | ".join(ratios) + f" | {floor} |" + tail)


def _write_json(rows, out: str, machine: str) -> None:
    os.makedirs(out, exist_ok=True)
    meta = dict(machine=machine, torch=torch.__version__, date=time.strftime("%Y-%m-%d"))
    with open(os.path.join(out, "results.json"), "w") as fh:
        json.dump(dict(meta=meta, rows=rows), fh, indent=1)


def _write(rows, out: str, machine: str) -> None:
    _write_json(rows, out, machine)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"wrote {out}/results.json (no plot: matplotlib is not installed)")
        return
    fwd = [r for r in rows if r["mode"] == "fwd"]
    names = sorted({p for r in fwd for p in r["ms"]})
    fig, ax = plt.subplots(figsize=(max(6, len(fwd) * 0.9), 4))
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        ax.bar([j + i * width for j in range(len(fwd))], [r["ms"].get(name, 0) for r in fwd], width, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(fwd))])
    ax.set_xticklabels([f"{r['shape']}\n{r['gates']}" + ("" if r.get("l2norm", True) else "\nunit qk")
                        for r in fwd], fontsize=7)
    ax.set_yscale("log")                         # peers span two orders of magnitude
    ax.set_ylabel("forward ms, log scale (lower is better)")
    ax.set_title(f"gdn bench: {machine}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "bench.png"), dpi=120)
    print(f"wrote {out}/results.json and {out}/bench.png")

"""One Qwen3.5-shaped Gated DeltaNet layer on the CPU: gdn's layer vs transformers' own, same weights.

Shape: hidden 2048, 16 key heads, 32 value heads of 128, conv kernel 4, B=1, T=2048 tokens,
float32, no grad, torch.set_num_threads(2). transformers runs its reference torch code (FLA is
never used: the benchmark binds the torch functions even where fla-core is installed).

Two times per layer, medians over repeats, measured in one run, the four cases taking turns:
- layer: the whole forward.
- outside projections: the forward with the five linear projections (in_proj_qkv, in_proj_z,
  in_proj_b, in_proj_a, out_proj) replaced by stubs returning their precomputed outputs, i.e. the
  conv, the gates, the op and the gated norm. The projections are the same matmuls in both.

    python benchmarks/bench_layer_cpu.py [--tokens 2048] [--repeats 5]
"""
from __future__ import annotations

import argparse
import copy
import platform
import statistics
import time

import torch
from torch import nn

HIDDEN, H, HV, K, V, W = 2048, 16, 32, 128, 128, 4
PROJECTIONS = ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a")


class Precomputed(nn.Module):
    """Stands in for a projection: returns its output computed beforehand."""

    def __init__(self, output: torch.Tensor):
        super().__init__()
        self.output = output

    def forward(self, x):
        return self.output


def transformers_layer():
    """transformers' Qwen3_5GatedDeltaNet (layer 0 of a 1-layer text config), random O(1) weights."""
    import transformers.models.qwen3_5.modeling_qwen3_5 as hf
    from transformers import Qwen3_5TextConfig

    config = Qwen3_5TextConfig(hidden_size=HIDDEN, num_hidden_layers=1, layer_types=["linear_attention"],
                               linear_num_key_heads=H, linear_num_value_heads=HV, linear_key_head_dim=K,
                               linear_value_head_dim=V, linear_conv_kernel_dim=W)
    torch.manual_seed(0)
    layer = hf.Qwen3_5GatedDeltaNet(config, layer_idx=0).eval()
    with torch.no_grad():                      # O(1) activations, gates with short and long memory
        for name, p in layer.named_parameters():
            if name == "A_log":
                p.copy_(torch.empty_like(p).uniform_(0.02, 2.0).log())
            elif name == "dt_bias":
                p.copy_(0.5 * torch.randn_like(p))
            elif name == "norm.weight":
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif "conv1d" in name:
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
    return layer


def gdn_layer(weights: dict):
    from gdn.layers import GatedDeltaNet, GatedDeltaNetConfig

    layer = GatedDeltaNet(GatedDeltaNetConfig(hidden_size=HIDDEN, num_k_heads=H, num_v_heads=HV, head_k_dim=K,
                                              head_v_dim=V, conv_kernel_size=W)).eval()
    layer.load_state_dict(weights)
    return layer


def interleaved_medians_ms(fns: dict, repeats: int) -> dict:
    """Median time of each callable, in ms. The callables take turns within every repeat, so a
    change of machine load (this CPU is shared) hits all of them alike."""
    for fn in fns.values():
        fn()                                     # warm-up
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) * 1e3 for name, ts in times.items()}


def gdn_parts_ms(layer, x, repeats: int) -> dict:
    """gdn's non-projection work piece by piece, on the layer's own intermediate tensors."""
    import torch.nn.functional as F

    import gdn
    from gdn.layers.conv import causal_conv1d
    from gdn.layers.norm import gated_rms_norm

    mixed, z, b, a = layer.project(x)
    conv_out, _ = causal_conv1d(mixed, layer.conv1d.weight)
    q, k, v = torch.split(conv_out, [H * K, H * K, HV * V], dim=-1)
    q, k, v = q.view(1, -1, H, K), k.view(1, -1, H, K), v.view(1, -1, HV, V)
    beta = b.float().sigmoid()
    g = -layer.A_log.float().exp() * F.softplus(a.float() + layer.dt_bias.float())
    o, _ = gdn.gated_delta_rule(q, k, v, g, beta, use_qk_l2norm=True)
    return interleaved_medians_ms({
        "conv+SiLU": lambda: causal_conv1d(mixed, layer.conv1d.weight),
        "gates": lambda: (b.float().sigmoid(), -layer.A_log.float().exp() * F.softplus(a.float() + layer.dt_bias)),
        "op (gdn.gated_delta_rule, chunk)": lambda: gdn.gated_delta_rule(q, k, v, g, beta, use_qk_l2norm=True),
        "gated norm": lambda: gated_rms_norm(o, z, layer.norm.weight, layer.config.rms_norm_eps)}, repeats)


def stub_projections(layer, x):
    """Replace the five projections by precomputed outputs (out_proj by the identity: its input
    is what the rest of the layer produced)."""
    for name in PROJECTIONS:
        setattr(layer, name, Precomputed(getattr(layer, name)(x)))
    layer.out_proj = nn.Identity()


def machine_line() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import transformers

    return (f"{cpu}, torch.set_num_threads({torch.get_num_threads()}), torch {torch.__version__}, "
            f"transformers {transformers.__version__}, float32, no grad")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(2)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.set_grad_enabled(False)

    # Whatever transformers bound at import (FLA / causal-conv1d where installed), time its own
    # torch code: that is what it can run on a CPU.
    from gdn.integrations.transformers import transformers_torch_code

    with transformers_torch_code():
        hf = transformers_layer()
        ours = gdn_layer(hf.state_dict())
        x = torch.randn(1, args.tokens, HIDDEN, generator=torch.Generator().manual_seed(1))
        y_hf, y_ours = hf(x), ours(x)
        rel = ((y_ours - y_hf).norm() / y_hf.norm()).item()
        # The "outside" variants are copies whose projections are stubs (same weights elsewhere).
        hf_outside, ours_outside = copy.deepcopy(hf), copy.deepcopy(ours)
        stub_projections(hf_outside, x)
        stub_projections(ours_outside, x)
        t = interleaved_medians_ms({
            "hf": lambda: hf(x), "ours": lambda: ours(x),
            "hf_outside": lambda: hf_outside(x), "ours_outside": lambda: ours_outside(x)}, args.repeats)
        parts = gdn_parts_ms(ours, x, args.repeats)
    rows = {"transformers (torch)": (t["hf"], t["hf_outside"]), "gdn": (t["ours"], t["ours_outside"])}

    print(f"One Qwen3.5-shaped Gated DeltaNet layer, B=1, T={args.tokens}, hidden {HIDDEN}, H={H}, HV={HV}, "
          f"K=V={K}, conv {W}; median of {args.repeats}, taking turns")
    print(f"machine: {machine_line()}")
    print(f"output relative difference gdn vs transformers: {rel:.1e}\n")
    print("| layer | whole layer | outside the 5 projections (conv, gates, op, norm) |")
    print("|---|---|---|")
    for name, (whole, outside) in rows.items():
        print(f"| {name} | {whole:.1f} ms | {outside:.1f} ms |")
    (w0, o0), (w1, o1) = rows.values()
    print(f"| speed-up | {w0 / w1:.2f}x | {o0 / o1:.2f}x |")
    print("\ngdn outside the projections, by part: " + ", ".join(f"{k} {v:.1f} ms" for k, v in parts.items()))


if __name__ == "__main__":
    main()

"""Tiny random Qwen3.5 / Qwen3.5-MoE / Qwen3-Next models built with transformers (no download), shared
by the layer and integration tests.

Linear-attention shape: H = 2 key heads, HV = 4 value heads (grouped, G = 2), K = 16, V = 24
(K != V on purpose), conv kernel 4, hidden 64; 4 layers with layer 3 full attention.
"""
from __future__ import annotations

import pytest
import torch

LINEAR = dict(linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
              linear_value_head_dim=24, linear_conv_kernel_dim=4)
COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=2,
              num_key_value_heads=1, head_dim=32, max_position_embeddings=512, **LINEAR)
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32)
KINDS = ("qwen3_5", "qwen3_5_moe", "qwen3_next")
FULL_ATTENTION_LAYER = 3


def tiny_config(kind: str):
    """The transformers text config of a tiny model of this family."""
    if kind == "qwen3_5":
        from transformers import Qwen3_5TextConfig
        return Qwen3_5TextConfig(**COMMON)
    if kind == "qwen3_5_moe":
        from transformers import Qwen3_5MoeTextConfig
        return Qwen3_5MoeTextConfig(**COMMON, **MOE)
    if kind == "qwen3_next":
        from transformers import Qwen3NextConfig
        return Qwen3NextConfig(**COMMON, **MOE)
    raise ValueError(kind)


def tiny_model(kind: str, seed: int = 0):
    """A float32 CausalLM in eval mode whose linear-attention weights are O(1) (see :func:`randomize_`)."""
    import transformers

    cls = {"qwen3_5": transformers.Qwen3_5ForCausalLM, "qwen3_5_moe": transformers.Qwen3_5MoeForCausalLM,
           "qwen3_next": transformers.Qwen3NextForCausalLM}[kind]
    torch.manual_seed(seed)
    model = cls(tiny_config(kind)).eval()
    randomize_(model, seed)
    return model


def randomize_(model: torch.nn.Module, seed: int = 0) -> None:
    """Re-draw every linear-attention parameter so activations are O(1) and the gates span short
    and long memories: with transformers' init (std 0.02) outputs are ~1e-2 and a wrong layer
    could still pass a tolerance."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".linear_attn." not in name:
                continue
            if name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(0.02, 2.0, generator=gen).log())
            elif name.endswith("dt_bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            elif name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            elif "conv1d" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            else:                                   # projections [out, in]
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5)


MODELING_MODULES = ("transformers.models.qwen3_5.modeling_qwen3_5",
                    "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe",
                    "transformers.models.qwen3_next.modeling_qwen3_next")
KERNEL_FUNCTIONS = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule", "causal_conv1d_fn",
                    "causal_conv1d_update")


def use_transformers_torch_code(monkeypatch) -> None:
    """Make the modeling modules call transformers' own torch code, even where fla-core or
    causal-conv1d are installed and transformers bound their kernels at import (functools.wraps
    kept the torch function in ``__wrapped__``): the reference the tests compare with."""
    import importlib

    for module_name in MODELING_MODULES:
        module = importlib.import_module(module_name)
        for name in KERNEL_FUNCTIONS:
            fn = getattr(module, name)
            monkeypatch.setattr(module, name, getattr(fn, "__wrapped__", fn))


@pytest.fixture
def no_grad_and_torch_code(monkeypatch):
    """Tests compare with transformers' own torch code (whatever kernels it bound at import), without
    autograd. Test modules opt in with an autouse fixture that requests this one."""
    use_transformers_torch_code(monkeypatch)
    with torch.no_grad():
        yield

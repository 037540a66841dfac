"""`gdn demo`, the model part: a tiny Qwen3.5-shaped model (random weights, built locally, nothing
downloaded) runs one prompt through transformers as shipped and through the gdn patch; prints how
far the logits are apart, whether greedy generation picks the same tokens, and the time of each."""
from __future__ import annotations

import time

import torch

PROMPT_TOKENS = 512
NEW_TOKENS = 16


def build_tiny_qwen3_5(device: str = "cpu", seed: int = 0):
    """A 4-layer Qwen3.5 text model (3 Gated DeltaNet layers + 1 full attention), hidden 256,
    linear attention with 4 key heads and 8 value heads of 64, float32, random weights.

    Returns:
        ``(model, config)``, the model in eval mode on ``device``.
    """
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    config = Qwen3_5TextConfig(
        vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=64, linear_value_head_dim=64,
        linear_conv_kernel_dim=4, max_position_embeddings=4096, tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(config).to(device=device, dtype=torch.float32).eval()
    return model, config


def run_demo_model(device: str = "cpu", print=print, prompt_tokens: int = PROMPT_TOKENS,
                   new_tokens: int = NEW_TOKENS) -> None:
    """Compare transformers' Qwen3.5 with and without ``gdn.integrations.transformers.patch``.

    Args:
        device: "cpu" or "cuda".
        print: where the report lines go.
        prompt_tokens: prompt length (random token ids).
        new_tokens: tokens generated greedily.
    """
    from transformers.utils import logging as hf_logging

    from gdn.integrations.transformers import patch, transformers_torch_code, unpatch

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()        # transformers warns that its torch fallback is slow
    try:
        model, _ = build_tiny_qwen3_5(device)
        generator = torch.Generator().manual_seed(1)
        ids = torch.randint(0, model.config.vocab_size, (1, prompt_tokens), generator=generator).to(device)
        print(f"tiny Qwen3.5-shaped model (random weights): 3 Gated DeltaNet layers + 1 attention, "
              f"prompt {prompt_tokens} tokens, greedy {new_tokens} new tokens, {device}")
        # The unpatched side is transformers' own torch code: with fla-core installed, transformers
        # would call FLA's Triton kernels, which fail on CPU tensors.
        with transformers_torch_code():
            reference = _measure(model, ids, new_tokens, device)
        patch(model)
        try:
            patched = _measure(model, ids, new_tokens, device)
        finally:
            unpatch(model)
    finally:
        hf_logging.set_verbosity(verbosity)

    (l0, g0, p0, d0), (l1, g1, p1, d1) = reference, patched
    print(f"  max |logit difference|: {(l0 - l1).abs().max().item():.2e} "
          f"(logits up to {l0.abs().max().item():.2f})")
    print(f"  greedy tokens agree: {'yes' if torch.equal(g0, g1) else 'no'} ({int((g0 == g1).sum())}/{g0.numel()})")
    for name, (_, _, t_prefill, t_generate) in (("transformers", reference), ("transformers + gdn patch", patched)):
        print(f"  {name:<26} prefill {t_prefill * 1e3:8.1f} ms   generate {t_generate * 1e3:8.1f} ms")
    print(f"  speed-up: prefill {p0 / p1:.1f}x, generate {d0 / d1:.1f}x")


def _measure(model, ids, new_tokens: int, device: str):
    """Logits of the prompt, greedy new tokens, and the time of each (after a warm-up)."""
    with torch.no_grad():
        # Warm-up with the same shapes: on a GPU the first calls compile Triton kernels.
        model(ids)
        model.generate(ids, max_new_tokens=2, min_new_tokens=2, do_sample=False, pad_token_id=0)
        _sync(device)
        t = time.perf_counter()
        logits = model(ids).logits
        _sync(device)
        t_prefill = time.perf_counter() - t
        t = time.perf_counter()
        tokens = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                                pad_token_id=0)
        _sync(device)
        t_generate = time.perf_counter() - t
    return logits, tokens[:, ids.shape[1]:], t_prefill, t_generate


def _sync(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
